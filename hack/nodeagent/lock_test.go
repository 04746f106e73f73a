package main

import (
	"context"
	"testing"
	"time"
)

func TestLockStateDir(t *testing.T) {
	dir := t.TempDir()
	first, err := lockStateDir(context.Background(), dir, 0)
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if _, err := lockStateDir(context.Background(), dir, 300*time.Millisecond); err == nil {
		t.Fatal("second lock on a held state dir succeeded, want an error naming the holder")
	}
	first.Close()
	again, err := lockStateDir(context.Background(), dir, 0)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Close()
}
