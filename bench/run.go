package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// cell is one workload for one contender, over every run.
type cell struct {
	ID        string    `json:"id"` // workload/contender
	Workload  string    `json:"workload"`
	Contender string    `json:"contender"`
	Note      string    `json:"note,omitempty"`
	Runs      []metrics `json:"runs"`
	Median    metrics   `json:"median"`
	Ratio     metrics   `json:"ratio_to_raw,omitempty"`
	Errors    []string  `json:"errors,omitempty"`

	run func(ctx context.Context) (metrics, error) `json:"-"`
}

// spec lists every cell of a run, in the order they run.
func spec(cfg config, one, five cluster) []*cell {
	var cells []*cell
	add := func(workload string, c contender, fn func(ctx context.Context) (metrics, error)) {
		cells = append(cells, &cell{ID: workload + "/" + c.name, Workload: workload, Contender: c.name, Note: c.note, run: fn})
	}
	nodesFor := func(c contender) cluster {
		if c.nodes == 5 {
			return five
		}
		return one
	}
	for _, c := range append(oneNode(), diagnostics()...) {
		add("W1", c, func(ctx context.Context) (metrics, error) {
			return throughput(ctx, c, one, 1, false, cfg.warm, cfg.dur)
		})
	}
	for _, c := range append(oneNode(), diagnostics()...) {
		add("W2", c, func(ctx context.Context) (metrics, error) {
			return throughput(ctx, c, one, 64, false, cfg.warm, cfg.dur)
		})
	}
	for _, c := range oneNode() {
		add("W1-same", c, func(ctx context.Context) (metrics, error) {
			return throughput(ctx, c, one, 1, true, cfg.warm, cfg.dur)
		})
	}
	for _, c := range oneNode() {
		add("W2-same", c, func(ctx context.Context) (metrics, error) {
			return throughput(ctx, c, one, 64, true, cfg.warm, cfg.dur)
		})
	}
	for _, c := range append(oneNode(), fairContender()) {
		add("W3", c, func(ctx context.Context) (metrics, error) {
			return contention(ctx, c, one, cfg.w3Workers, false, cfg.w3Hold, cfg.warm, cfg.dur)
		})
	}
	for _, c := range append(oneNode(), fairContender()) {
		add("W3-shared", c, func(ctx context.Context) (metrics, error) {
			return contention(ctx, c, one, cfg.w3Workers, true, cfg.w3Hold, cfg.warm, cfg.dur)
		})
	}
	for _, c := range append(oneNode(), fairContender()) {
		add("W3-procs", c, func(ctx context.Context) (metrics, error) {
			return contentionProcs(ctx, c, one, cfg.w3Workers, cfg.w3Hold, cfg.warm, cfg.dur)
		})
	}
	for _, c := range append(oneNode(), fairContender()) {
		add("W3-net", c, func(ctx context.Context) (metrics, error) {
			return contentionNet(ctx, c, one, cfg.netDelay, cfg.w3Workers, cfg.w3Hold, cfg.warm, cfg.dur)
		})
	}
	for _, c := range fiveNodes() {
		add("W4-W1", c, func(ctx context.Context) (metrics, error) {
			return throughput(ctx, c, nodesFor(c), 1, false, cfg.warm, cfg.dur)
		})
	}
	for _, c := range fiveNodes() {
		add("W4-W2", c, func(ctx context.Context) (metrics, error) {
			return throughput(ctx, c, nodesFor(c), 64, false, cfg.warm, cfg.dur)
		})
	}
	add("W5", contender{name: "dlock-http", note: "POST /v1/locks/{name}/acquire + /release on a `dlock serve` process over store/valkey, 64 keep-alive clients"},
		func(ctx context.Context) (metrics, error) {
			return httpService(ctx, one, 64, cfg.warm, cfg.dur)
		})
	add("W5", contender{name: "nethttp-floor", note: "diagnostic: the same 64 clients against net/http in the driver, configured as `dlock serve` configures it, answering fixed bodies with no lock behind them: the ceiling of any Go HTTP service on these cores"},
		func(ctx context.Context) (metrics, error) {
			return httpFloor(ctx, one, 64, cfg.warm, cfg.dur)
		})
	for _, f := range []struct {
		c    contender
		over string
	}{
		{contender{name: "nethttp-dlock", note: "diagnostic: the same 64 clients against the least HTTP lock service over the library, in a process of its own: net/http configured as `dlock serve` configures it, a handler that takes the path's name with a Locker over store/valkey and releases it by token; no auth, metrics, limits or validation"}, "dlock"},
		{contender{name: "nethttp-raw", note: "diagnostic: the same least HTTP lock service over raw valkey-go (SET NX PX, compare-and-delete, no fence): the ceiling of any Go HTTP lock service on valkey-go on these cores"}, "raw-valkeygo"},
	} {
		add("W5", f.c, func(ctx context.Context) (metrics, error) {
			return httpLockFloor(ctx, f.over, one, 64, cfg.warm, cfg.dur)
		})
	}
	add("W6", contender{name: "dlock", note: "one Locker, WithAutoRenew, store/valkey"},
		func(ctx context.Context) (metrics, error) {
			return manyLeases(ctx, one, cfg.w6N, cfg.w6TTL, cfg.w6Window)
		})
	add("RTT", contender{name: "ping"}, func(ctx context.Context) (metrics, error) {
		plain, plain99, vg, err := pingRTT(ctx, one[0], 2000)
		if err != nil {
			return nil, err
		}
		return metrics{
			"plain_p50_us":    float64(plain) / 1e3,
			"plain_p99_us":    float64(plain99) / 1e3,
			"valkeygo_p50_us": float64(vg) / 1e3,
		}, nil
	})
	if cfg.only != nil {
		cells = slices.DeleteFunc(cells, func(c *cell) bool { return c.Workload != "RTT" && !cfg.only.MatchString(c.ID) })
	}
	return cells
}

// run starts the servers, runs every cell cfg.runs times (the runs
// interleaved, so slow drift of the machine spreads over all cells) and
// returns the report.
func run(ctx context.Context, cfg config, progress io.Writer) (*report, error) {
	root, err := os.MkdirTemp("", "dlock-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	var nodes cluster
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for range 6 {
		n, err := startNode(root)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	one, five := nodes[:1], nodes[1:]
	rep := newReport(cfg)
	cells := spec(cfg, one, five)
	// The RTT goes first in every run.
	slices.SortStableFunc(cells, func(a, b *cell) int {
		return boolInt(b.Workload == "RTT") - boolInt(a.Workload == "RTT")
	})
	start := time.Now()
	for r := range cfg.runs {
		for _, c := range cells {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			t0 := time.Now()
			m, err := c.run(ctx)
			if err != nil {
				c.Errors = append(c.Errors, fmt.Sprintf("run %d: %v", r+1, err))
				fmt.Fprintf(progress, "run %d/%d  %-34s ERROR %v\n", r+1, cfg.runs, c.ID, err)
				continue
			}
			c.Runs = append(c.Runs, m)
			fmt.Fprintf(progress, "run %d/%d  %-34s %s (%.1fs)\n", r+1, cfg.runs, c.ID, headline(c.Workload, m), time.Since(t0).Seconds())
		}
	}
	rep.Elapsed = time.Since(start).Round(time.Second).String()
	rep.Cells = cells
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			rep.Machine["load average at end"] = strings.Join(f[:3], " ")
		}
	}
	rep.finish()
	return rep, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// headline is the progress line's summary of one run of a cell.
func headline(workload string, m metrics) string {
	switch workload {
	case "W1", "W1-same", "W4-W1":
		return fmt.Sprintf("p50 %.0f µs  p99 %.0f µs  %.1f cmds/op", m["p50_us"], m["p99_us"], m["srv_cmds_per_op"])
	case "W2", "W2-same", "W4-W2", "W5":
		return fmt.Sprintf("%.0f ops/s  %.1f cmds/op", m["ops_per_s"], m["srv_cmds_per_op"])
	case "W3", "W3-shared", "W3-procs":
		return fmt.Sprintf("%.0f CS/s  gap p50 %.0f µs (RTT in cell %.0f µs)  %.1f cmds/CS  overtaken max %.0f  violations %.0f", m["cs_per_s"], m["gap_p50_us"], m["rtt_load_p50_us"], m["srv_cmds_per_cs"], m["overtaken_max"], m["violations"])
	case "W3-net":
		return fmt.Sprintf("%.0f CS/s  gap p50 %.0f µs (RTT in cell %.0f µs, idle %.0f µs)  %.1f cmds/CS  overtaken max %.0f  violations %.0f", m["cs_per_s"], m["gap_p50_us"], m["rtt_load_p50_us"], m["net_idle_rtt_p50_us"], m["srv_cmds_per_cs"], m["overtaken_max"], m["violations"])
	case "W6":
		return fmt.Sprintf("%.0f B/lease  cpu %.0f%%  %.0f leases/Extend  lost %.0f  not held at release %.0f", m["heap_per_lease_b"], m["cpu_pct_one_core"], m["leases_per_extend"], m["lost"], m["not_held_at_release"])
	case "RTT":
		return fmt.Sprintf("PING p50 %.0f µs (valkey-go %.0f µs)", m["plain_p50_us"], m["valkeygo_p50_us"])
	}
	return ""
}

// median returns the per-metric median over runs.
func median(runs []metrics) metrics {
	if len(runs) == 0 {
		return nil
	}
	out := metrics{}
	for k := range runs[0] {
		vs := make([]float64, 0, len(runs))
		for _, r := range runs {
			vs = append(vs, r[k])
		}
		slices.Sort(vs)
		if len(vs)%2 == 1 {
			out[k] = vs[len(vs)/2]
		} else {
			out[k] = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
		}
	}
	// Violations and errors are totals, not medians.
	for _, k := range []string{"violations", "errors", "lost", "stuck", "not_held_at_release", "renewals_failed", "acquire_failed", "release_failed"} {
		if _, ok := runs[0][k]; ok {
			sum := 0.0
			for _, r := range runs {
				sum += r[k]
			}
			out[k] = sum
		}
	}
	return out
}
