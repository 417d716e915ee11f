// Command bench measures dlock side by side with peer lock libraries on
// redis-server processes it starts itself on loopback, and writes the
// results as Markdown (results.md), JSON (results.json) and an SVG chart of
// W2 and W3 (chart.svg).
//
// It is its own module; run it from this directory:
//
//	cd bench && go run .            # full run: 3 runs of every cell, a few minutes
//	cd bench && go run . -quick     # smoke run: 1 short run, seconds
//	cd bench && go run . -only 'W3/dlock'   # just the cells whose id matches
//	cd bench && go run . -docs ../docs/benchmarks.md   # also refresh the tables there
//	go run ./bench -scale -docs docs/benchmarks.md     # the scaling curves, 7 to 11 minutes here
//	go run ./bench -scale -quick                      # every curve at tiny sizes, seconds
//
// Workloads (see docs/benchmarks.md): W1 one goroutine, fresh name per
// acquire+release; W2 the same on 64 goroutines (W1-same, W2-same: each
// goroutine takes its own name again and again); W3 16 clients on one lock
// holding it 1 ms (W3-shared: one client for all; W3-procs: one OS process
// per client, the driver re-executing itself; W3-net: every client through
// a proxy in the driver that delays each direction by -net-delay); W4 W1
// and W2 on 5 nodes; W5 the /v1 HTTP API of `dlock serve` with 64
// keep-alive clients; W6 100 000 auto-renewed leases in one process. Every cell runs -runs times, interleaved, and the
// tables show the medians.
//
// -scale measures how the cost grows instead (scale.go): distinct names,
// waiters on one name, auto-renewed leases, waiting /v1 acquires and
// /v1/events streams on `dlock serve`, and a Redis Cluster of 1 and 3
// masters; one run of every point, tables and one SVG plot per curve.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"time"
)

type config struct {
	runs      int
	warm, dur time.Duration
	w3Workers int
	w3Hold    time.Duration
	netDelay  time.Duration // W3-net's one-way delay
	w6N       int
	w6TTL     time.Duration
	w6Window  time.Duration
	out       string
	only      *regexp.Regexp
	quick     bool
}

func defaultConfig() config {
	return config{
		runs: 3, warm: 300 * time.Millisecond, dur: 2 * time.Second,
		w3Workers: 16, w3Hold: time.Millisecond, netDelay: 500 * time.Microsecond,
		w6N: 100000, w6TTL: 6 * time.Second, w6Window: 8 * time.Second,
		out: "results",
	}
}

// quickConfig is the smoke run: every cell once, briefly.
func quickConfig() config {
	c := defaultConfig()
	c.runs, c.warm, c.dur = 1, 100*time.Millisecond, 300*time.Millisecond
	c.w6N, c.w6TTL, c.w6Window = 5000, time.Second, 1500*time.Millisecond
	c.netDelay = 100 * time.Microsecond
	c.quick = true
	return c
}

func main() {
	if workerMode() {
		os.Exit(workerMain())
	}
	if lockServiceMode() {
		os.Exit(lockServiceMain())
	}
	cfg := defaultConfig()
	quick := flag.Bool("quick", false, "smoke run: 1 run, 0.3 s cells, W6 with 5 000 leases")
	runs := flag.Int("runs", 0, "runs of every cell; the tables show medians (default 3, quick 1)")
	dur := flag.Duration("dur", 0, "measured time per cell (default 2s, quick 300ms)")
	warm := flag.Duration("warm", 0, "warm-up per cell (default 300ms, quick 100ms)")
	w6n := flag.Int("w6-leases", 0, "W6 leases (default 100000, quick 5000)")
	w6ttl := flag.Duration("w6-ttl", 0, "W6 lease TTL, renewed every TTL/3 (default 6s, quick 1s)")
	w6win := flag.Duration("w6-window", 0, "W6 measured window (default 8s, quick 1.5s)")
	netDelay := flag.Duration("net-delay", 0, "W3-net one-way delay through the proxy, each direction (default 500µs, quick 100µs)")
	out := flag.String("out", defaultOut(), "output directory")
	render := flag.String("render", "", "run nothing: re-render results.md, chart.svg (and -docs) from this results.json")
	docs := flag.String("docs", "", "also replace the generated tables in this Markdown file (docs/benchmarks.md)")
	only := flag.String("only", "", "run only cells whose id (workload/contender, e.g. W3/dlock) matches this regexp")
	scale := flag.Bool("scale", false, "run the scaling curves instead (names, waiters, leases, dlock serve, cluster); with -quick, tiny sizes in seconds; writes to <out>/scale")
	flag.Parse()
	if *scale {
		os.Exit(scaleMain(*quick, *out, *render, *docs, *only))
	}
	if *quick {
		cfg = quickConfig()
	}
	if *runs > 0 {
		cfg.runs = *runs
	}
	if *dur > 0 {
		cfg.dur = *dur
	}
	if *warm > 0 {
		cfg.warm = *warm
	}
	if *w6n > 0 {
		cfg.w6N = *w6n
	}
	if *w6ttl > 0 {
		cfg.w6TTL = *w6ttl
	}
	if *w6win > 0 {
		cfg.w6Window = *w6win
	}
	if *netDelay > 0 {
		cfg.netDelay = *netDelay
	}
	cfg.out = *out
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -only:", err)
			os.Exit(2)
		}
		cfg.only = re
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var rep *report
	var err error
	if *render != "" {
		rep, err = load(*render)
	} else {
		rep, err = run(ctx, cfg, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1) //nolint:gocritic // exitAfterDefer: the deferred stop only unregisters the signal handler
	}
	if err := rep.write(cfg.out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if *docs != "" {
		if err := rep.updateDocs(*docs, cfg.out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	abs, _ := filepath.Abs(cfg.out)
	fmt.Fprintf(os.Stderr, "bench: wrote %s/{results.md,results.json,chart.svg}\n", abs)
	if n := rep.violations(); n > 0 {
		fmt.Fprintf(os.Stderr, "bench: %d mutual-exclusion violations\n", n)
		os.Exit(1)
	}
}

// defaultOut is bench/results when run from the repository root (`go run
// ./bench`, through go.work), else results.
func defaultOut() string {
	if _, err := os.Stat(filepath.Join("bench", "go.mod")); err == nil {
		return filepath.Join("bench", "results")
	}
	return "results"
}

// scaleMain runs (or, with render, re-renders) the scaling curves and
// returns the exit status.
func scaleMain(quick bool, out, render, docs, only string) int {
	cfg := defaultScaleConfig()
	if quick {
		cfg = quickScaleConfig()
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -only:", err)
			return 2
		}
		cfg.only = re
	}
	cfg.out = filepath.Join(out, "scale")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var rep *scaleReport
	var err error
	if render != "" {
		rep, err = loadScale(render)
	} else {
		rep, err = runScale(ctx, cfg, os.Stderr)
	}
	if err == nil {
		err = rep.write(cfg.out)
	}
	if err == nil && docs != "" {
		err = rep.updateDocs(docs, cfg.out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	abs, _ := filepath.Abs(cfg.out)
	fmt.Fprintf(os.Stderr, "bench: wrote %s/{scale.md,scale.json,scale-*.svg}\n", abs)
	if n := rep.violations(); n > 0 {
		fmt.Fprintf(os.Stderr, "bench: %d mutual-exclusion violations\n", n)
		return 1
	}
	return 0
}
