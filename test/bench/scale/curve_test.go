package main

import (
	"strings"
	"testing"
)

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

func TestCurveTableSetsTheFloorBeside(t *testing.T) {
	hitless := []result{
		{n: 250, readyN: 250, allReady: 30, roll: 100, rolledN: 100, rollouts: 20, perCheck: 1.4},
		{n: 500, readyN: 500, allReady: 60, roll: 100, rolledN: 100, rollouts: 22, perCheck: 1.6},
	}
	// the floor got to 250 only
	floor := []result{
		{n: 250, readyN: 250, allReady: 25, roll: 100, rolledN: 100, rollouts: 10},
		{n: 500, readyN: 420, allReady: 900, roll: 100},
	}
	var b strings.Builder
	writeCurveTable(&b, hitless, floor)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header, a rule and two rows, got:\n%s", b.String())
	}
	for _, want := range []string{"| 250 | 30.0 | 25.0 | 1.20 | 20.0 | 10.0 | 2.00 | 1.40 |", "| 500 | 60.0 | - | - | 22.0 | - | - | 1.60 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("want a row starting %q in:\n%s", want, b.String())
		}
	}
	var svg strings.Builder
	if err := writeCurveSVG(&svg, hitless, floor); err != nil {
		t.Fatal(err)
	}
	// the floor's all Ready and rollouts at 250, in green
	if got := strings.Count(svg.String(), `fill="#43a047"><title>250:`); got != 2 {
		t.Errorf("want the floor's two timed points at 250 drawn, got %d", got)
	}
}
