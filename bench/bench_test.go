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
	if lockServiceMode() { // a W5 lock service re-executed by a test
		os.Exit(lockServiceMain())
	}
	goleak.VerifyTestMain(m,
		// The scaling curve's Redis Cluster points (TestScaleQuick): valkey-go's
		// cluster client closes connections to nodes dropped by a topology
		// refresh after 5 seconds, and closes each node's connections at
		// Close, on goroutines of its own that outlive Close (as in
		// store/valkey's tests).
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*mux).Close"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient).refreshConns.func1"),
	)
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
		if strings.HasPrefix(c.Workload, "W3") && c.Median != nil {
			if _, ok := c.Median["overtaken_max"]; !ok || c.Median["release_p50_us"] <= 0 {
				t.Errorf("cell %s: overtaken max %v (present %v), release p50 %v µs", c.ID, c.Median["overtaken_max"], ok, c.Median["release_p50_us"])
			}
		}
		if c.Workload == "W5" && c.Median != nil && (c.Median["errors"] != 0 || c.Median["ops_per_s"] == 0) {
			t.Errorf("cell %s: %v errors, %v ops/s; want none and some", c.ID, c.Median["errors"], c.Median["ops_per_s"])
		}
		// The proxy holds every chunk D each way: a lower bound by design.
		if c.Workload == "W3-net" && c.Median != nil && c.Median["net_idle_rtt_p50_us"] < 2*float64(cfg.netDelay/time.Microsecond) {
			t.Errorf("cell %s: idle PING through the proxy %.0f µs, under 2 × %v", c.ID, c.Median["net_idle_rtt_p50_us"], cfg.netDelay)
		}
	}
	if n := rep.violations(); n != 0 {
		t.Errorf("violations = %d, want 0", n)
	}
	// W2-same takes each goroutine's name again and again: the name's fence
	// key exists, so the acquire makes two calls more than on W2's fresh
	// names (SET KEEPTTL and PEXPIRE GT of the fence key: six against four,
	// TestMutexFastPathCommands in store/valkey, since issue 41's grant that
	// writes first); the odd script load or contended release of a tiny
	// run may add a fraction, and so do the connections' set-up commands
	// of a cell that a loaded machine runs slowly (W2 at 2 545 ops/s beside
	// two busy loops counted 8.9 a fresh name, W2-same 10.3): the exact
	// counts are TestMutexFastPathCommands's, this checks the order.
	if fresh, same := rep.cell("W2/dlock"), rep.cell("W2-same/dlock"); fresh != nil && same != nil {
		if f, s := fresh.Median["srv_cmds_per_op"], same.Median["srv_cmds_per_op"]; s > f+3.5 || s < f+0.5 {
			t.Errorf("dlock server commands per op: W2-same %.1f, W2 %.1f; want two more on reused names than on fresh ones", s, f)
		}
	}
	// BENCH_ONLY may leave W6 out.
	if w6 := rep.cell("W6/dlock"); (w6 == nil && (cfg.only == nil || cfg.only.MatchString("W6/dlock"))) || (w6 != nil && w6.Median["lost"] != 0) {
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
	for _, c := range append(oneNode(), diagnostics()...) {
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
	for _, c := range append(oneNode(), diagnostics()...) {
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
			{Call: 0, Return: 10, Release: 20, Unlock: 25},  // before the window
			{Call: 21, Return: 40, Release: 50, Unlock: 53}, // gap 5 after worker 1's release at 35
			{Call: 60, Return: 70, Release: 200},            // overlaps worker 1's next; its release failed
		},
		{
			{Call: 5, Return: 30, Release: 35, Unlock: 37}, // gap 10
			{Call: 36, Return: 55, Release: 65, Unlock: 69},
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
	// Release round trips of the measured critical sections whose release
	// succeeded, worker by worker.
	if want := []time.Duration{3, 2, 4}; !slices.Equal(sm.releases, want) {
		t.Errorf("releases = %v, want %v", sm.releases, want)
	}
	// Every grant (the one before the window too) against the measured
	// waits: w1 (5,30) has w0's grant at 10; w0 (21,40) w1's at 30; w1
	// (36,55) w0's at 40; w0 (60,70) none; w1 (66,80) w0's at 70.
	if len(sm.grantLog) != 6 {
		t.Errorf("%d grants logged, want 6", len(sm.grantLog))
	}
	if got, want := overtakes(sm.grantLog, sm.spans), []int{1, 1, 1, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("overtakes = %v, want %v", got, want)
	}
}

// fifoRounds is n workers taking a lock in strict turn for rounds rounds,
// one grant every 10 ns; each worker calls Lock again 5 ns after its grant
// (the first time at -1).
func fifoRounds(n, rounds int) ([]grantAt, []waitSpan) {
	var gs []grantAt
	var ws []waitSpan
	call := make([]int64, n)
	for i := range call {
		call[i] = -1
	}
	for k := range n * rounds {
		w, at := k%n, int64(10*k)
		gs = append(gs, grantAt{worker: w, at: at})
		ws = append(ws, waitSpan{worker: w, call: call[w], grant: at})
		call[w] = at + 5
	}
	return gs, ws
}

func TestOvertakes(t *testing.T) {
	t.Run("fifo", func(t *testing.T) {
		gs, ws := fifoRounds(16, 5)
		got := overtakes(gs, ws)
		// The first round: worker w waits behind the w before it; then
		// every wait has the 15 others ahead, once each.
		for i, n := range got {
			want := 15
			if i < 16 {
				want = i
			}
			if n != want {
				t.Fatalf("wait %d (worker %d): overtaken %d times, want %d", i, ws[i].worker, n, want)
			}
		}
		if m := slices.Max(got); m != 15 {
			t.Errorf("max = %d, want 15", m)
		}
	})
	t.Run("fifo, grants unsorted", func(t *testing.T) {
		gs, ws := fifoRounds(16, 3)
		slices.Reverse(gs)
		if m := slices.Max(overtakes(gs, ws)); m != 15 {
			t.Errorf("max = %d, want 15", m)
		}
	})
	t.Run("poller overtaken", func(t *testing.T) {
		// Worker 0 waits from 0 to 1000 while workers 1 and 2 trade the
		// lock 10 times: 10 overtakes with 3 workers (FIFO would allow 2).
		gs := []grantAt{{0, 1000}}
		ws := []waitSpan{{0, 0, 1000}}
		for k := range 10 {
			w, at := 1+k%2, int64(50+50*k)
			gs = append(gs, grantAt{w, at})
			ws = append(ws, waitSpan{w, at - 60, at}) // the other's grant at at-50 inside
		}
		got := overtakes(gs, ws)
		if got[0] != 10 {
			t.Errorf("worker 0 overtaken %d times, want 10", got[0])
		}
		// Worker 1's and 2's waits each have the other's previous grant
		// inside, but the first.
		want := []int{10, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1}
		if !slices.Equal(got, want) {
			t.Errorf("overtakes = %v, want %v", got, want)
		}
	})
	t.Run("bounds and own grants", func(t *testing.T) {
		gs := []grantAt{
			{1, 10}, // at the call: not inside
			{1, 20}, // inside
			{0, 25}, // the waiter's own grant: not counted
			{2, 30}, // at the grant: not inside
			{0, 30}, // the wait's own grant
		}
		ws := []waitSpan{{0, 10, 30}, {2, 30, 30}}
		if got, want := overtakes(gs, ws), []int{1, 0}; !slices.Equal(got, want) {
			t.Errorf("overtakes = %v, want %v", got, want)
		}
	})
	t.Run("empty", func(t *testing.T) {
		if got := overtakes(nil, nil); len(got) != 0 {
			t.Errorf("overtakes = %v", got)
		}
		if got := overtakes(nil, []waitSpan{{3, 0, 10}}); !slices.Equal(got, []int{0}) {
			t.Errorf("overtakes = %v, want [0]", got)
		}
	})
}

// TestW3SampleOvertakeMetrics checks the figures metrics gives from the
// grants and waits: max and p99 of the overtakes, p50 of the releases.
func TestW3SampleOvertakeMetrics(t *testing.T) {
	gs, ws := fifoRounds(16, 10) // 160 waits, none overtaken more than 15 times
	sm := w3Sample{grantLog: gs, spans: ws, perWorker: []int{1}, waits: []time.Duration{1}}
	sm.releases = []time.Duration{30 * time.Microsecond, 10 * time.Microsecond, 20 * time.Microsecond}
	m, err := sm.metrics("test", &window{wall: time.Second}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m["overtaken_max"] != 15 || m["overtaken_p99"] != 15 {
		t.Errorf("FIFO: overtaken max %v, p99 %v, want 15, 15", m["overtaken_max"], m["overtaken_p99"])
	}
	if m["release_p50_us"] != 20 {
		t.Errorf("release p50 = %v µs, want 20", m["release_p50_us"])
	}
	// One more wait, as a starved poller's: a 17th worker from 0 to after
	// the last grant (1590), through every grant but the one at 0.
	sm.grantLog = append(sm.grantLog, grantAt{worker: 16, at: 2000})
	sm.spans = append(sm.spans, waitSpan{worker: 16, call: 0, grant: 2000})
	if m, _ = sm.metrics("test", &window{wall: time.Second}, 0); m["overtaken_max"] != 159 || m["overtaken_p99"] != 15 {
		t.Errorf("with a poller: overtaken max %v, p99 %v, want 159, 15", m["overtaken_max"], m["overtaken_p99"])
	}
}
