package zookeeper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// TestExtendRacingReaper: the reaper has judged a hold lapsed and is
// deleting its node when an Extend of the hold comes in. It must report
// ErrNotHeld, not renew a node about to go (the race store/etcd's RunModel
// seed 7869609661767216491 showed).
func TestExtendRacingReaper(t *testing.T) {
	srv := zktest.Start(t)
	s, err := New(t.Context(), []string{srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, m := range []store.Mode{store.ModeMutex, store.ModeReentrant} {
		req := store.Request{Name: "reaper-race-" + m.String(), Token: "t1", TTL: 20 * time.Second, Mode: m}
		first, err := s.Acquire(ctx, req)
		if err != nil || !first.Acquired {
			t.Fatalf("%v: Acquire = %+v, %v", m, first, err)
		}
		kind, _ := kindOf(m)
		dir := s.dir(kind, req.Name)
		es, err := s.list(dir)
		if err != nil || len(es) != 1 {
			t.Fatalf("%v: list = %v, %v", m, es, err)
		}
		path := dir + "/" + es[0].name
		// What the reaper does at the deadline, stopped before the delete.
		s.mu.Lock()
		s.lapseLocked(path)
		s.mu.Unlock()
		if err := s.Extend(ctx, []store.Request{req})[0]; !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("%v: Extend of a hold being deleted = %v, want ErrNotHeld", m, err)
		}
		// A retried Acquire no longer sees the lapsed node: a new grant.
		s.conn.Delete(path, -1)
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired || g.Fence <= first.Fence {
			t.Errorf("%v: Acquire after the lapse = %+v, %v, want a new grant", m, g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Errorf("%v: Release of the new grant = %v", m, err)
		}
	}
}

// TestReentryBesideLapsedHold: a re-entry whose anchor (the owner's hold)
// lapses between the listing it decided on and its own node's creation is
// not a re-entry: it asks again rather than report Count 1 with the lapsed
// hold's fence (RunModel seed 13912318814901605033, a loaded machine).
func TestReentryBesideLapsedHold(t *testing.T) {
	srv := zktest.Start(t)
	s, err := New(t.Context(), []string{srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	a := store.Request{Name: "reentry-lapsed", Token: "a", TTL: 20 * time.Second, Mode: store.ModeReentrant, Owner: "o"}
	first, err := s.Acquire(ctx, a)
	if err != nil || !first.Acquired {
		t.Fatalf("Acquire(a) = %+v, %v", first, err)
	}
	dir := s.dir("r", a.Name)
	es, err := s.list(dir)
	if err != nil || len(es) != 1 {
		t.Fatalf("list = %v, %v", es, err)
	}
	s.mu.Lock()
	s.lapseLocked(dir + "/" + es[0].name) // a lapses after the listing
	s.mu.Unlock()
	b := a
	b.Token = "b"
	if g, err := s.acquireBeside("r", b, dir, es, 0); !errors.Is(err, errAnchorGone) {
		t.Errorf("re-entry beside a lapsed hold = %+v, %v; want errAnchorGone", g, err)
	}
	s.conn.Delete(dir+"/"+es[0].name, -1)
	g, err := s.Acquire(ctx, b)
	if err != nil || !g.Acquired || g.Count != 1 || g.Fence <= first.Fence {
		t.Errorf("Acquire(b) after a's lapse = %+v, %v; want a new hold (Count 1, fence > %d)", g, err, first.Fence)
	}
	s.Release(ctx, b)
}
