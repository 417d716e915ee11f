package main

import (
	"fmt"
	"slices"
	"strings"
)

// col is one column of a table: a header and how to print a cell's value.
type col struct {
	head string
	val  func(c *cell) string
}

func num(key, format string) func(c *cell) string {
	return func(c *cell) string {
		v, ok := c.Median[key]
		if !ok {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
}

func ratio(key string) func(c *cell) string {
	return func(c *cell) string {
		v, ok := c.Ratio[key]
		if !ok {
			return "–"
		}
		return fmt.Sprintf("%.2f×", v)
	}
}

// inLoadRTT gives a W3 figure in units of the PING round trip measured
// during the same cell (under the same load as the handoffs).
func inLoadRTT(key string) func(c *cell) string {
	return func(c *cell) string {
		v, ok := c.Median[key]
		rtt := c.Median["rtt_load_p50_us"]
		if !ok || rtt == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", v/rtt)
	}
}

func (r *report) inRTT(key string) func(c *cell) string {
	return func(c *cell) string {
		v, ok := c.Median[key]
		rtt := r.rtt()
		if !ok || rtt == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", v/rtt)
	}
}

func (r *report) table(sb *strings.Builder, workload string, cols []col) {
	var cells []*cell
	for _, c := range r.Cells {
		if c.Workload == workload && (c.Median != nil || len(c.Errors) > 0) {
			cells = append(cells, c)
		}
	}
	if len(cells) == 0 {
		sb.WriteString("(not run)\n\n")
		return
	}
	sb.WriteString("| contender |")
	for _, c := range cols {
		sb.WriteString(" " + c.head + " |")
	}
	sb.WriteString("\n|---|")
	for range cols {
		sb.WriteString("--:|")
	}
	sb.WriteString("\n")
	for _, c := range cells {
		name := c.Contender
		if strings.HasPrefix(name, "dlock") {
			name = "**" + name + "**"
		}
		sb.WriteString("| " + name + " |")
		for _, col := range cols {
			v := "–"
			if c.Median != nil {
				v = col.val(c)
			}
			sb.WriteString(" " + v + " |")
		}
		sb.WriteString("\n")
	}
	for _, c := range cells {
		for _, e := range c.Errors {
			fmt.Fprintf(sb, "\n%s: %s\n", c.ID, e)
		}
	}
	sb.WriteString("\n")
}

func (r *report) markdown() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# dlock benchmark results\n\n")
	fmt.Fprintf(&sb, "Run %s (%s). Every figure is the median of %s run(s) of the cell; ratios are to the raw valkey-go baseline (`SET NX PX` + compare-and-delete script) measured in the same run. Per-run figures are in results.json.\n\n", r.Date, r.Elapsed, r.Config["runs"])

	sb.WriteString("## Machine and versions\n\n| item | value |\n|---|---|\n")
	for _, k := range sortedKeys(r.Machine) {
		fmt.Fprintf(&sb, "| %s | %s |\n", k, r.Machine[k])
	}
	for _, k := range sortedKeys(r.Versions) {
		fmt.Fprintf(&sb, "| %s | %s |\n", k, r.Versions[k])
	}
	sb.WriteString("\n| setting | value |\n|---|---|\n")
	for _, k := range sortedKeys(r.Config) {
		fmt.Fprintf(&sb, "| %s | %s |\n", k, r.Config[k])
	}
	if c := r.cell("RTT/ping"); c != nil && c.Median != nil {
		fmt.Fprintf(&sb, "\n**RTT** (PING on a plain TCP connection, one at a time): p50 **%.0f µs**, p99 %.0f µs; the same through valkey-go: p50 %.0f µs. W3 gaps are given in units of the plain p50.\n\n",
			c.Median["plain_p50_us"], c.Median["plain_p99_us"], c.Median["valkeygo_p50_us"])
	}

	if len(r.Targets) > 0 {
		sb.WriteString("## Targets for dlock\n\n| target | want | got | met |\n|---|---|---|---|\n")
		for _, t := range r.Targets {
			met := "**no**"
			if t.Met {
				met = "yes"
			}
			fmt.Fprintf(&sb, "| %s | %s | %s | %s |\n", t.Name, t.Want, t.Got, met)
		}
		sb.WriteString("\n")
	}

	latency := []col{
		{"acq+rel/s", num("ops_per_s", "%.0f")},
		{"p50 µs", num("p50_us", "%.0f")},
		{"p50 × raw", ratio("p50_us")},
		{"p99 µs", num("p99_us", "%.0f")},
		{"srv cmds/op", num("srv_cmds_per_op", "%.1f")},
		{"srv CPU µs/op", num("srv_cpu_us_op", "%.0f")},
		{"client CPU µs/op", num("client_cpu_us_op", "%.0f")},
		{"errors", num("errors", "%.0f")},
		{"stuck", num("stuck", "%.0f")},
	}
	thr := []col{
		{"acq+rel/s", num("ops_per_s", "%.0f")},
		{"× raw", ratio("ops_per_s")},
		{"p50 µs", num("p50_us", "%.0f")},
		{"p99 µs", num("p99_us", "%.0f")},
		{"srv cmds/op", num("srv_cmds_per_op", "%.1f")},
		{"srv CPU µs/op", num("srv_cpu_us_op", "%.0f")},
		{"client CPU µs/op", num("client_cpu_us_op", "%.0f")},
		{"errors", num("errors", "%.0f")},
		{"stuck", num("stuck", "%.0f")},
	}
	sb.WriteString("## W1 uncontended latency (1 goroutine, fresh name per acquire+release, 1 node)\n\n")
	r.table(&sb, "W1", latency)
	sb.WriteString("## W2 uncontended throughput (64 goroutines, one client, fresh names, 1 node)\n\n")
	r.table(&sb, "W2", thr)
	sb.WriteString("## W1-same, W2-same: the same, each goroutine taking its own name again and again\n\n")
	sb.WriteString("A lock that guards one resource is taken under the same name every time; the name's fence counter then exists already.\n\n")
	r.table(&sb, "W1-same", latency)
	r.table(&sb, "W2-same", thr)
	fmt.Fprintf(&sb, "## W3 contended handoff (%s clients, one lock, %s hold, 1 node)\n\n", r.Config["W3 workers"], r.Config["W3 hold"])
	sb.WriteString("Each client has its own connection and Locker (a separate process, as far as the lock can tell). *gap* = next successful acquire return − previous release call; *→other* = the next holder was another client; *wait* = how long one blocking acquire took; *overtaken* = how many critical sections were granted to other clients while one acquire waited (the largest over the waits; with FIFO order at most clients − 1); *release* = the releaser's own unlock call → return (the gap adds the push to the next holder). Violations are summed over all runs. *RTT idle* is the PING p50 measured before the cells; *RTT in cell* is the PING p50 of a probe connection during the cell's measured interval, under the same load as the handoffs; it also grows with the contender's own load (pollers keep the cores busy), so compare contenders on the gap in µs or in idle RTTs.\n\n")
	w3cols := []col{
		{"CS/s", num("cs_per_s", "%.0f")},
		{"× raw", ratio("cs_per_s")},
		{"lock busy", func(c *cell) string { return fmt.Sprintf("%.0f%%", c.Median["busy"]*100) }},
		{"hold µs", num("hold_us", "%.0f")},
		{"gap p50 µs", num("gap_p50_us", "%.0f")},
		{"gap p50 RTT idle", r.inRTT("gap_p50_us")},
		{"RTT in cell µs", num("rtt_load_p50_us", "%.0f")},
		{"gap p50 RTT in cell", inLoadRTT("gap_p50_us")},
		{"gap p99 µs", num("gap_p99_us", "%.0f")},
		{"gap p99 RTT in cell", inLoadRTT("gap_p99_us")},
		{"release p50 µs", num("release_p50_us", "%.0f")},
		{"→other", func(c *cell) string { return fmt.Sprintf("%.0f%%", c.Median["other_share"]*100) }},
		{"→other gap p50 µs", num("other_gap_p50", "%.0f")},
		{"wait p50 ms", num("wait_p50_ms", "%.1f")},
		{"wait p99 ms", num("wait_p99_ms", "%.1f")},
		{"wait max ms", num("wait_max_ms", "%.0f")},
		{"overtaken max", num("overtaken_max", "%.0f")},
		{"srv cmds/CS", num("srv_cmds_per_cs", "%.1f")},
		{"srv CPU %", num("srv_cpu_pct", "%.0f")},
		{"CS per client min–max", func(c *cell) string {
			return fmt.Sprintf("%.0f–%.0f", c.Median["cs_worker_min"], c.Median["cs_worker_max"])
		}},
		{"violations", num("violations", "%.0f")},
	}
	r.table(&sb, "W3", w3cols)
	fmt.Fprintf(&sb, "## W3-shared: the same with one client for all %s goroutines (one process)\n\n", r.Config["W3 workers"])
	sb.WriteString("One Locker (or client) shared by every goroutine: waiters in the same process can be served without the server's help (valkeylock's in-process gate), and the releasing goroutine competes with its own process's waiters. *→other* and *CS per client* count goroutines.\n\n")
	r.table(&sb, "W3-shared", w3cols)
	sb.WriteString("## W3-procs: the same with one OS process per client\n\n")
	fmt.Fprintf(&sb, "W3 again, but each of the %s clients is its own OS process (the driver re-executes itself), as real clients are: in W3 the %s clients share one Go process, whose scheduler can run the releasing goroutine's chain before the reader goroutine of the waiter the grant was pushed to. Each process records wall-clock times of its Lock calls, grants and release calls; the driver orders the critical sections by grant across processes: *gap* = grant − the previous critical section's release call, *violations* = critical sections whose [grant, release call] overlaps an earlier one (over the whole cell, warm-up included). The processes, the driver and redis-server share the same cores.\n\n", r.Config["W3 workers"], r.Config["W3 workers"])
	r.table(&sb, "W3-procs", w3cols)
	sb.WriteString("## W3-net: the same over a modelled network (one-way delay D through a user-space proxy)\n\n")
	if slices.ContainsFunc(r.Cells, func(c *cell) bool { return c.Workload == "W3-net" }) {
		fmt.Fprintf(&sb, "W3 again (one client each, the same contenders), but every client, and the probe that measures *RTT in cell*, reaches redis-server through a TCP proxy in the driver that writes every chunk of bytes D = %s after reading it, in each direction (this kernel has no netem): a model of Redis on another host, where the round trip is 0.2–2 ms rather than loopback's tens of µs, so the gap in RTTs shows the protocol's round trips more than this machine's wake-ups. %s The proxy's own goroutine wake-ups (a reader and a writer per direction, the writer woken by a timerfd) are included in both the gap and the RTT, and its goroutines share the cores with the clients and redis-server. Bandwidth and connection set-up are not modelled. Commands per CS are counted by INFO on the server itself, as in W3.\n\n",
			r.Config["W3-net delay"], r.netIdleRTT())
	}
	r.table(&sb, "W3-net", r.w3netCols(w3cols))
	sb.WriteString("## W4 Redlock on 5 nodes, W1 (1 goroutine)\n\n")
	r.table(&sb, "W4-W1", latency)
	sb.WriteString("## W4 Redlock on 5 nodes, W2 (64 goroutines)\n\n")
	r.table(&sb, "W4-W2", thr)

	sb.WriteString("## W5 the HTTP service (/v1 acquire + release, 64 keep-alive clients, 1 node)\n\n")
	if c := r.cell("W5/dlock-http"); c != nil && c.Median != nil {
		lib := r.cell("W2/dlock")
		raw := r.cell("W2/raw-valkeygo")
		sb.WriteString("| path | acq+rel/s | × raw | × library | p50 µs | p99 µs | srv cmds/op | client CPU µs/op | service CPU µs/op |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		row := func(name string, x *cell) {
			if x == nil || x.Median == nil {
				return
			}
			vs := fmt.Sprintf("%.2f×", x.Median["ops_per_s"]/raw.Median["ops_per_s"])
			vl := "–"
			if lib != nil && lib.Median != nil {
				vl = fmt.Sprintf("%.2f×", x.Median["ops_per_s"]/lib.Median["ops_per_s"])
			}
			svc := "–"
			if v, ok := x.Median["svc_cpu_us_op"]; ok {
				svc = fmt.Sprintf("%.0f", v)
			}
			fmt.Fprintf(&sb, "| %s | %.0f | %s | %s | %.0f | %.0f | %.1f | %.0f | %s |\n", name, x.Median["ops_per_s"], vs, vl,
				x.Median["p50_us"], x.Median["p99_us"], x.Median["srv_cmds_per_op"], x.Median["client_cpu_us_op"], svc)
		}
		if raw != nil && raw.Median != nil {
			row("dlock serve /v1 over HTTP", c)
			row("net/http floor: fixed bodies, no lock (diagnostic)", r.cell("W5/nethttp-floor"))
			row("least lock service over the library (diagnostic)", r.cell("W5/nethttp-dlock"))
			row("least lock service over raw valkey-go, no fence (diagnostic)", r.cell("W5/nethttp-raw"))
			row("dlock library (W2, same run)", lib)
			row("raw valkey-go (W2, same run)", raw)
		}
		sb.WriteString("\nThe HTTP server, its 64 clients and redis-server share the same cores. Client CPU is the driver process's: the 64 lean HTTP/1.1 clients (and, for the net/http floor, its in-process server too); service CPU is the service process's (`dlock serve`, or the least lock service: net/http as `dlock serve` configures it, a handler that locks the path's name and unlocks by token, nothing else).\n\n")
	} else {
		r.table(&sb, "W5", thr)
	}

	fmt.Fprintf(&sb, "## W6 many leases (%s auto-renewed leases in one process, TTL %s, renewed every TTL/3, %s window)\n\n", r.Config["W6 leases"], r.Config["W6 TTL"], r.Config["W6 window"])
	r.table(&sb, "W6", []col{
		{"heap B/lease", num("heap_per_lease_b", "%.0f")},
		{"CPU % of one core", num("cpu_pct_one_core", "%.1f")},
		{"CPU µs/renewal", num("cpu_us_per_renewal", "%.1f")},
		{"renewals/s", num("renewals_per_s", "%.0f")},
		{"renewal rounds", num("renewal_rounds", "%.1f")},
		{"Extend calls", num("extend_calls", "%.0f")},
		{"leases per Extend", num("leases_per_extend", "%.0f")},
		{"largest Extend", num("max_batch", "%.0f")},
		{"srv cmds/renewal", num("srv_cmds_per_renew", "%.1f")},
		{"srv CPU %", num("srv_cpu_pct", "%.0f")},
		{"acquire all s", num("acquire_s", "%.1f")},
		{"renewals failed", num("renewals_failed", "%.0f")},
		{"longest Extend ms", num("longest_extend_ms", "%.0f")},
		{"leases lost", num("lost", "%.0f")},
		{"held but not on the store at release", num("not_held_at_release", "%.0f")},
	})
	sb.WriteString("Heap per lease is the live heap after a forced GC with every lease held, minus the live heap before, over the number of leases. CPU is the whole process (getrusage) over the window: with nothing else running, that is the renewal cost. One Extend call is one pipelined round trip.\n\n")

	sb.WriteString("## Contenders\n\n| contender | what |\n|---|---|\n")
	seen := map[string]bool{}
	for _, c := range r.Cells {
		if c.Note == "" || seen[c.Contender] {
			continue
		}
		seen[c.Contender] = true
		fmt.Fprintf(&sb, "| %s | %s |\n", c.Contender, c.Note)
	}
	sb.WriteString("\n![W2 throughput and W3 handoff gap](chart.svg)\n")
	return sb.String()
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// netIdleRTT says what the idle PING through W3-net's proxy was (the median
// over the W3-net cells of each cell's idle p50).
func (r *report) netIdleRTT() string {
	var vs []float64
	for _, c := range r.Cells {
		if v, ok := c.Median["net_idle_rtt_p50_us"]; ok && c.Workload == "W3-net" {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return ""
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	s := fmt.Sprintf("Idle PING through the proxy (measured in each cell before its clients open): p50 **%.0f µs** (median over the cells, %.0f–%.0f µs)", med, vs[0], vs[len(vs)-1])
	if rtt := r.rtt(); rtt > 0 {
		s += fmt.Sprintf(", against %.0f µs without it", rtt)
	}
	return s + "; *RTT idle* below is that cell's own."
}

// w3netCols are the W3 columns with the idle RTT taken through the proxy,
// each cell's own, instead of the loopback PING.
func (r *report) w3netCols(w3 []col) []col {
	var cols []col
	for _, c := range w3 {
		if c.head == "gap p50 RTT idle" {
			cols = append(cols,
				col{"RTT idle µs", num("net_idle_rtt_p50_us", "%.0f")},
				col{"gap p50 RTT idle", func(c *cell) string {
					v, rtt := c.Median["gap_p50_us"], c.Median["net_idle_rtt_p50_us"]
					if rtt == 0 {
						return "–"
					}
					return fmt.Sprintf("%.2f", v/rtt)
				}})
			continue
		}
		cols = append(cols, c)
	}
	return cols
}
