package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// TestProposedFenceFloor: the store takes a floor proposed in the context
// (store.WithFenceFloor, as store/redlock proposes one to all its nodes)
// when it is above its next fence by at most 100 ms of its clock floor, in
// every pattern, so that memory nodes of one Redlock grant issue the same
// fence; a floor further ahead, or below the next fence, is not taken.
// Without it a reader on Redlock over memory nodes could be given a fence
// that a later writer's majority did not exceed (storetest's
// CrossPattern/read-then-mutex, seen once under load).
func TestProposedFenceFloor(t *testing.T) {
	ctx := context.Background()
	for i, m := range []store.Mode{store.ModeMutex, store.ModeRead, store.ModeWrite, store.ModeReentrant, store.ModeFair, store.ModeSemaphore, store.ModeElection} {
		s := memory.New() // its own mark
		name := "floor-" + m.String()
		req := store.Request{Name: name, Token: "t", TTL: time.Minute, Mode: m, Limit: 1}
		floor := time.Now().UnixMilli()*1000 + 50_000 + int64(i)
		g, err := s.Acquire(store.WithFenceFloor(ctx, floor), req)
		if err != nil || !g.Acquired || g.Fence != floor {
			t.Fatalf("%v: Acquire with a floor 50 ms ahead = %+v, %v; want fence %d", m, g, err, floor)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
		if m == store.ModeRead {
			continue // a reader after a reader gets the current fence
		}
		far := time.Now().UnixMilli()*1000 + 10_000_000
		g, err = s.Acquire(store.WithFenceFloor(ctx, far), req)
		if err != nil || !g.Acquired || g.Fence <= floor || g.Fence >= far {
			t.Errorf("%v: Acquire with a floor 10 s ahead = %+v, %v; want the next fence, not the floor", m, g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
		g, err = s.Acquire(store.WithFenceFloor(ctx, floor), req)
		if err != nil || !g.Acquired || g.Fence <= floor {
			t.Errorf("%v: Acquire with a floor below the last fence = %+v, %v; want above %d", m, g, err, floor)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
}
