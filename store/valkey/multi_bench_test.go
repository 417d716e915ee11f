package valkey_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// Run with: go test -run ^$ -bench Multi -benchtime 3s ./store/valkey/

// BenchmarkMultiUncontended takes and releases a multi-lock on 4 fresh
// names: on one node, one acquire script and one release script.
func BenchmarkMultiUncontended(b *testing.B) {
	srv := testredis.Start(b)
	l, err := dlock.New(dialB(b, srv.URL()))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := b.Context()
	b.ResetTimer()
	for i := range b.N {
		names := []string{fmt.Sprint("mb-", i, "-a"), fmt.Sprint("mb-", i, "-b"), fmt.Sprint("mb-", i, "-c"), fmt.Sprint("mb-", i, "-d")}
		ml, err := l.Multi(names).TryLock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := ml.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMultiContended is storetest's overlap scenario as a benchmark:
// 16 goroutines (each its own Locker) take random sets of 1-4 of 8 names
// with Lock, and release at once. It reports multi-locks per second.
func BenchmarkMultiContended(b *testing.B) {
	srv := testredis.Start(b)
	s := dialB(b, srv.URL())
	const goroutines = 16
	lockers := make([]*dlock.Locker, goroutines)
	for i := range lockers {
		l, err := dlock.New(s, dlock.WithBackoff(time.Millisecond, 50*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		lockers[i] = l
	}
	names := make([]string, 8)
	for i := range names {
		names[i] = fmt.Sprint("mc-", i)
	}
	var next atomic.Int64
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		l := lockers[int(next.Add(1)-1)%goroutines]
		rnd := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			set := make([]string, 1+rnd.IntN(4))
			for i, j := range rnd.Perm(len(names))[:len(set)] {
				set[i] = names[j]
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			ml, err := l.Multi(set).Lock(ctx)
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
			ml.Release(context.Background())
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "multilocks/s")
}
