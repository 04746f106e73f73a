package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sample is a test package whose tests pass, fail (in a subtest, after some
// progress lines), skip and run in parallel, so that the stream is one `go
// test -json` really writes.
const sample = `package sample

import (
	"testing"
	"time"
)

func TestPasses(t *testing.T) {
	t.Parallel()
	t.Log("polling the route")
	time.Sleep(20 * time.Millisecond)
}

func TestFailsInSubtest(t *testing.T) {
	t.Parallel()
	t.Log("waiting for the revision")
	t.Run("sub", func(t *testing.T) {
		t.Log("response 200")
		t.Errorf("the revision is not ready: status 503")
		t.Errorf("a second error")
	})
}

func TestSkips(t *testing.T) {
	t.Log("checking the flags")
	t.Skip("needs an HPA metrics server")
}
`

func TestParseRealStream(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test on a sample package")
	}
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":         "module sample\n\ngo 1.22\n",
		"sample_test.go": sample,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, err := cmd.Output()
	if err == nil {
		t.Fatal("the sample's go test passed; it has a failing test")
	}

	rows, err := parse(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		rows[i].Seconds = 0 // times vary; the rest must not
	}
	want := []row{
		{Name: "TestPasses", Result: "PASS"},
		{Name: "TestFailsInSubtest", Result: "FAIL", Reason: "sample_test.go:20: a second error"},
		{Name: "TestSkips", Result: "SKIP", Reason: "sample_test.go:26: needs an HPA metrics server"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		want         []row
		wantErr      bool
	}{{
		name: "unfinished test: the binary was killed",
		stream: `{"Action":"run","Test":"TestA"}
{"Action":"output","Test":"TestA","Output":"    a_test.go:3: request failed: EOF\n"}
`,
		want: []row{{Name: "TestA", Result: "RUNNING"}},
	}, {
		name: "stderr lines and package events are ignored",
		stream: `panic: test timed out
{"Action":"start"}
{"Action":"run","Test":"TestA"}
{"Action":"pass","Test":"TestA","Elapsed":1.5}
{"Action":"fail","Elapsed":9}
`,
		want: []row{{Name: "TestA", Result: "PASS", Seconds: 1.5}},
	}, {
		name: "object names that contain failure words are not the reason",
		stream: `{"Action":"run","Test":"TestImagePullError"}
{"Action":"output","Test":"TestImagePullError","Output":"    image_pull_error_test.go:44: Creating a new Configuration image-pull-error-tzlbyaje\n"}
{"Action":"output","Test":"TestImagePullError","Output":"    image_pull_error_test.go:86: Failed to validate revision state\n"}
{"Action":"fail","Test":"TestImagePullError","Elapsed":122}
`,
		want: []row{{Name: "TestImagePullError", Result: "FAIL", Seconds: 122, Reason: "image_pull_error_test.go:86: Failed to validate revision state"}},
	}, {
		name:    "a line that starts like JSON but is not",
		stream:  "{\"Action\":\n",
		wantErr: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := parse(strings.NewReader(tc.stream))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, rows); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteTotals(t *testing.T) {
	var b bytes.Buffer
	write(&b, []row{
		{Name: "TestB", Result: "FAIL", Seconds: 2, Reason: "b_test.go:1: x | y"},
		{Name: "TestA", Result: "PASS", Seconds: 1},
		{Name: "TestC", Result: "SKIP"},
	}, true)
	got := b.String()
	for _, want := range []string{
		"| TestA | PASS | 1.0 |  |\n| TestB | FAIL | 2.0 | b_test.go:1: x \\| y |\n",
		"tests=3 passed=1 failed=1 skipped=1 unfinished=0\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}
