package valkey_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store/valkey"
)

// Contended handoff (issue 3): 16 goroutines, each with its own Store
// (connection) and Locker, take one lock in turn and hold it 1ms. Run with:
//
//	go test -run ^$ -bench Handoff -benchtime 3000x ./store/valkey/
//
// Metrics: cs/s (critical sections per second), busy-% (share of the wall
// time the lock was held), gap-p50/p99-µs (from a Release call to the next
// holder's grant), gap-p50-rtt (that gap in PING round trips measured
// before the run on an idle server; gap-p50-loaded-rtt in PING round trips
// measured during it), wait-p99/max-ms (from a Lock call to its grant), cmds/cs
// (server commands per critical section, Lua-internal ones included, from
// INFO commandstats).

func BenchmarkHandoffFair(b *testing.B) {
	benchHandoff(b, func(l *dlock.Locker, name string) func(context.Context) (*dlock.Lease, error) {
		return l.Fair(name).Lock
	})
}

func BenchmarkHandoffMutex(b *testing.B) {
	benchHandoff(b, func(l *dlock.Locker, name string) func(context.Context) (*dlock.Lease, error) {
		return l.Mutex(name).Lock
	})
}

func benchHandoff(b *testing.B, lock func(l *dlock.Locker, name string) func(context.Context) (*dlock.Lease, error)) {
	const workers, hold = 16, time.Millisecond
	srv := testredis.Start(b)
	ctx := b.Context()
	locks := make([]func(context.Context) (*dlock.Lease, error), workers)
	for i := range locks {
		l, err := dlock.New(dialB(b, srv.URL()), dlock.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		locks[i] = lock(l, "handoff")
	}
	rtt := pingRTT(b, dialB(b, srv.URL()))
	// Warm up: scripts loaded, subscriptions made.
	for _, lk := range locks {
		ls, err := lk(ctx)
		if err != nil {
			b.Fatal(err)
		}
		ls.Release(ctx)
	}

	var (
		mu          sync.Mutex
		lastRelease time.Time
		gaps, waits []time.Duration
		held        time.Duration
		wg          sync.WaitGroup
		next        = make(chan struct{}, b.N)
	)
	for range b.N {
		next <- struct{}{}
	}
	close(next)
	// A PING every 5ms during the run: the round trip under this load.
	pinger := dialB(b, srv.URL()).Client()
	pctx, stopPing := context.WithCancel(ctx)
	var loaded []time.Duration
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		for pctx.Err() == nil {
			t := time.Now()
			if pinger.Do(pctx, pinger.B().Ping().Build()).Error() == nil {
				loaded = append(loaded, time.Since(t))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	before := commandCalls(b, srv)
	b.ResetTimer()
	start := time.Now()
	for _, lk := range locks {
		wg.Go(func() {
			for range next {
				asked := time.Now()
				ls, err := lk(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				granted := time.Now()
				time.Sleep(hold)
				mu.Lock()
				if !lastRelease.IsZero() {
					gaps = append(gaps, granted.Sub(lastRelease))
				}
				waits = append(waits, granted.Sub(asked))
				released := time.Now()
				held += released.Sub(granted)
				lastRelease = released
				mu.Unlock()
				ls.Release(ctx)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	b.StopTimer()
	cmds := commandCalls(b, srv) - before
	stopPing()
	<-pinged
	slices.Sort(loaded)
	// PINGs are counted by commandstats too.
	cmds -= int64(len(loaded))
	slices.Sort(gaps)
	slices.Sort(waits)
	pct := func(d []time.Duration, p float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		return d[min(len(d)-1, int(float64(len(d))*p))]
	}
	b.ReportMetric(float64(b.N)/wall.Seconds(), "cs/s")
	b.ReportMetric(100*held.Seconds()/wall.Seconds(), "busy-%")
	b.ReportMetric(float64(pct(gaps, 0.5).Microseconds()), "gap-p50-µs")
	b.ReportMetric(float64(pct(gaps, 0.99).Microseconds()), "gap-p99-µs")
	b.ReportMetric(float64(pct(gaps, 0.5))/float64(rtt), "gap-p50-rtt")
	b.ReportMetric(float64(pct(gaps, 0.99))/float64(rtt), "gap-p99-rtt")
	b.ReportMetric(float64(pct(waits, 0.99).Microseconds())/1000, "wait-p99-ms")
	b.ReportMetric(float64(waits[len(waits)-1].Microseconds())/1000, "wait-max-ms")
	b.ReportMetric(float64(rtt.Microseconds()), "rtt-µs")
	if len(loaded) > 0 {
		lrtt := loaded[len(loaded)/2]
		b.ReportMetric(float64(lrtt.Microseconds()), "rtt-loaded-µs")
		b.ReportMetric(float64(pct(gaps, 0.5))/float64(lrtt), "gap-p50-loaded-rtt")
	}
	b.ReportMetric(float64(cmds)/float64(b.N), "cmds/cs")
	b.ReportMetric(0, "ns/op")
}

// pingRTT is the median of 200 PING round trips.
func pingRTT(b *testing.B, s *valkey.Store) time.Duration {
	c := s.Client()
	var d []time.Duration
	for range 200 {
		t := time.Now()
		if err := c.Do(b.Context(), c.B().Ping().Build()).Error(); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t))
	}
	slices.Sort(d)
	return d[len(d)/2]
}

var callsRE = regexp.MustCompile(`calls=(\d+)`)

// commandCalls sums the calls of every command in INFO commandstats.
func commandCalls(b *testing.B, srv *testredis.Server) int64 {
	out, err := srv.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, m := range callsRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n
}
