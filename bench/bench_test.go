package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
