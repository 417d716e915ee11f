package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
)

// TestFenceRisesWithClockStepsBack: on a cluster that keeps its data,
// fences rise by last + 1 whatever the clock floor does. The store's clock
// is pinned, then stepped back an hour; grants of every path that issues a
// fence (a new hold, a fair handoff's claim, concurrent semaphore permits,
// an election) must each be above the one before, a reader gets the last
// writer's fence, and a fence key written by an older build (value "",
// the fence its ModRevision) is carried on.
func TestFenceRisesWithClockStepsBack(t *testing.T) {
	srv := etcdtest.Start(t)
	s, err := New(t.Context(), []string{srv.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var clock atomic.Int64
	clock.Store(wallFloor())
	s.floor = clock.Load
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	const name = "clock-back"
	var last int64
	rise := func(what string, f int64) {
		t.Helper()
		if f <= last {
			t.Fatalf("%s: fence %d, want above the last one, %d", what, f, last)
		}
		last = f
	}
	acquire := func(req store.Request) store.Grant {
		t.Helper()
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("Acquire(%+v) = %+v, %v", req, g, err)
		}
		return g
	}
	release := func(req store.Request) {
		t.Helper()
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release(%+v) = %v", req, err)
		}
	}
	mutex := func(tok string) store.Request {
		return store.Request{Name: name, Token: tok, TTL: time.Minute}
	}

	g := acquire(mutex("m1"))
	rise("mutex", g.Fence)
	release(mutex("m1"))
	clock.Add(-int64(time.Hour / time.Microsecond))
	g = acquire(mutex("m2"))
	rise("mutex after the clock stepped back", g.Fence)
	release(mutex("m2"))

	// Fair: a release hands the lock to the queued head (claim).
	fa := store.Request{Name: name, Token: "fa", TTL: time.Minute, Mode: store.ModeFair}
	fb := store.Request{Name: name, Token: "fb", TTL: time.Minute, Mode: store.ModeFair, Queue: true}
	rise("fair", acquire(fa).Fence)
	if g := acquire(fb); g.Acquired {
		t.Fatalf("fair Acquire while held = %+v, want a queue place", g)
	}
	release(fa)
	g = acquire(fb)
	if !g.Acquired {
		t.Fatalf("fair head after the release = %+v, want the handed-over hold", g)
	}
	rise("fair handoff", g.Fence)
	release(fb)

	// A writer, then a reader: the reader gets the writer's fence.
	w := store.Request{Name: name, Token: "w", TTL: time.Minute, Mode: store.ModeWrite}
	g = acquire(w)
	rise("writer", g.Fence)
	release(w)
	r := store.Request{Name: name, Token: "r", TTL: time.Minute, Mode: store.ModeRead}
	if g := acquire(r); !g.Acquired || g.Fence != last {
		t.Fatalf("reader = %+v, want a grant with the last writer's fence %d", g, last)
	}
	release(r)

	// Concurrent permits: one fence each, all above the last.
	clock.Add(-int64(time.Hour / time.Microsecond))
	const permits = 6
	fences := make([]int64, permits)
	var wg sync.WaitGroup
	for i := range permits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := store.Request{Name: name, Token: fmt.Sprintf("p%d", i), TTL: time.Minute, Mode: store.ModeSemaphore, Limit: permits}
			for ctx.Err() == nil {
				g, err := s.Acquire(ctx, req)
				if err == nil && g.Acquired {
					fences[i] = g.Fence
					return
				}
			}
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	for i, f := range fences {
		if f <= last || seen[f] {
			t.Fatalf("permit fences %v: permit %d's is not new or not above %d", fences, i, last)
		}
		seen[f] = true
		release(store.Request{Name: name, Token: fmt.Sprintf("p%d", i), TTL: time.Minute, Mode: store.ModeSemaphore, Limit: permits})
	}
	for _, f := range fences {
		last = max(last, f)
	}

	e := store.Request{Name: name, Token: "e", TTL: time.Minute, Mode: store.ModeElection, Value: "leader"}
	g = acquire(e)
	rise("election", g.Fence)
	if ld, err := s.Leader(ctx, name); err != nil || ld.Term != g.Fence {
		t.Fatalf("Leader = %+v, %v; want term %d", ld, err, g.Fence)
	}
	release(e)

	// A fence key of an older build: its ModRevision was the fence.
	const old = "old-build"
	put, err := s.cli.Put(ctx, s.fenceKey(old), "")
	if err != nil {
		t.Fatal(err)
	}
	clock.Store(0)
	or := store.Request{Name: old, Token: "r", TTL: time.Minute, Mode: store.ModeRead}
	if g := acquire(or); !g.Acquired || g.Fence != put.Header.Revision {
		t.Fatalf("reader on an older build's fence key = %+v, want its ModRevision %d", g, put.Header.Revision)
	}
	release(or)
	om := store.Request{Name: old, Token: "m", TTL: time.Minute}
	if g := acquire(om); !g.Acquired || g.Fence != put.Header.Revision+1 {
		t.Fatalf("mutex on an older build's fence key = %+v, want its ModRevision + 1 = %d", g, put.Header.Revision+1)
	}
	release(om)
}
