package memory_test

import (
	"context"
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
