package redlock_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// The single-op benchmarks measure one uncontended Acquire and Release of a
// fresh lock name per op, on one goroutine: over one redis-server through
// the valkey store, and over five through redlock, in the same run. They
// report the mean (ns/op) and the median and 99th percentile (p50-µs,
// p99-µs). The Parallel64 variants run 64 goroutines.
//
//	go test -run '^$' -bench AcquireRelease -benchtime 5s ./store/redlock/

func BenchmarkAcquireRelease1Node(b *testing.B) {
	c := startNodes(b, 1)
	benchSerial(b, c, c.stores[0])
}

func BenchmarkAcquireRelease5Nodes(b *testing.B) {
	c := startNodes(b, 5)
	benchSerial(b, c, newRedlock(b, c.nodes()))
}

func BenchmarkAcquireRelease1NodeParallel64(b *testing.B) {
	c := startNodes(b, 1)
	benchParallel(b, c, c.stores[0])
}

func BenchmarkAcquireRelease5NodesParallel64(b *testing.B) {
	c := startNodes(b, 5)
	benchParallel(b, c, newRedlock(b, c.nodes()))
}

// BenchmarkAcquireRelease5NodesSameName is BenchmarkAcquireRelease5Nodes
// on one name, taken again and again: the nodes' counters agree, and no
// acquire needs a fence write-back.
func BenchmarkAcquireRelease5NodesSameName(b *testing.B) {
	c := startNodes(b, 5)
	sameName = true
	defer func() { sameName = false }()
	benchSerial(b, c, newRedlock(b, c.nodes()))
}

var (
	benchSeq atomic.Int64
	sameName bool // benchReq names every request "bench"
)

func benchReq() store.Request {
	n := strconv.FormatInt(benchSeq.Add(1), 10)
	name := "bench-" + n
	if sameName {
		name = "bench"
	}
	return store.Request{Name: name, Token: "token-" + n, TTL: 30 * time.Second, Mode: store.ModeMutex}
}

func acquireRelease(ctx context.Context, s store.Store) error {
	req := benchReq()
	g, err := s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		return fmt.Errorf("Acquire = %+v, %v", g, err)
	}
	if err := s.Release(ctx, req); err != nil {
		return fmt.Errorf("Release = %v", err)
	}
	return nil
}

// benchSerial reports CPU per op as benchParallel does when c is not nil.
func benchSerial(b *testing.B, c *cluster, s store.Store) {
	ctx := context.Background()
	for range 200 { // warm up connections and script caches
		if err := acquireRelease(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	var cpu *cpuMeter
	if c != nil {
		cpu = c.startCPU(b)
	}
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if err := acquireRelease(ctx, s); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
	if cpu != nil {
		cpu.report(b)
	}
}

// benchParallel also reports the CPU per op of this process (client-µs/op)
// and of c's servers together (server-µs/op): on a small machine, where
// they share the cores, ops/s follows their sum.
func benchParallel(b *testing.B, c *cluster, s store.Store) {
	ctx := context.Background()
	for range 200 {
		if err := acquireRelease(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
	b.ReportAllocs()
	cpu := c.startCPU(b)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := acquireRelease(ctx, s); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	cpu.report(b)
}

// The raw benchmarks are the floor of the machine for the two figures
// above: plain SET NX PX and DEL through valkey-go, on one node, and on five
// nodes sent in parallel and returning once three answered (what any
// Redlock with early return must wait for). On a small machine, where the
// five servers share the client's cores, the five-node floor is several
// times the one-node figure.

func BenchmarkRawSetDel1Node(b *testing.B) { benchRaw(b, 1, 1) }

func BenchmarkRawSetDel5NodesQuorum(b *testing.B) { benchRaw(b, 5, 3) }

func BenchmarkRawSetDel1NodeParallel64(b *testing.B) { benchRawParallel(b, 1, 1) }

func BenchmarkRawSetDel5NodesQuorumParallel64(b *testing.B) { benchRawParallel(b, 5, 3) }

func benchRaw(b *testing.B, n, need int) {
	c := startNodes(b, n)
	lat := make([]time.Duration, 0, 1<<16)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if err := rawSetDel(c, n, need); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// reportLatency reports the median and 99th percentile of lat.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func benchRawParallel(b *testing.B, n, need int) {
	c := startNodes(b, n)
	b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
	cpu := c.startCPU(b)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := rawSetDel(c, n, need); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	cpu.report(b)
}

// cpuMeter measures the CPU time of this process and of a cluster's
// servers from its start.
type cpuMeter struct {
	c              *cluster
	client, server time.Duration
}

func (c *cluster) startCPU(b *testing.B) *cpuMeter {
	return &cpuMeter{c: c, client: selfCPU(), server: c.serverCPU(b)}
}

// report reports the CPU per op since the start, over b.N ops.
func (m *cpuMeter) report(b *testing.B) {
	cl, srv := selfCPU()-m.client, m.c.serverCPU(b)-m.server
	b.ReportMetric(float64(cl.Microseconds())/float64(b.N), "client-µs/op")
	b.ReportMetric(float64(srv.Microseconds())/float64(b.N), "server-µs/op")
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time (user and system) of c's servers together.
func (c *cluster) serverCPU(b *testing.B) time.Duration {
	var total time.Duration
	for _, srv := range c.srvs {
		cpu, err := srv.CPU()
		if err != nil {
			b.Fatal(err)
		}
		total += cpu
	}
	return total
}

func rawSetDel(c *cluster, n, need int) error {
	ctx := context.Background()
	key := "raw-" + strconv.FormatInt(benchSeq.Add(1), 10)
	set := make(chan error, n)
	for _, s := range c.stores {
		cl := s.Client()
		go func() { set <- cl.Do(ctx, cl.B().Set().Key(key).Value("t").Nx().PxMilliseconds(30000).Build()).Error() }()
	}
	for range need {
		if err := <-set; err != nil {
			return err
		}
	}
	del := make(chan error, n)
	for _, s := range c.stores {
		cl := s.Client()
		go func() { del <- cl.Do(ctx, cl.B().Del().Key(key).Build()).Error() }()
	}
	for range need {
		if err := <-del; err != nil {
			return err
		}
	}
	return nil
}

// The RTT benchmarks model nodes on separate hosts: memory stores behind a
// fixed 500µs round trip (a sleep per call), so that the nodes never compete
// for the client's CPU. They measure what the algorithm itself adds to a
// round trip: waiting for the third of five replies, the fence write-back
// when nodes disagree, and the bookkeeping.

func BenchmarkAcquireRelease1NodeRTT500us(b *testing.B) {
	benchSerial(b, nil, rttStore{memory.New(), 500 * time.Microsecond})
}

func BenchmarkAcquireRelease5NodesRTT500us(b *testing.B) {
	nodes := make([]store.Store, 5)
	for i := range nodes {
		nodes[i] = rttStore{memory.New(), 500 * time.Microsecond}
	}
	benchSerial(b, nil, newRedlock(b, nodes))
}

// rttStore is a memory store whose every call takes rtt longer.
type rttStore struct {
	*memory.Store
	rtt time.Duration
}

func (s rttStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	time.Sleep(s.rtt)
	return s.Store.Acquire(ctx, req)
}

func (s rttStore) Extend(ctx context.Context, reqs []store.Request) []error {
	time.Sleep(s.rtt)
	return s.Store.Extend(ctx, reqs)
}

func (s rttStore) Release(ctx context.Context, req store.Request) error {
	time.Sleep(s.rtt)
	return s.Store.Release(ctx, req)
}

func (s rttStore) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
	time.Sleep(s.rtt)
	return s.Store.RaiseFence(ctx, req, fence)
}
