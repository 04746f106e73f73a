package main

import (
	"reflect"
	"testing"
)

func TestProcSnapshotSince(t *testing.T) {
	before := procSnapshot{
		10: {name: "kube-apiserver", start: "100", cpu: 200},
		11: {name: "envoy", start: "110", cpu: 30},
		12: {name: "envoy", start: "111", cpu: 40},
		13: {name: "controller", start: "120", cpu: 50},
		14: {name: "etcd", start: "130", cpu: 9},
	}
	now := procSnapshot{
		// restarted: a new process under a new pid counts whole
		20: {name: "kube-apiserver", start: "900", cpu: 12},
		// one pod grew, the other did not
		11: {name: "envoy", start: "110", cpu: 35},
		12: {name: "envoy", start: "111", cpu: 40},
		// the pid came back to a new process: whole too
		13: {name: "controller", start: "950", cpu: 4},
		// grew by less than the noise floor: left out
		14: {name: "etcd", start: "130", cpu: 9.01},
	}
	want := cpuByName{"kube-apiserver": 12, "envoy": 5, "controller": 4}
	if got := now.since(before); !reflect.DeepEqual(got, want) {
		t.Errorf("since: got %v, want %v", got, want)
	}
}
