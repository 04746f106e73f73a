package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockStateDir takes an exclusive lock on the state dir for the life of the
// process: two agents on one state dir would both run every pod, in the same
// network namespaces. It waits up to wait for a previous agent to exit.
func lockStateDir(ctx context.Context, dir string, wait time.Duration) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			f.Truncate(0)
			fmt.Fprintf(f, "%d\n", os.Getpid())
			return f, nil
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
			holder, _ := os.ReadFile(filepath.Join(dir, "lock"))
			f.Close()
			return nil, fmt.Errorf("another node agent (pid %s) holds %s: %w", string(holder[:max(0, len(holder)-1)]), dir, err)
		}
		if !logged {
			slog.Info("waiting for the previous node agent to release the state dir", "dir", dir)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
