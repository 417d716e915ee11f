package main

import (
	"fmt"
	"html"
	"strings"
)

// svg draws two horizontal bar charts, one above the other: W2 throughput
// and the W3 release→grant gap in RTTs, one bar per contender.
func (r *report) svg() string {
	type bar struct {
		name  string
		v     float64
		label string
	}
	var w2, w3 []bar
	for _, c := range r.Cells {
		if c.Median == nil {
			continue
		}
		switch c.Workload {
		case "W2":
			l := fmt.Sprintf("%.0f/s", c.Median["ops_per_s"])
			if x, ok := c.Ratio["ops_per_s"]; ok {
				l += fmt.Sprintf("  (%.2f× raw)", x)
			}
			w2 = append(w2, bar{c.Contender, c.Median["ops_per_s"], l})
		case "W3":
			g := c.Median["gap_p50_us"]
			l := fmt.Sprintf("%.0f µs", g)
			if rtt := r.rtt(); rtt > 0 {
				l += fmt.Sprintf(" (%.1f RTT)", g/rtt)
			}
			w3 = append(w3, bar{c.Contender, g, fmt.Sprintf("%s · %.0f CS/s · %.0f cmds/CS", l, c.Median["cs_per_s"], c.Median["srv_cmds_per_cs"])})
		}
	}
	const (
		width  = 880
		left   = 170 // bar names
		right  = 250 // labels
		barH   = 20
		gapH   = 8
		headH  = 46
		panelG = 28
	)
	plotW := float64(width - left - right)
	panelH := func(n int) int { return headH + n*(barH+gapH) + 14 }
	height := panelH(len(w2)) + panelG + panelH(len(w3)) + 24
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", width, height, width, height)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	color := func(name string) string {
		switch {
		case strings.HasPrefix(name, "dlock"):
			return "#2563eb"
		case strings.HasPrefix(name, "raw"):
			return "#4b5563"
		}
		return "#a3a3a3"
	}
	panel := func(y int, title, sub string, bars []bar, maxV float64, marks []float64) int {
		fmt.Fprintf(&sb, `<text x="10" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", y+18, html.EscapeString(title))
		fmt.Fprintf(&sb, `<text x="10" y="%d" fill="#555">%s</text>`+"\n", y+36, html.EscapeString(sub))
		top := y + headH
		if maxV <= 0 {
			maxV = 1
		}
		for _, m := range marks {
			x := float64(left) + plotW*m/maxV
			fmt.Fprintf(&sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#dc2626" stroke-dasharray="4 3"/>`+"\n", x, top-4, x, top+len(bars)*(barH+gapH))
			fmt.Fprintf(&sb, `<text x="%.1f" y="%d" fill="#dc2626" font-size="11" text-anchor="middle">%g</text>`+"\n", x, top+len(bars)*(barH+gapH)+12, m)
		}
		for i, b := range bars {
			by := top + i*(barH+gapH)
			w := plotW * b.v / maxV
			fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, by+barH-5, html.EscapeString(b.name))
			fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, by, w, barH, color(b.name))
			fmt.Fprintf(&sb, `<text x="%.1f" y="%d" fill="#222">%s</text>`+"\n", float64(left)+w+6, by+barH-5, html.EscapeString(b.label))
		}
		return top + len(bars)*(barH+gapH) + 14
	}
	maxOf := func(bs []bar, floor float64) float64 {
		m := floor
		for _, b := range bs {
			m = max(m, b.v)
		}
		return m * 1.02
	}
	y := panel(8, "W2: acquire+release per second (64 goroutines, fresh names, 1 node) — longer is better",
		"median of "+r.Config["runs"]+" runs; "+r.Date, w2, maxOf(w2, 0), nil)
	panel(y+panelG, "W3: release → next grant, p50 (16 clients, one lock, 1 ms hold) — shorter is better",
		fmt.Sprintf("RTT = idle PING p50, %.0f µs; labels: gap, critical sections per second, server commands per critical section", r.rtt()), w3, maxOf(w3, 0), nil)
	sb.WriteString("</svg>\n")
	return sb.String()
}
