package main

import "testing"

func TestCellsAndRatios(t *testing.T) {
	done := result{n: 1000, readyN: 1000, allReady: 120, roll: 100, rolledN: 100, rollouts: 40}
	gaveUp := result{n: 1000, readyN: 526, allReady: 900, roll: 100}
	slowRoll := result{n: 1000, readyN: 1000, allReady: 300, roll: 100, rolledN: 60, rollouts: 900}
	for _, tc := range []struct {
		name, got, want string
	}{
		{"all Ready", done.allReadyCell(), "120.0"},
		{"gave up", gaveUp.allReadyCell(), "> 900 (526 of 1000 Ready)"},
		{"rollouts", done.rolloutsCell(), "40.0"},
		{"rollouts after giving up", gaveUp.rolloutsCell(), "not run (not all Ready)"},
		{"rollouts gave up", slowRoll.rolloutsCell(), "> 900 (60 of 100 Ready)"},
		{"both finished", ratio(120, 240, true, true), "0.50"},
		// the other mode took longer than 900 s: the ratio is at most 120/900
		{"other gave up", ratio(120, 900, true, false), "< 0.13"},
		{"ours gave up", ratio(900, 300, false, true), "> 3.00"},
		{"neither", ratio(900, 900, false, false), "n/a (neither finished)"},
		{"not run", ratio(0, 40, false, true), "n/a (not run)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
