// Package storebench measures every dlock store against its real server in
// one run: the latency of one uncontended Acquire and Release (median and
// 99th percentile) and the throughput of 64 goroutines doing the same on
// distinct locks. PostgreSQL, etcd and ZooKeeper run durable (fsync on
// commit, their defaults); Valkey runs without persistence, as the tests
// do. It is its own module so that the stores' modules do not
// depend on each other. Results and the command are in
// docs/benchmarks.md ("Stores compared").
//
//	cd store/postgres/storebench && go test -run '^$' -bench . -benchtime 2000x
package storebench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
	"github.com/dlock-dev/dlock/store/zookeeper"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	os.Exit(code)
}

type backend struct {
	name string
	open func(b *testing.B) store.Store
}

func closer(b *testing.B, c interface{ Close() error }) { b.Cleanup(func() { c.Close() }) }

func check(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

var backends = []backend{
	{"memory", func(b *testing.B) store.Store { return memory.New() }},
	{"valkey", func(b *testing.B) store.Store {
		srv := testredis.Start(b)
		s, err := valkey.Dial(b.Context(), srv.URL())
		check(b, err)
		closer(b, s)
		return s
	}},
	{"redlock-5", func(b *testing.B) store.Store {
		var nodes []store.Store
		for range 5 {
			srv := testredis.Start(b)
			s, err := valkey.Dial(b.Context(), srv.URL())
			check(b, err)
			closer(b, s)
			nodes = append(nodes, s)
		}
		s, err := redlock.New(nodes)
		check(b, err)
		closer(b, s)
		return s
	}},
	{"etcd", func(b *testing.B) store.Store {
		srv := etcdtest.Start(b)
		s, err := etcd.New(b.Context(), []string{srv.Endpoint()})
		check(b, err)
		closer(b, s)
		return s
	}},
	{"postgres", func(b *testing.B) store.Store {
		srv := pgtest.Start(b, pgtest.WithFsync())
		s, err := postgres.New(b.Context(), srv.URL()+"&pool_max_conns=32")
		check(b, err)
		closer(b, s)
		return s
	}},
	{"postgres-advisory", func(b *testing.B) store.Store {
		srv := pgtest.Start(b, pgtest.WithFsync())
		s, err := postgres.NewAdvisory(b.Context(), srv.URL())
		check(b, err)
		closer(b, s)
		return s
	}},
	{"zookeeper", func(b *testing.B) store.Store {
		srv := zktest.Start(b, zktest.WithSync())
		s, err := zookeeper.New(b.Context(), []string{srv.Addr()})
		check(b, err)
		closer(b, s)
		return s
	}},
}

var seq atomic.Int64

func acquireRelease(ctx context.Context, s store.Store) error {
	n := strconv.FormatInt(seq.Add(1), 10)
	req := store.Request{Name: "bench-" + n, Token: "token-" + n, TTL: 30 * time.Second, Mode: store.ModeMutex}
	g, err := s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		return fmt.Errorf("Acquire = %+v, %v", g, err)
	}
	if err := s.Release(ctx, req); err != nil {
		return fmt.Errorf("Release = %v", err)
	}
	return nil
}

// BenchmarkStores runs, per store, "serial" (one goroutine; reports the
// median and 99th percentile of one Acquire+Release of a fresh lock name)
// and "parallel64" (64 goroutines on distinct names; reports ops/s).
func BenchmarkStores(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b)
			ctx := b.Context()
			for range 50 { // warm up connections and server caches
				if err := acquireRelease(ctx, s); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("serial", func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					t0 := time.Now()
					if err := acquireRelease(ctx, s); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "p99-µs")
			})
			b.Run("parallel64", func(b *testing.B) {
				var (
					next  atomic.Int64
					wg    sync.WaitGroup
					first atomic.Value
				)
				b.ResetTimer()
				t0 := time.Now()
				for range 64 {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							if err := acquireRelease(ctx, s); err != nil {
								first.CompareAndSwap(nil, err)
								return
							}
						}
					})
				}
				wg.Wait()
				el := time.Since(t0)
				b.StopTimer()
				if err, _ := first.Load().(error); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
			})
		})
	}
}
