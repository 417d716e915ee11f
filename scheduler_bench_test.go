package dlock_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// BenchmarkTryLockRelease is an uncontended TryLock and Release on the
// memory store, so that the Locker's own cost shows: the scheduler's part
// of it is what docs/design.md's wakeAt row measures. cpu-ns/op is the
// process's CPU per op (user and system, every goroutine's), steadier than
// ns/op on a shared machine.
func BenchmarkTryLockRelease(b *testing.B) {
	l, err := dlock.New(memory.New(), dlock.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	m := l.Mutex("bench")
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpu()
	for b.Loop() {
		ls, err := m.TryLock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpu()-c0)/float64(b.N), "cpu-ns/op")
}
