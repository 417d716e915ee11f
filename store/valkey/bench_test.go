package valkey_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	vk "github.com/valkey-io/valkey-go"
)

// Run with: go test -run ^$ -bench . -benchtime 2000x ./store/valkey/
// Both benchmarks run against the same local redis-server through valkey-go,
// one lock name per operation.

// BenchmarkTryLockRelease is a dlock Locker on this store: TryLock (one
// acquire script, with its fence) then Release (one compare-and-delete).
func BenchmarkTryLockRelease(b *testing.B) {
	benchLocker(b, (*dlock.Mutex).TryLock)
}

// BenchmarkLockRelease is the blocking Lock of a free mutex then Release:
// the path of the bench command's W1 and W2.
func BenchmarkLockRelease(b *testing.B) {
	benchLocker(b, (*dlock.Mutex).Lock)
}

// BenchmarkLockReleaseSameName is BenchmarkLockRelease on one name, taken
// again and again: the fence counter exists, the acquire issues INCR.
func BenchmarkLockReleaseSameName(b *testing.B) {
	benchLockerNames(b, (*dlock.Mutex).Lock, func(int) string { return "bench" })
}

// benchLocker takes a fresh mutex with take and releases it, b.N times.
func benchLocker(b *testing.B, take func(*dlock.Mutex, context.Context) (*dlock.Lease, error)) {
	benchLockerNames(b, take, func(i int) string { return "bench-" + strconv.Itoa(i) })
}

// benchLockerNames takes the mutex name(i) with take and releases it, for
// i in [0, b.N).
func benchLockerNames(b *testing.B, take func(*dlock.Mutex, context.Context) (*dlock.Lease, error), name func(int) string) {
	srv, l := benchServerLocker(b)
	ctx := b.Context()
	b.ResetTimer()
	cpu := startCPU(b, srv)
	defer cpu.report(b)
	for i := range b.N {
		ls, err := take(l.Mutex(name(i)), ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockReleaseParallel is BenchmarkLockRelease from 64 goroutines
// on one Locker: the path of the bench command's W2.
func BenchmarkLockReleaseParallel(b *testing.B) {
	srv, l := benchServerLocker(b)
	ctx := b.Context()
	var seq atomic.Int64
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	cpu := startCPU(b, srv)
	defer cpu.report(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ls, err := l.Mutex("bench-" + strconv.FormatInt(seq.Add(1), 10)).Lock(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			if err := ls.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchServerLocker starts a redis-server and returns it with a Locker on a
// Store dialled to it, closed when the benchmark ends.
func benchServerLocker(b *testing.B) (*testredis.Server, *dlock.Locker) {
	srv := testredis.Start(b)
	l, err := dlock.New(dialB(b, srv.URL()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return srv, l
}

// BenchmarkRawSetNXDel is the floor: SET key token NX PX then DEL, two plain
// commands with no fence and no ownership check on release.
func BenchmarkRawSetNXDel(b *testing.B) {
	srv := testredis.Start(b)
	c := dialB(b, srv.URL()).Client()
	ctx := b.Context()
	b.ResetTimer()
	cpu := startCPU(b, srv)
	defer cpu.report(b)
	for i := range b.N {
		key := "lock:raw-" + strconv.Itoa(i)
		if err := c.Do(ctx, c.B().Set().Key(key).Value("token").Nx().PxMilliseconds(30000).Build()).Error(); err != nil {
			b.Fatal(err)
		}
		if err := c.Do(ctx, c.B().Del().Key(key).Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreAcquireRelease is the store alone, without a Locker:
// Acquire then Release, one script each.
func BenchmarkStoreAcquireRelease(b *testing.B) {
	srv := testredis.Start(b)
	s := dialB(b, srv.URL())
	ctx := b.Context()
	b.ResetTimer()
	cpu := startCPU(b, srv)
	defer cpu.report(b)
	for i := range b.N {
		req := store.Request{Name: "bench-" + strconv.Itoa(i), Token: "token", TTL: 30 * time.Second, Mode: store.ModeMutex}
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			b.Fatal(g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawSetNXCompareDel is the raw baseline of the bench command's W1
// on a client of its own, as there: SET key token NX PX, then a
// compare-and-delete script (GET, DEL): a safe release without a fence.
func BenchmarkRawSetNXCompareDel(b *testing.B) {
	srv := testredis.Start(b)
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := b.Context()
	del := vk.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	b.ResetTimer()
	cpu := startCPU(b, srv)
	defer cpu.report(b)
	for i := range b.N {
		key := "lock:raw-" + strconv.Itoa(i)
		if err := c.Do(ctx, c.B().Set().Key(key).Value("token").Nx().PxMilliseconds(30000).Build()).Error(); err != nil {
			b.Fatal(err)
		}
		if err := del.Exec(ctx, c, []string{key}, []string{"token"}).Error(); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuMeter reports the CPU time per op of this process (the client) and of
// the redis-server: on a shared machine, work per op is steadier than time.
type cpuMeter struct {
	srv            *testredis.Server
	client, server time.Duration
}

func startCPU(b *testing.B, srv *testredis.Server) *cpuMeter {
	m := &cpuMeter{srv: srv}
	m.client, m.server = selfCPU(), serverCPU(b, srv)
	return m
}

func (m *cpuMeter) report(b *testing.B) { m.reportN(b, b.N) }

// reportN reports the CPU per op over n ops.
func (m *cpuMeter) reportN(b *testing.B, n int) {
	c, s := selfCPU()-m.client, serverCPU(b, m.srv)-m.server
	b.ReportMetric(float64(c.Microseconds())/float64(n), "client-µs/op")
	b.ReportMetric(float64(s.Microseconds())/float64(n), "server-µs/op")
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func serverCPU(b *testing.B, srv *testredis.Server) time.Duration {
	cpu, err := srv.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}
