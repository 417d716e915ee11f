package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
)

// scol is one column of a curve's table: a metric and its format.
type scol struct {
	head, key, format string
}

// spanel is one plot of a curve: metrics (one line per contender and key)
// over the curve's sizes.
type spanel struct {
	title string
	keys  []string
	logY  bool
}

// curveDef is how one curve is shown: its heading, what it measures, its
// table and its plots.
type curveDef struct {
	curve, title, xname, intro string
	cols                       []scol
	panels                     []spanel
}

func curveDefs() []curveDef {
	return []curveDef{
		{curve: "names", xname: "names", title: "Distinct names: acquired and released once each",
			intro:  "64 goroutines share one client and take each name once (a blocking acquire, then the release) on a freshly emptied server. *keys after* is DBSIZE once every name is released; *memory after* is `used_memory` then, minus before, with the client closed. Throughput is over the whole run.",
			cols:   []scol{{"acq+rel/s", "ops_per_s", "%.0f"}, {"srv cmds/op", "srv_cmds_per_op", "%.1f"}, {"srv CPU µs/op", "srv_cpu_us_op", "%.1f"}, {"client CPU µs/op", "client_cpu_us_op", "%.1f"}, {"keys after", "keys_after", "%.0f"}, {"memory after B", "mem_after_b", "%.0f"}, {"memory after B/name", "mem_per_name_b", "%.1f"}, {"errors", "errors", "%.0f"}},
			panels: []spanel{{"acquire+release per second", []string{"ops_per_s"}, false}, {"server memory after, bytes per name", []string{"mem_per_name_b"}, false}, {"keys after", []string{"keys_after"}, true}, {"server CPU µs per acquire+release", []string{"srv_cpu_us_op"}, false}}},
		{curve: "waiters", xname: "waiters", title: "Waiters on one hot name",
			intro:  "n clients, each with its own connection (and, for dlock, its own Locker), take one name in turn and hold it 1 ms; W3 at n clients. *gap* = the previous release call → the next grant; server commands and CPU (INFO commandstats, INFO cpu) are per critical section, commands run by scripts included (*of which PING*: the clients' keep-alive: valkey-go PINGs a connection that received nothing for a second; *of which ZADD*: dlock's waiter registrations, one per wait plus a refresh every third of the queue TTL); every command by name is in scale.json; client CPU is the driver process's (every client) over the window, per waiter, in % of one core. No thundering herd means the per-CS columns stay flat as n grows.",
			cols:   []scol{{"CS/s", "cs_per_s", "%.0f"}, {"gap p50 µs", "gap_p50_us", "%.0f"}, {"gap p99 µs", "gap_p99_us", "%.0f"}, {"srv cmds/CS", "srv_cmds_per_cs", "%.1f"}, {"of which PING", "cmd_ping_per_cs", "%.1f"}, {"of which ZADD", "cmd_zadd_per_cs", "%.1f"}, {"srv CPU µs/CS", "srv_cpu_us_cs", "%.0f"}, {"srv CPU %", "srv_cpu_pct", "%.0f"}, {"client CPU µs/CS", "client_cpu_us_cs", "%.0f"}, {"client CPU %/waiter", "client_cpu_pct_waiter", "%.3f"}, {"overtaken max", "overtaken_max", "%.0f"}, {"violations", "violations", "%.0f"}},
			panels: []spanel{{"release → grant gap p50, µs", []string{"gap_p50_us"}, true}, {"server commands per critical section", []string{"srv_cmds_per_cs"}, true}, {"server CPU µs per critical section", []string{"srv_cpu_us_cs"}, true}, {"client CPU per waiter, % of a core", []string{"client_cpu_pct_waiter"}, true}}},
		{curve: "leases", xname: "leases", title: "Auto-renewed leases in one process",
			intro:  "One Locker over store/valkey holds n leases with `WithAutoRenew` (TTL and windows in the settings above; renewed every TTL/3). Heap per lease is the live heap after a forced GC with every lease held, minus before. One Extend call is one pipelined round trip; CPU is the whole process over the window.",
			cols:   []scol{{"heap B/lease", "heap_per_lease_b", "%.0f"}, {"renewals/s", "renewals_per_s", "%.0f"}, {"renewals/s per lease", "renewals_per_s_per_lease", "%.4f"}, {"Extend round trips/s", "extend_calls_per_s", "%.1f"}, {"leases per Extend", "leases_per_extend", "%.0f"}, {"CPU % of a core", "cpu_pct_one_core", "%.1f"}, {"CPU µs/renewal", "cpu_us_per_renewal", "%.2f"}, {"srv CPU %", "srv_cpu_pct", "%.0f"}, {"acquire all s", "acquire_s", "%.1f"}, {"longest Extend ms", "longest_extend_ms", "%.0f"}, {"acquires failed", "acquire_failed", "%.0f"}, {"lost", "lost", "%.0f"}},
			panels: []spanel{{"heap bytes per lease", []string{"heap_per_lease_b"}, false}, {"CPU µs per renewal", []string{"cpu_us_per_renewal"}, false}, {"renewal round trips per second", []string{"extend_calls_per_s"}, false}, {"renewals per second", []string{"renewals_per_s"}, true}}},
		{curve: "serve", xname: "waiting acquires", title: "`dlock serve`: concurrent waiting /v1 acquires",
			intro:  "`dlock serve` over the same redis-server; n clients, each on its own keep-alive connection, wait in `POST /v1/locks/{name}/acquire` (`waitMs` 300000) on one name. Goroutines and live heap (`go_memstats_heap_inuse_bytes` from /metrics) are the service's with every client waiting, minus before. Then the lock passes from client to client (each holds it 1 ms, releases it and waits again, so n keep waiting); *gap* = release call → the next client's acquire returns, through the service.",
			cols:   []scol{{"goroutines/waiter", "goroutines_per_waiter", "%.2f"}, {"heap B/waiter", "heap_per_waiter_b", "%.0f"}, {"RSS B/waiter", "rss_per_waiter_b", "%.0f"}, {"handoffs/s", "handoffs_per_s", "%.0f"}, {"gap p50 µs", "gap_p50_us", "%.0f"}, {"gap p99 µs", "gap_p99_us", "%.0f"}, {"service CPU µs/handoff", "svc_cpu_us_handoff", "%.0f"}, {"srv cmds/handoff", "srv_cmds_per_handoff", "%.1f"}, {"srv CPU µs/handoff", "srv_cpu_us_handoff", "%.0f"}, {"violations", "violations", "%.0f"}, {"errors", "errors", "%.0f"}},
			panels: []spanel{{"service heap bytes per waiter", []string{"heap_per_waiter_b"}, false}, {"service goroutines per waiter", []string{"goroutines_per_waiter"}, false}, {"release → grant gap p50 and p99, µs", []string{"gap_p50_us", "gap_p99_us"}, true}, {"service CPU µs per handoff", []string{"svc_cpu_us_handoff"}, true}}},
		{curve: "events", xname: "subscribers", title: "`dlock serve`: /v1/events subscribers",
			intro:  "n clients hold a `GET /v1/events` stream each (`--max-event-streams n`). Goroutines and heap per stream as above; *idle* is the service's CPU and the server's commands per second with no lock traffic (each stream gets a snapshot of the locks every second); *delivery* is from an acquire's request to its event on a stream, over 20 acquires and every stream.",
			cols:   []scol{{"goroutines/sub", "goroutines_per_sub", "%.2f"}, {"heap B/sub", "heap_per_sub_b", "%.0f"}, {"RSS B/sub", "rss_per_sub_b", "%.0f"}, {"idle service CPU %", "idle_cpu_pct", "%.1f"}, {"idle CPU µs/s per sub", "idle_cpu_us_per_sub_s", "%.1f"}, {"idle srv cmds/s", "idle_srv_cmds_per_s", "%.0f"}, {"delivery p50 µs", "delivery_p50_us", "%.0f"}, {"delivery p99 µs", "delivery_p99_us", "%.0f"}, {"missing", "deliveries_missing", "%.0f"}},
			panels: []spanel{{"service heap bytes per stream", []string{"heap_per_sub_b"}, false}, {"idle service CPU µs per second per stream", []string{"idle_cpu_us_per_sub_s"}, false}, {"event delivery p50 and p99, µs", []string{"delivery_p50_us", "delivery_p99_us"}, true}, {"idle server commands per second", []string{"idle_srv_cmds_per_s"}, true}}},
		{curve: "cluster", xname: "masters", title: "Redis Cluster of 1 and 3 masters on this machine",
			intro:  "A Redis Cluster started by the driver (slots split evenly, no replicas), W2 on it: 64 goroutines, one cluster client, fresh names. CPU is every master's and the driver's, per acquire+release; *share* is the least and the largest share of the commands one master ran (how the names spread).",
			cols:   []scol{{"acq+rel/s", "ops_per_s", "%.0f"}, {"p50 µs", "p50_us", "%.0f"}, {"p99 µs", "p99_us", "%.0f"}, {"srv cmds/op", "srv_cmds_per_op", "%.1f"}, {"srv CPU µs/op", "srv_cpu_us_op", "%.1f"}, {"client CPU µs/op", "client_cpu_us_op", "%.1f"}, {"share min", "share_min", "%.3f"}, {"share max", "share_max", "%.3f"}, {"errors", "errors", "%.0f"}},
			panels: []spanel{{"acquire+release per second", []string{"ops_per_s"}, false}, {"server CPU µs per acquire+release (all masters)", []string{"srv_cpu_us_op"}, false}, {"client CPU µs per acquire+release", []string{"client_cpu_us_op"}, false}, {"largest share of commands on one master", []string{"share_max"}, false}}},
	}
}

// xs returns the sizes and contenders of curve in the order measured.
func (r *scaleReport) xs(curve string) ([]int, []string) {
	var xs []int
	var cs []string
	for _, p := range r.Points {
		if p.Curve != curve {
			continue
		}
		if !slices.Contains(xs, p.X) {
			xs = append(xs, p.X)
		}
		if !slices.Contains(cs, p.Contender) {
			cs = append(cs, p.Contender)
		}
	}
	slices.Sort(xs)
	return xs, cs
}

// markdown renders every curve as a table and a plot; plots are linked as
// prefix + file.
func (r *scaleReport) markdown(prefix string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Run %s, `%s` (%s in all), one run of every point. Machine: %s; load average at the end %s; open files limit %s.\n\n",
		r.Date, r.Command, r.Elapsed, r.Machine["cpu"], r.Machine["load average at end"], r.Machine["open files limit (RLIMIT_NOFILE, raised to the hard limit)"])
	sb.WriteString("| setting | value |\n|---|---|\n")
	for _, k := range sortedKeys(r.Config) {
		fmt.Fprintf(&sb, "| %s | %s |\n", k, r.Config[k])
	}
	sb.WriteString("\n")
	for _, d := range curveDefs() {
		xs, cs := r.xs(d.curve)
		if len(xs) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "### %s\n\n%s\n\n", d.title, d.intro)
		fmt.Fprintf(&sb, "![%s](%sscale-%s.svg)\n\n", d.title, prefix, d.curve)
		fmt.Fprintf(&sb, "| contender | %s |", d.xname)
		for _, c := range d.cols {
			fmt.Fprintf(&sb, " %s |", c.head)
		}
		sb.WriteString("\n|---|--:|" + strings.Repeat("--:|", len(d.cols)) + "\n")
		for _, c := range cs {
			for _, x := range xs {
				p := r.point(d.curve, c, x)
				if p == nil {
					continue
				}
				name := c
				if strings.HasPrefix(c, "dlock") {
					name = "**" + c + "**"
				}
				fmt.Fprintf(&sb, "| %s | %d |", name, x)
				if p.Err != "" {
					fmt.Fprintf(&sb, " error: %s |%s\n", strings.ReplaceAll(tail(p.Err, 200), "|", "/"), strings.Repeat(" |", len(d.cols)-1))
					continue
				}
				for _, col := range d.cols {
					v, ok := p.M[col.key]
					if !ok {
						sb.WriteString(" – |")
						continue
					}
					fmt.Fprintf(&sb, " "+col.format+" |", v)
				}
				sb.WriteString("\n")
			}
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// scaleChart is one curve's SVG: its panels side by side, two per row.
type scaleChart struct {
	file  string
	title string
	xname string
	xs    []int
	cs    []string
	r     *scaleReport
	def   curveDef
}

func (r *scaleReport) charts() []scaleChart {
	var out []scaleChart
	for _, d := range curveDefs() {
		xs, cs := r.xs(d.curve)
		if len(xs) == 0 {
			continue
		}
		out = append(out, scaleChart{file: "scale-" + d.curve + ".svg", title: d.title, xname: d.xname, xs: xs, cs: cs, r: r, def: d})
	}
	return out
}

var seriesColors = []string{"#2563eb", "#4b5563", "#d97706", "#059669", "#dc2626", "#7c3aed", "#db2777"}

func (ch scaleChart) color(name string) string {
	i := slices.Index(ch.cs, name)
	if name == "dlock" || name == "dlock serve" {
		return seriesColors[0]
	}
	return seriesColors[1+i%(len(seriesColors)-1)]
}

func (ch scaleChart) svg() string {
	const (
		pw, ph      = 430, 250 // one panel
		ml, mr      = 62, 14
		mt, mb      = 34, 44
		top, legend = 36, 26
	)
	rows := (len(ch.def.panels) + 1) / 2
	width, height := 2*pw, top+legend+rows*ph
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&sb, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", html.EscapeString(strings.ReplaceAll(ch.title, "`", "")))
	// Legend: one entry per contender (and dash style per key).
	x := 10
	for _, c := range ch.cs {
		fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"/>`+"\n", x, top+8, x+18, top+8, ch.color(c))
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s</text>`+"\n", x+22, top+12, html.EscapeString(c))
		x += 30 + 7*len(c)
	}
	for i, p := range ch.def.panels {
		ox, oy := (i%2)*pw, top+legend+(i/2)*ph
		ch.panel(&sb, p, ox+ml, oy+mt, pw-ml-mr, ph-mt-mb)
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// panel draws one plot in the box (x0, y0, w, h): x on a log scale of the
// sizes, y linear from 0 or on a log scale.
func (ch scaleChart) panel(sb *strings.Builder, p spanel, x0, y0, w, h int) {
	fmt.Fprintf(sb, `<text x="%d" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", x0-50, y0-12, html.EscapeString(p.title))
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range ch.cs {
		for _, k := range p.keys {
			for _, x := range ch.xs {
				if v, ok := ch.value(c, x, k); ok && (!p.logY || v > 0) {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
	}
	if math.IsInf(lo, 1) { // nothing to draw (or nothing above 0 on a log scale)
		lo, hi = 1, 10
	}
	ymin, ymax := 0.0, hi*1.1
	if p.logY {
		ymin, ymax = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi*1.01)))
	}
	if ymax <= ymin {
		ymax = ymin + 1
	}
	fy := func(v float64) float64 {
		if p.logY {
			return float64(y0+h) - float64(h)*(math.Log10(v)-math.Log10(ymin))/(math.Log10(ymax)-math.Log10(ymin))
		}
		return float64(y0+h) - float64(h)*(v-ymin)/(ymax-ymin)
	}
	x1, x2 := math.Log10(float64(ch.xs[0])), math.Log10(float64(ch.xs[len(ch.xs)-1]))
	fx := func(x int) float64 {
		if x2 == x1 {
			return float64(x0) + float64(w)/2
		}
		return float64(x0) + float64(w)*(math.Log10(float64(x))-x1)/(x2-x1)
	}
	fmt.Fprintf(sb, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#bbb"/>`+"\n", x0, y0, w, h)
	for _, t := range yTicks(ymin, ymax, p.logY) {
		y := fy(t)
		fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", x0, y, x0+w, y)
		fmt.Fprintf(sb, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", x0-4, y+4, short(t))
	}
	for _, x := range ch.xs {
		fmt.Fprintf(sb, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", fx(x), y0+h+14, short(float64(x)))
	}
	fmt.Fprintf(sb, `<text x="%d" y="%d" text-anchor="middle" fill="#555">%s (log scale)</text>`+"\n", x0+w/2, y0+h+30, html.EscapeString(ch.xname))
	for _, c := range ch.cs {
		for ki, k := range p.keys {
			var pts []string
			for _, x := range ch.xs {
				if v, ok := ch.value(c, x, k); ok && (!p.logY || v > 0) {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", fx(x), fy(v)))
					fmt.Fprintf(sb, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", fx(x), fy(v), ch.color(c))
				}
			}
			dash := ""
			if ki > 0 {
				dash = ` stroke-dasharray="5 3"`
			}
			if len(pts) > 1 {
				fmt.Fprintf(sb, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), ch.color(c), dash)
			}
		}
	}
	if len(p.keys) > 1 {
		fmt.Fprintf(sb, `<text x="%d" y="%d" fill="#555">solid: %s, dashed: %s</text>`+"\n", x0+4, y0+12, p.keys[0], strings.Join(p.keys[1:], ", "))
	}
}

func (ch scaleChart) value(contender string, x int, key string) (float64, bool) {
	p := ch.r.point(ch.def.curve, contender, x)
	if p == nil || p.Err != "" {
		return 0, false
	}
	v, ok := p.M[key]
	return v, ok && !math.IsNaN(v) && !math.IsInf(v, 0)
}

func yTicks(lo, hi float64, logY bool) []float64 {
	var out []float64
	if logY {
		for v := lo; v > 0 && v <= hi*1.0001 && len(out) < 20; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/4)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*m) <= 6 {
			step *= m
			break
		}
	}
	for v := lo; v <= hi && step > 0 && len(out) < 20; v += step {
		out = append(out, v)
	}
	return out
}

// short formats v compactly: 1.2k, 3M, 0.25.
func short(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case a >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
