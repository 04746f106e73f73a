package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRebuildsSince(t *testing.T) {
	before := map[string]procRebuilds{
		"contour-external":   {pid: 10, rebuilds: rebuilds{count: 100, seconds: 5}},
		"contour-external-2": {pid: 11, rebuilds: rebuilds{count: 40, seconds: 2}},
	}
	now := map[string]procRebuilds{
		"contour-external": {pid: 10, rebuilds: rebuilds{count: 130, seconds: 6.5}},
		// restarted: its counters began again
		"contour-external-2": {pid: 20, rebuilds: rebuilds{count: 3, seconds: 1}},
		// not there before: whole
		"contour-internal": {pid: 12, rebuilds: rebuilds{count: 7, seconds: 0.5}},
	}
	got := rebuildsSince(now, before)
	if got.count != 40 || got.seconds != 3 {
		t.Errorf("rebuildsSince: got %+v, want 40 rebuilds in 3 s", got)
	}
}

func TestContourHTTPPort(t *testing.T) {
	dir := t.TempDir()
	applied := "serve\n--xds-port=8001\n--http-address=127.0.0.1\n--http-port=8150\n--health-port=8151\nincluded: config\n"
	if err := os.WriteFile(filepath.Join(dir, "contour-external-2.applied"), []byte(applied), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := contourHTTPPort(dir, "contour-external-2"); got != "8150" {
		t.Errorf("got %q, want 8150", got)
	}
	if got := contourHTTPPort(dir, "contour-internal"); got != "" {
		t.Errorf("no file: got %q, want none", got)
	}
}
