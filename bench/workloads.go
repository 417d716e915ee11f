package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// metrics are the figures of one run of one cell, by name.
type metrics map[string]float64

// window runs the measured part of a cell: a warm-up, then the measured
// interval, with server and client counters read at both ends.
type window struct {
	nodes     cluster
	measuring atomic.Bool
	stopped   atomic.Bool
	// counted: the workload calls done for each operation it records, and
	// the window stays open past dur (up to maxExtra) until one has: on a
	// loaded machine a short smoke window may otherwise close before the
	// first operation of a slow contender comes back.
	counted bool
	ops     atomic.Int64

	wall       time.Duration
	start, end time.Time // the measured interval (wall clock for W3-procs)
	srv        serverStats
	client     time.Duration // process CPU time (user+sys) over the interval
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// run waits warm, measures for dur, and marks the cell stopped.
func (w *window) run(ctx context.Context, warm, dur time.Duration) error {
	defer w.stopped.Store(true)
	if err := sleepCtx(ctx, warm); err != nil {
		return err
	}
	s0, err := w.nodes.stats(ctx)
	if err != nil {
		return err
	}
	c0, t0 := processCPU(), time.Now()
	w.measuring.Store(true)
	if err := sleepCtx(ctx, dur); err != nil {
		return err
	}
	for extra := time.Duration(0); w.counted && w.ops.Load() == 0 && extra < maxExtra; extra += dur {
		if err := sleepCtx(ctx, dur); err != nil {
			return err
		}
	}
	w.measuring.Store(false)
	w.start, w.end = t0, time.Now()
	w.wall, w.client = w.end.Sub(t0), processCPU()-c0
	s1, err := w.nodes.stats(ctx)
	if err != nil {
		return err
	}
	w.srv = s1.sub(s0)
	return nil
}

// maxExtra bounds how long a counted window waits past its duration for
// its first operation.
const maxExtra = 20 * time.Second

// done records one measured operation; it reports whether the window was
// measuring.
func (w *window) done() bool {
	if !w.measuring.Load() {
		return false
	}
	w.ops.Add(1)
	return true
}

// pct returns the p-th percentile (0..100) of sorted durations, in µs.
func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return float64(sorted[i]) / float64(time.Microsecond)
}

func meanUS(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return float64(sum) / float64(len(ds)) / float64(time.Microsecond)
}

var cellSeq atomic.Int64

// throughput runs W1 (goroutines=1) or W2 (64) for one contender: each op
// is a blocking Lock and the release on a fresh name, or with sameName
// (W1-same, W2-same) on the goroutine's own name, taken again and again;
// all goroutines share one client.
func throughput(ctx context.Context, c contender, nodes cluster, goroutines int, sameName bool, warm, dur time.Duration) (metrics, error) {
	if err := nodes.flush(ctx); err != nil {
		return nil, err
	}
	lk, err := c.open(ctx, nodes.addrs())
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w", c.name, err)
	}
	defer lk.Close()
	prefix := "t" + strconv.FormatInt(cellSeq.Add(1), 10) + "-"
	w := &window{nodes: nodes, counted: true}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		all   []time.Duration
		errs  atomic.Int64
		first atomic.Value
		seq   atomic.Int64
		stuck atomic.Int64
		// Lock runs under cctx, cancelled only when the window is over and a
		// goroutine still has not come back (a Lock that never returns is
		// counted as stuck, not waited for forever); unlock never is.
		cctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
		uctx         = context.WithoutCancel(ctx)
	)
	defer cancel()
	for g := range goroutines {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 1<<14)
			own := prefix + "g" + strconv.Itoa(g)
			for !w.stopped.Load() {
				name := own
				if !sameName {
					name = prefix + strconv.FormatInt(seq.Add(1), 10)
				}
				t0 := time.Now()
				unlock, err := lk.Lock(cctx, name)
				if err == nil {
					err = unlock(uctx)
				}
				d := time.Since(t0)
				if err != nil && cctx.Err() != nil {
					stuck.Add(1)
					continue
				}
				if err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
					continue
				}
				if w.done() {
					lat = append(lat, d)
				}
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	werr := w.run(ctx, warm, dur)
	waitGrace(&wg, 5*time.Second)
	cancel()
	wg.Wait()
	if werr != nil {
		return nil, werr
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%s: no operation completed (%d errors, %d stuck, first: %v)", c.name, errs.Load(), stuck.Load(), first.Load())
	}
	slices.Sort(all)
	n := float64(len(all))
	return metrics{
		"ops_per_s":        n / w.wall.Seconds(),
		"p50_us":           pct(all, 50),
		"p99_us":           pct(all, 99),
		"srv_cmds_per_op":  float64(w.srv.calls) / n,
		"srv_cpu_us_op":    w.srv.cpu * 1e6 / n,
		"client_cpu_us_op": float64(w.client) / float64(time.Microsecond) / n,
		"errors":           float64(errs.Load()),
		"stuck":            float64(stuck.Load()),
	}, nil
}

// waitGrace waits for wg, or at most d.
func waitGrace(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// contention runs W3 for one contender: workers goroutines, each with its
// own client (one process each, as far as the lock can tell), take one
// lock in turn and hold it for hold. An in-process holder count checks
// mutual exclusion.
//
// With shared set, all workers use one client instead (one process with
// workers goroutines).
func contention(ctx context.Context, c contender, nodes cluster, workers int, shared bool, hold, warm, dur time.Duration) (metrics, error) {
	return contentionVia(ctx, c, nodes, nodes.addrs(), workers, shared, hold, warm, dur)
}

// contentionVia is contention with the clients and the RTT probe
// connecting to via (one address per node, e.g. a delay proxy's) instead of
// the nodes' own addresses; the server counters are still read on nodes.
func contentionVia(ctx context.Context, c contender, nodes cluster, via []string, workers int, shared bool, hold, warm, dur time.Duration) (metrics, error) {
	if err := nodes.flush(ctx); err != nil {
		return nil, err
	}
	lockers := make([]locker, workers)
	defer func() {
		for i, lk := range lockers {
			if lk != nil && (!shared || i == 0) {
				lk.Close()
			}
		}
	}()
	for i := range lockers {
		if shared && i > 0 {
			lockers[i] = lockers[0]
			continue
		}
		lk, err := c.open(ctx, via)
		if err != nil {
			return nil, fmt.Errorf("%s: open: %w", c.name, err)
		}
		lockers[i] = lk
	}
	name := "w3-" + strconv.FormatInt(cellSeq.Add(1), 10)
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	w := &window{nodes: nodes}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type workerStats struct {
		waits, gaps, otherGaps []time.Duration
		busy                   time.Duration
		holds, releases        []time.Duration
		cs, other              int
		grants                 []int64    // every grant of the cell, warm-up included
		spans                  []waitSpan // the measured waits
	}
	var (
		wg          sync.WaitGroup
		holders     atomic.Int32
		violations  atomic.Int64
		errs        atomic.Int64
		first       atomic.Value
		lastRelease atomic.Int64 // ns since base of the last release call
		lastHolder  atomic.Int64
		waitingFrom = make([]atomic.Int64, workers) // ns since base, 0 when not waiting
		stats       = make([]workerStats, workers)
	)
	lastHolder.Store(-1)
	for id := range workers {
		wg.Go(func() {
			st := &stats[id]
			lk := lockers[id]
			for !w.stopped.Load() {
				tw := now()
				waitingFrom[id].Store(tw)
				unlock, err := lk.Lock(cctx, name)
				waitingFrom[id].Store(0)
				if err != nil {
					if cctx.Err() == nil {
						errs.Add(1)
						first.CompareAndSwap(nil, err.Error())
						_ = sleepCtx(cctx, time.Millisecond)
					}
					continue
				}
				tg := now()
				st.grants = append(st.grants, tg)
				if holders.Add(1) != 1 {
					violations.Add(1)
				}
				rel, prev := lastRelease.Load(), lastHolder.Load()
				m := w.measuring.Load()
				if m {
					st.waits = append(st.waits, time.Duration(tg-tw))
					st.spans = append(st.spans, waitSpan{worker: id, call: tw, grant: tg})
					if prev >= 0 {
						gap := time.Duration(tg - rel)
						st.gaps = append(st.gaps, gap)
						if prev != int64(id) {
							st.other++
							st.otherGaps = append(st.otherGaps, gap)
						}
					}
				}
				time.Sleep(hold)
				holders.Add(-1)
				th := now()
				if m {
					st.cs++
					st.busy += time.Duration(th - tg)
					st.holds = append(st.holds, time.Duration(th-tg))
				}
				lastHolder.Store(int64(id))
				lastRelease.Store(th)
				if err := unlock(context.WithoutCancel(ctx)); err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
				} else if m {
					st.releases = append(st.releases, time.Duration(now()-th))
				}
			}
		})
	}
	probe := startProbe(via[0], w)
	werr := w.run(ctx, warm, dur)
	rttLoad := probe.stop()
	// Waits still pending when the window closed count towards wait max.
	var pendingMax time.Duration
	tEnd := now()
	for i := range waitingFrom {
		if f := waitingFrom[i].Load(); f > 0 {
			pendingMax = max(pendingMax, time.Duration(tEnd-f))
		}
	}
	cancel()
	wg.Wait()
	if werr != nil {
		return nil, werr
	}
	sm := w3Sample{violations: violations.Load(), errors: errs.Load(), pendingMax: pendingMax}
	sm.firstErr, _ = first.Load().(string)
	for id, st := range stats {
		for _, g := range st.grants {
			sm.grantLog = append(sm.grantLog, grantAt{worker: id, at: g})
		}
		sm.spans = append(sm.spans, st.spans...)
		sm.releases = append(sm.releases, st.releases...)
		sm.waits = append(sm.waits, st.waits...)
		sm.gaps = append(sm.gaps, st.gaps...)
		sm.otherGaps = append(sm.otherGaps, st.otherGaps...)
		sm.holds = append(sm.holds, st.holds...)
		sm.busy += st.busy
		sm.other += st.other
		sm.perWorker = append(sm.perWorker, st.cs)
	}
	return sm.metrics(c.name, w, rttLoad)
}

// w3Sample is what one W3 cell recorded over its measured interval, before
// it is summed up: the critical sections whose grant fell inside it.
type w3Sample struct {
	waits     []time.Duration // Lock call → grant
	gaps      []time.Duration // previous release call → grant
	otherGaps []time.Duration // the gaps where the previous holder was another worker
	holds     []time.Duration // grant → release call
	releases  []time.Duration // release call → its return (successful releases only)
	busy      time.Duration   // sum of holds
	other     int             // len(otherGaps)
	perWorker []int           // critical sections by worker
	// pendingMax is the longest wait still pending when the interval closed.
	pendingMax time.Duration
	// grantLog is every grant of the cell, warm-up included, and spans the
	// measured waits (the same as waits), both on one clock in ns: what
	// the overtakes are counted on.
	grantLog   []grantAt
	spans      []waitSpan
	violations int64 // mutual-exclusion violations (whole cell)
	errors     int64 // failed Lock and unlock calls (whole cell)
	firstErr   string
}

// metrics sums s up into the W3 figures; w is the cell's window and
// rttLoad the probe's PING p50 during it, in µs.
func (s *w3Sample) metrics(name string, w *window, rttLoad float64) (metrics, error) {
	cs, minCS, maxCS := 0, -1, 0
	for _, n := range s.perWorker {
		cs += n
		if minCS < 0 || n < minCS {
			minCS = n
		}
		maxCS = max(maxCS, n)
	}
	if cs == 0 {
		return nil, fmt.Errorf("%s: no critical section completed (%d errors, first: %v)", name, s.errors, s.firstErr)
	}
	for _, d := range [][]time.Duration{s.waits, s.gaps, s.otherGaps, s.releases} {
		slices.Sort(d)
	}
	waitMax := max(s.pendingMax, slices.Max(s.waits))
	over := overtakes(s.grantLog, s.spans)
	slices.Sort(over)
	overMax, overP99 := 0, 0
	if len(over) > 0 {
		overMax, overP99 = over[len(over)-1], over[(len(over)-1)*99/100]
	}
	m := metrics{
		"cs_per_s":              float64(cs) / w.wall.Seconds(),
		"busy":                  float64(s.busy) / float64(w.wall),
		"hold_us":               meanUS(s.holds),
		"gap_p50_us":            pct(s.gaps, 50),
		"gap_p99_us":            pct(s.gaps, 99),
		"gap_mean_us":           meanUS(s.gaps),
		"other_share":           float64(s.other) / float64(max(len(s.gaps), 1)),
		"other_gap_p50":         pct(s.otherGaps, 50),
		"wait_p50_ms":           pct(s.waits, 50) / 1000,
		"wait_p99_ms":           pct(s.waits, 99) / 1000,
		"wait_max_ms":           float64(waitMax) / float64(time.Millisecond),
		"overtaken_max":         float64(overMax),
		"overtaken_p99":         float64(overP99),
		"release_p50_us":        pct(s.releases, 50),
		"srv_cmds_per_cs":       float64(w.srv.calls) / float64(cs),
		"srv_cpu_pct":           w.srv.cpu / w.wall.Seconds() * 100,
		"srv_cpu_us_cs":         w.srv.cpu * 1e6 / float64(cs),
		"client_cpu_us_cs":      float64(w.client) / float64(time.Microsecond) / float64(cs),
		"client_cpu_pct_waiter": float64(w.client) / float64(w.wall) * 100 / float64(len(s.perWorker)),
		"cs_worker_min":         float64(minCS),
		"cs_worker_max":         float64(maxCS),
		"violations":            float64(s.violations),
		"rtt_load_p50_us":       rttLoad,
		"errors":                float64(s.errors),
	}
	// Which commands the server ran, per critical section.
	for name, v := range w.srv.byCmd {
		if v > 0 {
			m["cmd_"+name+"_per_cs"] = float64(v) / float64(cs)
		}
	}
	return m, nil
}

// grantAt is one grant: the worker (client) it went to, and when.
type grantAt struct {
	worker int
	at     int64
}

// waitSpan is one completed wait of a worker: Lock called, Lock returned
// with the grant.
type waitSpan struct {
	worker      int
	call, grant int64
}

// overtakes counts, for each wait, the grants to other workers strictly
// inside (call, grant): how many critical sections went ahead of the
// waiter while it waited. With n workers, a FIFO lock keeps every count
// at most n-1 (each other worker ahead at most once); pollers and herd
// wake-ups can exceed it. The counts are in the order of waits. It sorts
// the grants, overall and by worker, and binary-searches each wait in
// both: O((g + w) log g).
func overtakes(grants []grantAt, waits []waitSpan) []int {
	workers := 0
	for _, g := range grants {
		workers = max(workers, g.worker+1)
	}
	all := make([]int64, 0, len(grants))
	own := make([][]int64, workers)
	for _, g := range grants {
		all = append(all, g.at)
		own[g.worker] = append(own[g.worker], g.at)
	}
	slices.Sort(all)
	for _, ts := range own {
		slices.Sort(ts)
	}
	// inside counts the times of sorted ts in (a, b).
	inside := func(ts []int64, a, b int64) int {
		if b <= a+1 {
			return 0
		}
		lo, _ := slices.BinarySearch(ts, a+1) // first > a
		hi, _ := slices.BinarySearch(ts, b)   // first >= b
		return hi - lo
	}
	out := make([]int, len(waits))
	for i, w := range waits {
		n := inside(all, w.call, w.grant)
		if w.worker >= 0 && w.worker < workers {
			n -= inside(own[w.worker], w.call, w.grant)
		}
		out[i] = n
	}
	return out
}

// probe measures the PING round trip on its own plain connection while a
// cell runs, every 2 ms during the measured interval: the round trip under
// the same load as the cell's handoffs.
type probe struct {
	done chan struct{}
	out  chan float64
}

func startProbe(addr string, w *window) *probe {
	p := &probe{done: make(chan struct{}), out: make(chan float64, 1)}
	go func() {
		var lat []time.Duration
		defer func() {
			slices.Sort(lat)
			p.out <- pct(lat, 50)
		}()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		ping := []byte("*1\r\n$4\r\nPING\r\n")
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
			}
			if !w.measuring.Load() {
				continue
			}
			t0 := time.Now()
			if _, err := c.Write(ping); err != nil {
				return
			}
			if _, err := r.ReadString('\n'); err != nil {
				return
			}
			lat = append(lat, time.Since(t0))
		}
	}()
	return p
}

// stop ends the probe and returns the median round trip in µs (0 if none).
func (p *probe) stop() float64 {
	close(p.done)
	return <-p.out
}
