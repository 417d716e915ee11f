package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if workerMode() { // a W3-procs worker re-executed by a test
		os.Exit(workerMain())
	}
	goleak.VerifyTestMain(m)
}

// startCluster starts n servers for a test or benchmark and stops them when
// it ends. Under CI=true a missing redis-server fails the test.
func startCluster(tb testing.TB, n int) cluster {
	tb.Helper()
	if _, err := redisPath(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			tb.Fatal(err)
		}
		tb.Skip(err)
	}
	root := tb.TempDir()
	var c cluster
	for range n {
		nd, err := startNode(root)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(nd.stop)
		c = append(c, nd)
	}
	return c
}

// TestDriverSmoke runs every cell of the driver once with tiny counts and
// checks that the three output files are written, every cell produced
// figures, and no mutual-exclusion violation was counted. It asserts
// nothing about speed.
func TestDriverSmoke(t *testing.T) {
	if _, err := redisPath(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cfg := quickConfig()
	// Long enough that a loaded CI machine (-race) still completes critical
	// sections in every cell and renews W6's leases in time.
	cfg.warm, cfg.dur = 30*time.Millisecond, 200*time.Millisecond
	cfg.w3Workers = 4
	cfg.w6N, cfg.w6TTL, cfg.w6Window = 300, 1500*time.Millisecond, 600*time.Millisecond
	cfg.out = t.TempDir()
	if o := os.Getenv("BENCH_ONLY"); o != "" {
		cfg.only = regexp.MustCompile(o)
	}
	rep, err := run(t.Context(), cfg, testWriter{t})
	if err != nil {
		t.Fatalf("run = %v", err)
	}
	if err := rep.write(cfg.out); err != nil {
		t.Fatalf("write = %v", err)
	}
	for _, f := range []string{"results.md", "results.json", "chart.svg"} {
		fi, err := os.Stat(filepath.Join(cfg.out, f))
		if err != nil || fi.Size() == 0 {
			t.Errorf("output %s: %v (size %d)", f, err, sizeOf(fi))
		}
	}
	for _, c := range rep.Cells {
		if len(c.Errors) > 0 || len(c.Runs) != cfg.runs {
			t.Errorf("cell %s: %d runs, errors %v", c.ID, len(c.Runs), c.Errors)
		}
		if strings.HasPrefix(c.Workload, "W3") && c.Median["cs_per_s"] == 0 {
			t.Errorf("cell %s: no critical section", c.ID)
		}
		// The proxy holds every chunk D each way: a lower bound by design.
		if c.Workload == "W3-net" && c.Median != nil && c.Median["net_idle_rtt_p50_us"] < 2*float64(cfg.netDelay/time.Microsecond) {
			t.Errorf("cell %s: idle PING through the proxy %.0f µs, under 2 × %v", c.ID, c.Median["net_idle_rtt_p50_us"], cfg.netDelay)
		}
	}
	if n := rep.violations(); n != 0 {
		t.Errorf("violations = %d, want 0", n)
	}
	if w6 := rep.cell("W6/dlock"); w6 == nil || w6.Median["lost"] != 0 {
		t.Errorf("W6 = %v, want no lost lease", w6)
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// The benchmarks below are the driver's W2 and W3 as Go benchmarks, for
// profiling a contender:
//
//	go test -run '^$' -bench 'W2/dlock$' -cpuprofile cpu.out . && go tool pprof -top bench.test cpu.out

func BenchmarkW2(b *testing.B) {
	for _, c := range oneNode() {
		b.Run(c.name, func(b *testing.B) {
			one := startCluster(b, 1)
			lk, err := c.open(b.Context(), one.addrs())
			if err != nil {
				b.Fatal(err)
			}
			defer lk.Close()
			var seq atomic.Int64
			ctx := context.Background()
			b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					unlock, err := lk.Lock(ctx, "b"+strconv.FormatInt(seq.Add(1), 10))
					if err == nil {
						err = unlock(ctx)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}

func BenchmarkW3(b *testing.B) {
	for _, c := range append(oneNode(), fairContender()) {
		b.Run(c.name, func(b *testing.B) {
			one := startCluster(b, 1)
			m, err := contention(b.Context(), c, one, 16, false, time.Millisecond, 0, time.Duration(b.N)*time.Millisecond)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(m["gap_p50_us"], "gap-p50-µs")
			b.ReportMetric(m["srv_cmds_per_cs"], "cmds/CS")
			b.ReportMetric(m["violations"], "violations")
		})
	}
}

func BenchmarkW1(b *testing.B) {
	for _, c := range oneNode() {
		b.Run(c.name, func(b *testing.B) {
			one := startCluster(b, 1)
			lk, err := c.open(b.Context(), one.addrs())
			if err != nil {
				b.Fatal(err)
			}
			defer lk.Close()
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				unlock, err := lk.Lock(ctx, "b"+strconv.Itoa(i))
				if err == nil {
					err = unlock(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestW3Procs runs W3-procs (one OS process per client, the test binary
// re-executed) briefly for dlock and the raw baseline, and checks that
// critical sections completed, none overlapped, and every worker process
// is gone when it returns.
func TestW3Procs(t *testing.T) {
	one := startCluster(t, 1)
	for _, name := range []string{"dlock", "raw-valkeygo"} {
		t.Run(name, func(t *testing.T) {
			c, ok := contenderByName(name)
			if !ok {
				t.Fatalf("no contender %q", name)
			}
			m, pids, err := runContentionProcs(t.Context(), c, one, 16, time.Millisecond, 100*time.Millisecond, 300*time.Millisecond)
			if err != nil {
				t.Fatalf("runContentionProcs = %v", err)
			}
			t.Logf("%s", headline("W3-procs", m))
			if len(pids) != 16 {
				t.Errorf("%d worker processes, want 16", len(pids))
			}
			if m["cs_per_s"] <= 0 || m["cs_worker_max"] <= 0 {
				t.Errorf("no critical section: %v", m)
			}
			if m["violations"] != 0 {
				t.Errorf("violations = %v, want 0", m["violations"])
			}
			if m["errors"] != 0 {
				t.Errorf("errors = %v, want 0", m["errors"])
			}
			for _, pid := range pids {
				if isChild(pid) {
					t.Errorf("worker pid %d still a child of this process", pid)
				}
			}
		})
	}
}

// isChild reports whether pid is a process (a zombie included) whose
// parent is this process.
func isChild(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state, ppid, ...
	return len(f) > 1 && f[1] == strconv.Itoa(os.Getpid())
}

func TestOverlaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []held // sorted by grant
		want int
	}{
		{"none", nil, 0},
		{"one", []held{{0, 0, 10, 20}}, 0},
		{"back to back", []held{{0, 0, 10, 20}, {1, 5, 21, 30}, {0, 25, 31, 40}}, 0},
		{"grant at the release call", []held{{0, 0, 10, 20}, {1, 5, 20, 30}}, 0},
		{"overlap", []held{{0, 0, 10, 20}, {1, 5, 15, 30}}, 1},
		{"inside a long one", []held{{0, 0, 10, 100}, {1, 0, 20, 30}, {2, 0, 40, 50}, {1, 60, 110, 120}}, 2},
		{"same grant", []held{{0, 0, 10, 20}, {1, 0, 10, 20}}, 1},
	} {
		if got := overlaps(tc.in); got != tc.want {
			t.Errorf("%s: overlaps = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestSampleRecords checks the W3-procs figures on hand-made records of two
// workers, one critical section of which overlaps another.
func TestSampleRecords(t *testing.T) {
	recs := [][]lockRecord{
		{
			{Call: 0, Return: 10, Release: 20},   // before the window
			{Call: 21, Return: 40, Release: 50},  // gap 5 after worker 1's release at 35
			{Call: 60, Return: 70, Release: 200}, // overlaps worker 1's next
		},
		{
			{Call: 5, Return: 30, Release: 35}, // gap 10
			{Call: 36, Return: 55, Release: 65},
			{Call: 66, Return: 80, Release: 90}, // granted inside worker 0's hold: the violation
			{Call: 91, Return: 300, Err: "stopped"},
		},
	}
	var sm w3Sample
	sampleRecords(&sm, recs, 25, 150)
	if sm.violations != 1 {
		t.Errorf("violations = %d, want 1", sm.violations)
	}
	if want := []int{2, 3}; !slices.Equal(sm.perWorker, want) {
		t.Errorf("per worker = %v, want %v", sm.perWorker, want)
	}
	// Grants in the window, in order: 30 (w1), 40 (w0), 55 (w1), 70 (w0), 80 (w1).
	if want := []time.Duration{10, 5, 5, 5, -120}; !slices.Equal(sm.gaps, want) {
		t.Errorf("gaps = %v, want %v", sm.gaps, want)
	}
	if sm.other != 5 {
		t.Errorf("→other = %d, want 5", sm.other)
	}
	if want := []time.Duration{25, 19, 19, 10, 14}; !slices.Equal(sm.waits, want) {
		t.Errorf("waits = %v, want %v", sm.waits, want)
	}
	if sm.pendingMax != 150-91 {
		t.Errorf("pending max = %v, want %v", sm.pendingMax, time.Duration(150-91))
	}
}
