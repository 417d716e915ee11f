package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// scaleConfig is what -scale measures: the sizes of every curve and how
// long each point runs.
type scaleConfig struct {
	names       []int // distinct names acquired and released once each
	waiters     []int // clients waiting on one hot name
	leases      []int // auto-renewed leases in one process
	serve       []int // waiting /v1 acquires on one `dlock serve`
	subscribers []int // /v1/events streams on one `dlock serve`
	masters     []int // Redis Cluster sizes

	warm, dur   time.Duration // waiters, serve and cluster points
	leaseTTL    time.Duration // auto-renewed leases: renewed every TTL/3
	leaseSettle time.Duration
	leaseWindow time.Duration
	hold        time.Duration // critical section on the hot name
	out         string
	quick       bool
	only        *regexp.Regexp // run only the points whose curve/contender/size matches
}

func defaultScaleConfig() scaleConfig {
	return scaleConfig{
		names:       []int{10_000, 100_000, 1_000_000},
		waiters:     []int{1, 16, 256, 1024},
		leases:      []int{10_000, 100_000, 1_000_000},
		serve:       []int{100, 1000, 10_000},
		subscribers: []int{100, 1000},
		masters:     []int{1, 3},
		warm:        500 * time.Millisecond, dur: 3 * time.Second,
		leaseTTL: 60 * time.Second, leaseSettle: 2 * time.Second, leaseWindow: 20 * time.Second,
		hold: time.Millisecond,
		out:  filepath.Join(defaultOut(), "scale"),
	}
}

// quickScaleConfig exercises every curve in seconds: tiny sizes, short
// windows. Its figures mean nothing.
func quickScaleConfig() scaleConfig {
	c := defaultScaleConfig()
	c.names = []int{200, 1000}
	c.waiters = []int{1, 8}
	c.leases = []int{200, 1000}
	c.serve = []int{10, 40}
	c.subscribers = []int{5, 80} // 80: past serve's default of 64 streams
	c.masters = []int{1, 3}
	c.warm, c.dur = 50*time.Millisecond, 300*time.Millisecond
	c.leaseTTL, c.leaseSettle, c.leaseWindow = 1500*time.Millisecond, 100*time.Millisecond, 600*time.Millisecond
	c.quick = true
	return c
}

// scalePoint is one point of one curve: a contender at one size.
type scalePoint struct {
	Curve     string  `json:"curve"`
	Contender string  `json:"contender"`
	X         int     `json:"x"`
	M         metrics `json:"metrics,omitempty"`
	Err       string  `json:"error,omitempty"`
	Seconds   float64 `json:"seconds"`
}

// scaleReport is everything one -scale run measured.
type scaleReport struct {
	Date     string            `json:"date"`
	Command  string            `json:"command"`
	Elapsed  string            `json:"elapsed"`
	Machine  map[string]string `json:"machine"`
	Versions map[string]string `json:"versions"`
	Config   map[string]string `json:"config"`
	Points   []*scalePoint     `json:"points"`
}

func (r *scaleReport) point(curve, contender string, x int) *scalePoint {
	for _, p := range r.Points {
		if p.Curve == curve && p.Contender == contender && p.X == x {
			return p
		}
	}
	return nil
}

// raiseFileLimit sets the soft limit of open files to the hard limit: the
// serve curve holds 10 000 client connections in this process and as many
// in the service (a child, which inherits the limit). It returns the limit
// in force.
func raiseFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			rl = raised
		}
	}
	return rl.Cur
}

// scaleStep is one point to measure.
type scaleStep struct {
	curve, contender string
	x                int
	run              func(ctx context.Context) (metrics, error)
}

// scaleSteps lists every point of a -scale run, in the order they run.
func scaleSteps(cfg scaleConfig, one cluster) []scaleStep {
	var steps []scaleStep
	add := func(curve, contender string, x int, fn func(ctx context.Context) (metrics, error)) {
		if cfg.only == nil || cfg.only.MatchString(curve+"/"+contender+"/"+strconv.Itoa(x)) {
			steps = append(steps, scaleStep{curve, contender, x, fn})
		}
	}
	// Leases first: their heap per lease is read in a process that has
	// not yet opened and closed thousands of clients.
	for _, n := range cfg.leases {
		add("leases", "dlock", n, func(ctx context.Context) (metrics, error) {
			return manyLeasesScale(ctx, one, n, cfg.leaseTTL, cfg.leaseSettle, cfg.leaseWindow)
		})
	}
	for _, n := range cfg.names {
		for _, c := range namesContenders() {
			add("names", c.name, n, func(ctx context.Context) (metrics, error) { return distinctNames(ctx, c, one, n) })
		}
	}
	for _, n := range cfg.waiters {
		for _, c := range waitersContenders() {
			add("waiters", c.name, n, func(ctx context.Context) (metrics, error) { return hotWaiters(ctx, c, one, n, cfg) })
		}
	}
	for _, n := range cfg.serve {
		add("serve", "dlock serve", n, func(ctx context.Context) (metrics, error) { return serveWaiters(ctx, one, n, cfg) })
	}
	for _, n := range cfg.subscribers {
		add("events", "dlock serve", n, func(ctx context.Context) (metrics, error) { return serveSubscribers(ctx, one, n, cfg) })
	}
	for _, m := range cfg.masters {
		for _, c := range clusterContenders() {
			add("cluster", c.name, m, func(ctx context.Context) (metrics, error) { return clusterThroughput(ctx, c, m, cfg) })
		}
	}
	return steps
}

func namesContenders() []contender {
	var out []contender
	for _, c := range oneNode() {
		switch c.name {
		case "raw-valkeygo", "dlock", "redsync-valkeygo", "valkeylock":
			out = append(out, c)
		}
	}
	return out
}

func waitersContenders() []contender {
	var out []contender
	for _, c := range oneNode() {
		switch c.name {
		case "raw-valkeygo", "dlock", "redislock", "valkeylock":
			out = append(out, c)
		}
	}
	return append(out, fairContender())
}

// runScale starts a server, measures every point once and returns the
// report.
func runScale(ctx context.Context, cfg scaleConfig, progress io.Writer) (*scaleReport, error) {
	limit := raiseFileLimit()
	root, err := os.MkdirTemp("", "dlock-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	n, err := startNode(root)
	if err != nil {
		return nil, err
	}
	defer n.stop()
	one := cluster{n}
	scaleRoot = root
	rep := &scaleReport{
		Date:     time.Now().UTC().Format("2006-01-02 15:04 MST"),
		Command:  "go run ./bench -scale",
		Machine:  machine(),
		Versions: versions(),
		Config:   cfg.describe(),
	}
	if cfg.quick {
		rep.Command += " -quick"
	}
	rep.Machine["open files limit (RLIMIT_NOFILE, raised to the hard limit)"] = strconv.FormatUint(limit, 10)
	start := time.Now()
	for _, s := range scaleSteps(cfg, one) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		m, err := s.run(ctx)
		p := &scalePoint{Curve: s.curve, Contender: s.contender, X: s.x, M: m, Seconds: time.Since(t0).Seconds()}
		if err != nil {
			p.Err = err.Error()
			fmt.Fprintf(progress, "scale %-8s %-17s %8d  ERROR %v\n", s.curve, s.contender, s.x, err)
		} else {
			fmt.Fprintf(progress, "scale %-8s %-17s %8d  %s (%.1fs)\n", s.curve, s.contender, s.x, scaleHeadline(s.curve, m), p.Seconds)
		}
		rep.Points = append(rep.Points, p)
	}
	rep.Elapsed = time.Since(start).Round(time.Second).String()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			rep.Machine["load average at end"] = strings.Join(f[:3], " ")
		}
	}
	return rep, nil
}

// scaleRoot is the directory of the run's extra servers (cluster nodes).
var scaleRoot string

func (c scaleConfig) describe() map[string]string {
	ints := func(xs []int) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = strconv.Itoa(x)
		}
		return strings.Join(s, ", ")
	}
	return map[string]string{
		"distinct names":                 ints(c.names),
		"waiters on one name":            ints(c.waiters),
		"auto-renewed leases":            ints(c.leases),
		"waiting /v1 acquires":           ints(c.serve),
		"/v1/events subscribers":         ints(c.subscribers),
		"cluster masters":                ints(c.masters),
		"warm-up, measured window":       c.warm.String() + ", " + c.dur.String(),
		"hold on the hot name":           c.hold.String(),
		"lease TTL, settle, window":      c.leaseTTL.String() + ", " + c.leaseSettle.String() + ", " + c.leaseWindow.String(),
		"goroutines (names and cluster)": "64",
	}
}

func scaleHeadline(curve string, m metrics) string {
	switch curve {
	case "names":
		return fmt.Sprintf("%.0f ops/s  keys after %.0f  memory after %.0f B/name  errors %.0f", m["ops_per_s"], m["keys_after"], m["mem_per_name_b"], m["errors"])
	case "waiters":
		return fmt.Sprintf("%.0f CS/s  gap p50 %.0f µs p99 %.0f µs  %.1f cmds/CS  srv %.0f µs/CS  client %.2f%%/waiter", m["cs_per_s"], m["gap_p50_us"], m["gap_p99_us"], m["srv_cmds_per_cs"], m["srv_cpu_us_cs"], m["client_cpu_pct_waiter"])
	case "leases":
		return fmt.Sprintf("%.0f B/lease  %.0f renewals/s  %.1f Extend/s  cpu %.0f%%  lost %.0f", m["heap_per_lease_b"], m["renewals_per_s"], m["extend_calls_per_s"], m["cpu_pct_one_core"], m["lost"])
	case "serve":
		return fmt.Sprintf("%.0f B/waiter  %.2f goroutines/waiter  gap p50 %.0f µs p99 %.0f µs  %.0f handoffs/s", m["heap_per_waiter_b"], m["goroutines_per_waiter"], m["gap_p50_us"], m["gap_p99_us"], m["handoffs_per_s"])
	case "events":
		return fmt.Sprintf("%.0f B/subscriber  %.2f goroutines/subscriber  delivery p50 %.0f µs p99 %.0f µs  idle cpu %.1f%%", m["heap_per_sub_b"], m["goroutines_per_sub"], m["delivery_p50_us"], m["delivery_p99_us"], m["idle_cpu_pct"])
	case "cluster":
		return fmt.Sprintf("%.0f ops/s  srv %.0f µs/op  client %.0f µs/op  cmds share per master %.2f–%.2f", m["ops_per_s"], m["srv_cpu_us_op"], m["client_cpu_us_op"], m["share_min"], m["share_max"])
	}
	return ""
}

// distinctNames acquires and releases n distinct names once each, on 64
// goroutines sharing one client of c, and reports the throughput and what
// the server keeps afterwards: keys (DBSIZE) and used_memory over what it
// used before, with the client closed.
func distinctNames(ctx context.Context, c contender, nodes cluster, n int) (metrics, error) {
	nd := nodes[0]
	if err := nd.flushSync(ctx); err != nil {
		return nil, err
	}
	mem0, err := nd.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	lk, err := c.open(ctx, nodes.addrs())
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w", c.name, err)
	}
	prefix := "n" + strconv.FormatInt(cellSeq.Add(1), 10) + "-"
	s0, err := nodes.stats(ctx)
	if err != nil {
		lk.Close()
		return nil, err
	}
	var (
		next  atomic.Int64
		errs  atomic.Int64
		first atomic.Value
		wg    sync.WaitGroup
	)
	c0, t0 := processCPU(), time.Now()
	uctx := context.WithoutCancel(ctx)
	for range 64 {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				// A Lock that does not come back within 10 s is counted
				// as an error, not waited for forever (a fresh name is free).
				octx, cancel := context.WithTimeout(ctx, 10*time.Second)
				unlock, err := lk.Lock(octx, prefix+strconv.FormatInt(i, 10))
				cancel()
				if err == nil {
					err = unlock(uctx)
				}
				if err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	wg.Wait()
	wall, cpu := time.Since(t0), processCPU()-c0
	s1, err := nodes.stats(ctx)
	lk.Close()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if e := errs.Load(); e > 0 {
		fmt.Fprintf(os.Stderr, "scale: names: %s: %d of %d acquire+release failed (first: %v)\n", c.name, e, n, first.Load())
	}
	keys, err := nd.dbsize(ctx)
	if err != nil {
		return nil, err
	}
	mem1, err := nd.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	srv := s1.sub(s0)
	mem := float64(mem1) - float64(mem0)
	return metrics{
		"ops_per_s":        float64(n) / wall.Seconds(),
		"srv_cmds_per_op":  float64(srv.calls) / float64(n),
		"srv_cpu_us_op":    srv.cpu * 1e6 / float64(n),
		"client_cpu_us_op": float64(cpu) / float64(time.Microsecond) / float64(n),
		"keys_after":       float64(keys),
		"mem_after_b":      mem,
		"mem_per_name_b":   mem / float64(n),
		"seconds":          wall.Seconds(),
		"errors":           float64(errs.Load()),
	}, nil
}

// hotWaiters runs W3's contention with n clients, each on its own
// connection, on one name held cfg.hold at a time.
func hotWaiters(ctx context.Context, c contender, nodes cluster, n int, cfg scaleConfig) (metrics, error) {
	m, err := contention(ctx, c, nodes, n, false, cfg.hold, cfg.warm, cfg.dur)
	if err != nil {
		return nil, err
	}
	m["waiters"] = float64(n)
	return m, nil
}

// manyLeasesScale is W6 at one size, with a settle time of its own.
func manyLeasesScale(ctx context.Context, nodes cluster, n int, ttl, settle, window time.Duration) (metrics, error) {
	m, err := manyLeasesFor(ctx, nodes, n, ttl, settle, window, 64)
	if err != nil {
		return nil, err
	}
	m["extend_calls_per_s"] = m["extend_calls"] / m["window_s"]
	m["renewals_per_s_per_lease"] = m["renewals_per_s"] / (float64(n) - m["acquire_failed"])
	return m, nil
}

// write saves the report as scale.json, scale.md and one SVG per curve in
// dir.
func (r *scaleReport) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.md"), []byte(r.markdown("")), 0o644); err != nil {
		return err
	}
	for _, ch := range r.charts() {
		if err := os.WriteFile(filepath.Join(dir, ch.file), []byte(ch.svg()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func loadScale(path string) (*scaleReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := &scaleReport{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Markers of the generated scaling section of docs/benchmarks.md.
const (
	scaleDocsStart = "<!-- bench:scale:start (generated by `go run ./bench -scale -docs docs/benchmarks.md`; do not edit by hand) -->"
	scaleDocsEnd   = "<!-- bench:scale:end -->"
)

// updateDocs replaces the generated scaling section of the Markdown file
// at path, with the plots linked relative to it.
func (r *scaleReport) updateDocs(path, outDir string) error {
	return replaceGenerated(path, scaleDocsStart, scaleDocsEnd, outDir, func(rel string) string {
		return r.markdown(rel + "/")
	})
}

// violations sums the mutual-exclusion violations of every point.
func (r *scaleReport) violations() int {
	n := 0
	for _, p := range r.Points {
		n += int(p.M["violations"])
	}
	return n
}
