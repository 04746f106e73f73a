package main

import (
	"fmt"
	"io"
	"strings"
)

// result is one size's measurements.
type result struct {
	mode               string // hitless or floor
	n                  int
	allReady, rollouts float64 // seconds
	// readyN of n were Ready when allReady was taken (n: all; fewer: the
	// wait ran out); rolledN of roll rollouts likewise (0 of them when the
	// rollouts did not run because not all were Ready)
	readyN, roll, rolledN int
	cpu, rss              float64 // controller, all replicas: CPU-s; peak RSS of one, MiB
	writesPerKIngress     float64 // API writes of every client while the N became Ready, per KIngress
	ours                  float64 // of them, hitless's own (HTTPProxies and KIngress status), per KIngress
	restWrites            float64 // API writes per second by hitless once all were Ready
	probes, sent          float64 // probe requests scheduled (URLs x pods per round) and sent
	perCheck              float64 // probes sent per check until all were Ready
	recoveries            []recovery
	// rebuildsReady and rebuildsRoll are Contour's DAG rebuilds (every
	// replica) until all were Ready, and for the rollouts.
	rebuildsReady, rebuildsRoll rebuilds
}

// measure is one panel of the growth curve: a value per size, the floor's
// beside it where the floor has one, and the target where the project has
// one (given the floor's value at that size: most targets are a ratio to
// it).
type measure struct {
	title  string
	value  func(result) float64
	floor  bool                               // the floor's value of the same func is drawn too
	target func(n int, floor float64) float64 // nil: no target; floor is 0 when the floor did not run
}

var measures = []measure{
	{"all Ready after first create (s)", func(r result) float64 { return r.allReady }, true, func(_ int, fl float64) float64 { return 1.2 * fl }},
	{"100 rollouts Ready (s)", func(r result) float64 { return r.rollouts }, true, func(_ int, fl float64) float64 { return 2.2 * fl }},
	{"probes sent per check to Ready", func(r result) float64 { return r.perCheck }, false, func(int, float64) float64 { return 1.5 }},
	{"controller CPU (s)", func(r result) float64 { return r.cpu }, false, func(n int, _ float64) float64 { return 20 * float64(n) / 1000 }},
	{"controller peak RSS (MiB)", func(r result) float64 { return r.rss }, false, func(int, float64) float64 { return 150 }},
	{"API writes per KIngress (all clients)", func(r result) float64 { return r.writesPerKIngress }, false, nil},
}

// floorAt is the floor's result at n KIngresses, if it ran there and got
// all served.
func floorAt(floor []result, n int) (result, bool) {
	for _, f := range floor {
		if f.n == n && f.readyN == f.n {
			return f, true
		}
	}
	return result{}, false
}

// allReadyCell is the time to all Ready, or a bound and how many were
// Ready when the wait ran out.
func (r result) allReadyCell() string {
	if r.readyN < r.n {
		return fmt.Sprintf("> %.0f (%d of %d Ready)", r.allReady, r.readyN, r.n)
	}
	return fmt.Sprintf("%.1f", r.allReady)
}

// rolloutsCell is allReadyCell for the rollouts.
func (r result) rolloutsCell() string {
	switch {
	case r.readyN < r.n:
		return "not run (not all Ready)"
	case r.rolledN < r.roll:
		return fmt.Sprintf("> %.0f (%d of %d Ready)", r.rollouts, r.rolledN, r.roll)
	}
	return fmt.Sprintf("%.1f", r.rollouts)
}

// ratio is a/b as a table cell: a bound when either side is one.
func ratio(a, b float64, aDone, bDone bool) string {
	switch {
	case !aDone && a == 0, !bDone && b == 0:
		return "n/a (not run)"
	case aDone && bDone:
		return fmt.Sprintf("%.2f", a/b)
	case aDone:
		return fmt.Sprintf("< %.2f", a/b)
	case bDone:
		return fmt.Sprintf("> %.2f", a/b)
	}
	return "n/a (neither finished)"
}

// writeSideBySide prints each mode's figures per size and the ratio the
// target is set in: hitless/floor (1 would be a controller that costs
// nothing beyond Contour and Envoy).
func writeSideBySide(w io.Writer, byMode map[string][]result) {
	fmt.Fprintln(w, "| KIngresses | mode | all Ready (s) | 100 rollouts (s) | controller peak RSS (MiB) | controller CPU (s) |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|")
	for i, h := range byMode[modeHitless] {
		for _, mode := range []string{modeHitless, modeFloor} {
			if i >= len(byMode[mode]) {
				continue
			}
			r := byMode[mode][i]
			if mode == modeFloor {
				fmt.Fprintf(w, "| %d | %s | %s | %s | - | - |\n", r.n, mode, r.allReadyCell(), r.rolloutsCell())
				continue
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %.0f | %.1f |\n", r.n, mode, r.allReadyCell(), r.rolloutsCell(), r.rss, r.cpu)
		}
		if i < len(byMode[modeFloor]) {
			fl := byMode[modeFloor][i]
			fmt.Fprintf(w, "ratio at %d: all Ready hitless/floor %s (target <= 1.2); %d rollouts hitless/floor %s (target <= 2.2)\n", h.n,
				ratio(h.allReady, fl.allReady, h.readyN == h.n, fl.readyN == fl.n),
				h.roll, ratio(h.rollouts, fl.rollouts, h.rolledN == h.roll, fl.rolledN == fl.roll))
			fmt.Fprintf(w, "Contour at %d, hitless / floor: to all Ready %v / %v; for the %d rollouts %v / %v\n", h.n,
				h.rebuildsReady, fl.rebuildsReady, h.roll, h.rebuildsRoll, fl.rebuildsRoll)
			writeRecoveries(w, h, fl)
		}
	}
}

// writeCurveTable prints the growth curve as a Markdown table, the
// floor's times and the ratio to them beside hitless's where it ran.
func writeCurveTable(w io.Writer, rs, floor []result) {
	fmt.Fprintln(w, "| KIngresses | all Ready (s) | floor (s) | ratio | 100 rollouts (s) | floor (s) | ratio | probes per check to Ready | controller CPU (s) | peak RSS (MiB) | API writes / KIngress (all / hitless) | hitless writes/s once Ready |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		flReady, flRoll, rReady, rRoll := "-", "-", "-", "-"
		if fl, ok := floorAt(floor, r.n); ok {
			flReady, flRoll = fl.allReadyCell(), fl.rolloutsCell()
			rReady = ratio(r.allReady, fl.allReady, r.readyN == r.n, true)
			rRoll = ratio(r.rollouts, fl.rollouts, r.rolledN == r.roll, fl.rolledN == fl.roll)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %.2f | %.1f | %.0f | %.1f / %.1f | %.1f |\n",
			r.n, r.allReadyCell(), flReady, rReady, r.rolloutsCell(), flRoll, rRoll, r.perCheck, r.cpu, r.rss, r.writesPerKIngress, r.ours, r.restWrites)
	}
}

// writeCurveSVG draws one panel per measure, side by side in two rows:
// hitless's value at each size joined by a line, the floor's beside it
// where it has one, the target dashed (a ratio to the floor's value at
// that size, or scaled with N where it is per 1,000).
func writeCurveSVG(w io.Writer, rs, floor []result) error {
	const panelW, panelH, left, top, gap, cols = 300, 180, 50, 40, 40, 3
	rows := (len(measures) + cols - 1) / cols
	width := cols * (panelW + left + gap)
	height := rows*(panelH+top+gap) + 20
	maxN := 0
	for _, r := range rs {
		maxN = max(maxN, r.n)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, m := range measures {
		x0 := left + (i%cols)*(panelW+left+gap)
		y0 := top + (i/cols)*(panelH+top+gap)
		base := y0 + panelH
		// floorV is the floor's value at r's size, when the panel draws
		// it and the floor got there.
		floorV := func(r result) (float64, bool) {
			fl, ok := floorAt(floor, r.n)
			if !ok {
				return 0, false
			}
			return m.value(fl), true
		}
		targetV := func(r result) (float64, bool) {
			if m.target == nil {
				return 0, false
			}
			fv, _ := floorAt(floor, r.n)
			t := m.target(r.n, m.value(fv))
			return t, t > 0
		}
		maxV := 0.0
		for _, r := range rs {
			maxV = max(maxV, m.value(r))
			if v, ok := floorV(r); ok && m.floor {
				maxV = max(maxV, v)
			}
			if t, ok := targetV(r); ok {
				maxV = max(maxV, t)
			}
		}
		if maxV == 0 {
			maxV = 1
		}
		maxV *= 1.1
		px := func(n int) float64 { return float64(x0) + float64(n)/float64(maxN)*panelW }
		py := func(v float64) float64 { return float64(base) - v/maxV*panelH }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, y0-12, m.title)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", x0, base, x0+panelW, base)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", x0, y0, x0, base)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%.0f</text>`+"\n", x0-4, y0+4, maxV)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">0</text>`+"\n", x0-4, base)
		point := func(n int, v float64, color string) string {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%d: %.2f</title></circle>`+"\n", px(n), py(v), color, n, v)
			label := fmt.Sprintf("%.0f", v)
			if v < 10 {
				label = fmt.Sprintf("%.1f", v)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%s</text>`+"\n", px(n), py(v)-6, color, label)
			return fmt.Sprintf("%.1f,%.1f", px(n), py(v))
		}
		var line, floorLine, target []string
		for _, r := range rs {
			line = append(line, point(r.n, m.value(r), "#1e88e5"))
			if v, ok := floorV(r); ok && m.floor {
				floorLine = append(floorLine, point(r.n, v, "#43a047"))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%d</text>`+"\n", px(r.n), base+14, r.n)
			if t, ok := targetV(r); ok {
				target = append(target, fmt.Sprintf("%.1f,%.1f", px(r.n), py(t)))
			}
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#1e88e5" stroke-width="1.5"/>`+"\n", strings.Join(line, " "))
		if len(floorLine) > 0 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#43a047" stroke-width="1.5"/>`+"\n", strings.Join(floorLine, " "))
		}
		if len(target) > 0 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#e53935" stroke-dasharray="4 3"/>`+"\n", strings.Join(target, " "))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">x: KIngresses; blue: hitless; green: the floor (its proxies written directly, no controller); red dashed: target (a ratio to the floor, or per 1,000 scaled with N); one run each (make bench-scale-curve)</text>`+"\n", left, height-6)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeRecoveries puts each fault's cost in hitless beside the floor's:
// CPU seconds of every process over the same window, and of the processes
// both modes run.
func writeRecoveries(w io.Writer, h, fl result) {
	for _, hr := range h.recoveries {
		for _, fr := range fl.recoveries {
			if fr.fault != hr.fault {
				continue
			}
			var shared []string
			for _, name := range recoveryCPUNames {
				if name == "controller" {
					continue
				}
				shared = append(shared, fmt.Sprintf("%s %.1f / %.1f", name, hr.cpu[name], fr.cpu[name]))
			}
			fmt.Fprintf(w, "recovery from %s at %d: CPU-s hitless / floor %.1f / %.1f (controller %.1f; %s); hitless sent %.0f probes, wrote %.0f\n",
				hr.fault, h.n, hr.total(), fr.total(), hr.cpu["controller"], strings.Join(shared, ", "), hr.sent, ours(hr.writes))
		}
	}
}
