package memory_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// BenchmarkTryLockRelease is a Locker's TryLock + Release on a fresh name
// per op: the library's own cost, with no network. Compare with
// store/valkey's benchmark of the same name.
func BenchmarkTryLockRelease(b *testing.B) {
	ctx := context.Background()
	l, err := dlock.New(memory.New())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lease, err := l.Mutex("bench-" + strconv.Itoa(i)).TryLock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTryLockReleaseParallel is the same from GOMAXPROCS goroutines.
func BenchmarkTryLockReleaseParallel(b *testing.B) {
	ctx := context.Background()
	l, err := dlock.New(memory.New())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lease, err := l.Mutex("bench-" + strconv.FormatInt(n.Add(1), 10)).TryLock(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			if err := lease.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLockReleaseParallel64 is the path of the bench command's W2 on
// this store: 64 goroutines, each a blocking Lock under a context that can
// be cancelled (as the driver's is) and a Release, on fresh names.
func BenchmarkLockReleaseParallel64(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := dlock.New(memory.New())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var n atomic.Int64
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lease, err := l.Mutex("bench-" + strconv.FormatInt(n.Add(1), 10)).Lock(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
