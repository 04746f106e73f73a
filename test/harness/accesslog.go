package harness

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// accessLogLine matches Contour's "envoy" access log format far enough to
// pick the response code and flags.
var accessLogLine = regexp.MustCompile(`^\[([^\]]+)\] "[^"]*" (\d{3}) (\S+) `)

// FailedAccessLog returns the lines of the Envoy pods' access logs (the node
// agent's pod logs of the fleet's namespace) for the load's requests to host
// whose code is not 2xx,
// at most max of them. Envoy names the upstream address and the response
// flags (UC, UF, NR, ...), which the client cannot see.
func FailedAccessLog(dir, fleet, host string, max int) []string {
	files, _ := filepath.Glob(filepath.Join(dir, fleet+"_*.log"))
	var out []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			m := accessLogLine.FindStringSubmatch(line)
			if m == nil || strings.HasPrefix(m[2], "2") || !strings.Contains(line, `"`+host+`"`) ||
				!strings.Contains(line, `"`+LoadUserAgent+`"`) {
				continue
			}
			out = append(out, filepath.Base(f)+": "+line)
		}
		fh.Close()
	}
	sort.Strings(out)
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// StackLogDir is where the local stack's components and the controller
// replicas log: next to the stack's kubeconfig (hack/stack.sh keeps both in
// its state directory).
func StackLogDir() string {
	if d := os.Getenv("HITLESS_STACK_DIR"); d != "" {
		return filepath.Join(d, "logs")
	}
	return filepath.Join(filepath.Dir(os.Getenv("KUBECONFIG")), "logs")
}

// PodLogDir is where the local stack's node agent writes pod logs.
func PodLogDir() string { return filepath.Join(StackLogDir(), "pods") }
