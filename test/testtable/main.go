// Command testtable prints a row per top-level test from the JSON stream of
// `go tool test2json` (a suite's compiled test binary run with
// -test.v=test2json): its result, its time and, for a failure, the last
// line of its output that reads like the reason. hack/test-serving.sh uses it
// for Knative Serving's e2e suite, whose plain -v log interleaves four
// parallel tests and runs to tens of thousands of lines.
//
//	go run ./test/testtable [-markdown] FILE.json
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// event is the part of test2json's event that the table needs.
type event struct {
	Action  string  // run, pause, cont, pass, fail, skip, output, ...
	Test    string  // "TestX" or "TestX/sub"; empty for the package
	Elapsed float64 // seconds, on pass, fail and skip
	Output  string
}

// row is one top-level test.
type row struct {
	Name    string
	Result  string // PASS, FAIL, SKIP, or RUNNING when the stream ended first
	Seconds float64
	Reason  string // the last failure-like output line, or the skip message
}

// testLine is a t.Log/t.Error line: "    file_test.go:123: message".
var testLine = regexp.MustCompile(`^\s*([\w.-]+\.go):(\d+): (.*)$`)

// failureWords mark a testing line as a reason rather than progress: the
// suites log a lot (polling, responses), and their t.Fatal messages use these.
var failureWords = regexp.MustCompile(`(?i)error|fail|timed out|timeout|unexpected|want|expected|mismatch|panic|not ready|deadline`)

// objectNames are the names of Kubernetes objects in a message ("Creating
// Service image-pull-error-tzlbyaje"): a test named for an error names its
// objects so, and they are not the reason it failed.
var objectNames = regexp.MustCompile(`\S*[a-z0-9]-[a-z0-9]\S*`)

// parse reads a test2json stream and returns the rows in order of their
// first event.
func parse(r io.Reader) ([]row, error) {
	rows := map[string]*row{}
	var order []string
	// the last failure-like line per top-level test, from any of its
	// subtests: t.Fatal ends a test, and progress lines before it may
	// mention errors they are waiting out
	reasons := map[string]string{}
	skipMsg := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // the binary's own stderr mixed in
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("a test2json line that is not JSON: %q: %w", line, err)
		}
		if e.Test == "" {
			continue
		}
		top, _, sub := strings.Cut(e.Test, "/")
		r, ok := rows[top]
		if !ok {
			r = &row{Name: top, Result: "RUNNING"}
			rows[top] = r
			order = append(order, top)
		}
		switch e.Action {
		case "output":
			m := testLine.FindStringSubmatch(strings.TrimRight(e.Output, "\n"))
			if m == nil {
				continue
			}
			msg := fmt.Sprintf("%s:%s: %s", m[1], m[2], m[3])
			if !sub {
				skipMsg[top] = msg // t.Skip's message is the test's last line
			}
			if failureWords.MatchString(objectNames.ReplaceAllString(m[3], "")) {
				reasons[top] = msg
			}
		case "pass", "fail", "skip":
			if sub {
				continue
			}
			r.Result = strings.ToUpper(e.Action)
			r.Seconds = e.Elapsed
			switch e.Action {
			case "fail":
				r.Reason = reasons[top]
			case "skip":
				r.Reason = skipMsg[top]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the test2json stream: %w", err)
	}
	out := make([]row, 0, len(order))
	for _, name := range order {
		out = append(out, *rows[name])
	}
	return out, nil
}

// write prints the rows sorted by name, then the totals.
func write(w io.Writer, rows []row, markdown bool) {
	sorted := append([]row(nil), rows...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	counts := map[string]int{}
	if markdown {
		fmt.Fprintln(w, "| test | result | s | reason (last failure-like line, or the skip message) |")
		fmt.Fprintln(w, "|---|---|---:|---|")
	}
	for _, r := range sorted {
		counts[r.Result]++
		reason := r.Reason
		if len(reason) > 200 {
			reason = reason[:200] + "…"
		}
		if markdown {
			fmt.Fprintf(w, "| %s | %s | %.1f | %s |\n", r.Name, r.Result, r.Seconds, strings.ReplaceAll(reason, "|", `\|`))
		} else {
			fmt.Fprintf(w, "%-45s %-7s %7.1f  %s\n", r.Name, r.Result, r.Seconds, reason)
		}
	}
	fmt.Fprintf(w, "tests=%d passed=%d failed=%d skipped=%d unfinished=%d\n",
		len(rows), counts["PASS"], counts["FAIL"], counts["SKIP"], counts["RUNNING"])
}

func main() {
	markdown := flag.Bool("markdown", false, "print a Markdown table")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: testtable [-markdown] FILE.json (from go tool test2json)")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtable:", err)
		os.Exit(1)
	}
	defer f.Close()
	rows, err := parse(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtable:", err)
		os.Exit(1)
	}
	write(os.Stdout, rows, *markdown)
}
