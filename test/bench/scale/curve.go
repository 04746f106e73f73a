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
}

// measure is one panel of the growth curve: a value per size, and the
// target where the project has one.
type measure struct {
	title  string
	value  func(result) float64
	target func(n int) float64 // nil: no target
}

var measures = []measure{
	{"all Ready after first create (s)", func(r result) float64 { return r.allReady }, func(n int) float64 { return 30 * float64(n) / 1000 }},
	{"100 rollouts Ready (s)", func(r result) float64 { return r.rollouts }, func(int) float64 { return 10 }},
	{"controller CPU (s)", func(r result) float64 { return r.cpu }, func(n int) float64 { return 20 * float64(n) / 1000 }},
	{"controller peak RSS (MiB)", func(r result) float64 { return r.rss }, func(int) float64 { return 150 }},
	{"API writes per KIngress (all clients)", func(r result) float64 { return r.writesPerKIngress }, nil},
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
		}
	}
}

// writeCurveTable prints the growth curve as a Markdown table.
func writeCurveTable(w io.Writer, rs []result) {
	fmt.Fprintln(w, "| KIngresses | all Ready (s) | 100 rollouts (s) | controller CPU (s) | peak RSS (MiB) | API writes / KIngress (all / hitless) | hitless writes/s once Ready | probes scheduled / sent |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.1f | %.0f | %.1f / %.1f | %.1f | %.0f / %.0f |\n",
			r.n, r.allReady, r.rollouts, r.cpu, r.rss, r.writesPerKIngress, r.ours, r.restWrites, r.probes, r.sent)
	}
}

// writeCurveSVG draws one panel per measure, side by side in two rows:
// the value at each size joined by a line, the target (scaled with N where
// the target is per 1,000) dashed.
func writeCurveSVG(w io.Writer, rs []result) error {
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
		maxV := 0.0
		for _, r := range rs {
			maxV = max(maxV, m.value(r))
			if m.target != nil {
				maxV = max(maxV, m.target(r.n))
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
		var line, target []string
		for _, r := range rs {
			v := m.value(r)
			line = append(line, fmt.Sprintf("%.1f,%.1f", px(r.n), py(v)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#1e88e5"><title>%d: %.1f</title></circle>`+"\n", px(r.n), py(v), r.n, v)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#1e88e5">%.0f</text>`+"\n", px(r.n), py(v)-6, v)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%d</text>`+"\n", px(r.n), base+14, r.n)
			if m.target != nil {
				target = append(target, fmt.Sprintf("%.1f,%.1f", px(r.n), py(m.target(r.n))))
			}
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#1e88e5" stroke-width="1.5"/>`+"\n", strings.Join(line, " "))
		if len(target) > 0 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#e53935" stroke-dasharray="4 3"/>`+"\n", strings.Join(target, " "))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">x: KIngresses; blue: measured (make bench-scale KINGRESSES=…); red dashed: target (per 1,000 scaled with N)</text>`+"\n", left, height-6)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
