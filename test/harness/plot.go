package harness

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// PlotPanel is one stacked panel of a plot: answers per second by class,
// with the moments of each change marked.
type PlotPanel struct {
	Title   string
	Start   time.Time
	Seconds []map[string]int
	Changes []time.Time
}

var classColors = map[string]string{"2xx": "#4caf50", "503": "#e53935", "conn": "#212121"}

func colorOf(class string) string {
	if c, ok := classColors[class]; ok {
		return c
	}
	return "#ff9800"
}

// WriteSVG draws the panels one above the other: a bar per second stacked
// by answer class (2xx at the bottom, failures on top), a tick per change.
func WriteSVG(w io.Writer, panels []PlotPanel) error {
	const width, panelH, left, top = 1000, 220, 60, 30
	maxSec, maxCount := 1, 1
	for _, p := range panels {
		if len(p.Seconds) > maxSec {
			maxSec = len(p.Seconds)
		}
		for _, s := range p.Seconds {
			n := 0
			for _, c := range s {
				n += c
			}
			if n > maxCount {
				maxCount = n
			}
		}
	}
	height := top + len(panels)*(panelH+50)
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width+20, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	barW := float64(width-left) / float64(maxSec)
	for i, p := range panels {
		y0 := top + i*(panelH+50)
		base := y0 + panelH
		fmt.Fprintf(w, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, y0-8, p.Title)
		fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", left, base, width, base)
		fmt.Fprintf(w, `<text x="4" y="%d">%d/s</text><text x="4" y="%d">0</text>`+"\n", y0+10, maxCount, base)
		for sec, counts := range p.Seconds {
			classes := make([]string, 0, len(counts))
			for c := range counts {
				classes = append(classes, c)
			}
			// 2xx first (bottom), failures stacked on top where they show.
			sort.Slice(classes, func(a, b int) bool {
				if (classes[a] == "2xx") != (classes[b] == "2xx") {
					return classes[a] == "2xx"
				}
				return classes[a] < classes[b]
			})
			y := float64(base)
			for _, c := range classes {
				h := float64(counts[c]) / float64(maxCount) * panelH
				if c != "2xx" && h < 3 {
					h = 3 // a single failure stays visible
				}
				y -= h
				fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%ds: %d %s</title></rect>`+"\n",
					float64(left)+float64(sec)*barW, y, barW, h, colorOf(c), sec, counts[c], c)
			}
		}
		for _, ch := range p.Changes {
			x := float64(left) + ch.Sub(p.Start).Seconds()*barW
			fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#1e88e5" stroke-width="0.6"/>`+"\n", x, base, x, base+8)
		}
		fmt.Fprintf(w, `<text x="%d" y="%d" fill="#555">seconds since start; blue ticks: backend swaps; green: 2xx, red: 503, black: connection errors</text>`+"\n", left, base+24)
	}
	_, err := fmt.Fprintln(w, "</svg>")
	return err
}
