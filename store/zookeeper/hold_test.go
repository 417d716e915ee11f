package zookeeper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// The tests of this file cover what the hold suite of storetest cannot:
// a hold of one ZooKeeper session renewed or released through another
// Store (another process, another replica of the service). Only the
// granting process's reaper keeps a node's TTL and bounds, and its session
// keeps the node, so such a hold must move into the other Store's session
// with its record and bounds. Each test closes the granting Store (its
// session ends and ZooKeeper deletes its nodes at once) to show where the
// hold lives.

// mustGrant acquires req on s, failing t unless granted.
func mustGrant(t *testing.T, s store.Store, req store.Request) store.Grant {
	t.Helper()
	g, err := s.Acquire(t.Context(), req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire(%+v) = %+v, %v; want a grant", req, g, err)
	}
	return g
}

// refused checks that another token is refused name on s.
func refused(t *testing.T, s store.Store, name, when string) {
	t.Helper()
	req := store.Request{Name: name, Token: "other", TTL: 10 * time.Second}
	g, err := s.Acquire(t.Context(), req)
	if err != nil || g.Acquired {
		if g.Acquired {
			s.Release(t.Context(), req)
		}
		t.Errorf("Acquire(%q) by another token %s = %+v, %v; want refused", name, when, g, err)
	}
}

// grantedWhenFree polls Acquire of name by a new token on s until it is
// granted, failing t after within.
func grantedWhenFree(t *testing.T, s store.Store, name string, within time.Duration) store.Grant {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		g, err := s.Acquire(t.Context(), store.Request{Name: name, Token: "next", TTL: 10 * time.Second})
		if err == nil && g.Acquired {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire(%q) still %+v, %v after %v", name, g, err, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openStore connects a Store the test closes itself.
func openStore(t *testing.T, addr string) *zookeeper.Store {
	t.Helper()
	s, err := zookeeper.New(t.Context(), []string{addr})
	if err != nil {
		t.Fatalf("zookeeper.New(%q) = %v", addr, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestHoldMovesToAnotherSession: a hold granted through Store a and then
// resumed through Store b, or extended or acquired again by its token
// through a Store b made WithTakeOver, moves into b's session, with its
// fence and record (Since too): it outlives a's session, b's Extend keeps
// it, and a third Store sees it held.
func TestHoldMovesToAnotherSession(t *testing.T) {
	srv := zktest.Start(t)
	c := newStore(t, srv.Addr())
	for _, tc := range []struct {
		name string
		take func(ctx context.Context, b *zookeeper.Store, req store.Request) (store.Grant, error)
	}{
		{"Resume", func(ctx context.Context, b *zookeeper.Store, req store.Request) (store.Grant, error) {
			return b.Resume(ctx, req)
		}},
		{"Extend", func(ctx context.Context, b *zookeeper.Store, req store.Request) (store.Grant, error) {
			return store.Grant{Acquired: true}, b.Extend(ctx, []store.Request{req})[0]
		}},
		{"Acquire", func(ctx context.Context, b *zookeeper.Store, req store.Request) (store.Grant, error) {
			return b.Acquire(ctx, req)
		}},
	} {
		for _, mode := range []store.Mode{store.ModeMutex, store.ModeFair, store.ModeElection, store.ModeWrite, store.ModeSemaphore} {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				ctx := t.Context()
				a, b := openStore(t, srv.Addr()), newStore(t, srv.Addr(), zookeeper.WithTakeOver())
				name := "moves-" + tc.name + "-" + mode.String()
				req := store.Request{Name: name, Token: "tok", TTL: 20 * time.Second, Mode: mode, Limit: 1,
					Holder: "host-a/1", Data: `{"job":1}`, MaxHold: 30 * time.Second}
				g := mustGrant(t, a, req)
				before, err := c.State(ctx, name)
				if err != nil || len(before.Owners) != 1 {
					t.Fatalf("State(%q) = %+v, %v; want one owner", name, before, err)
				}
				got, err := tc.take(ctx, b, req)
				if err != nil || !got.Acquired {
					t.Fatalf("%s through another store = %+v, %v; want the hold", tc.name, got, err)
				}
				if tc.name != "Extend" && got.Fence != g.Fence {
					t.Errorf("%s through another store: fence %d, want the grant's %d", tc.name, got.Fence, g.Fence)
				}
				if tc.name == "Resume" && (got.MaxHoldLeft <= 0 || got.MaxHoldLeft > req.MaxHold || got.TTL != req.TTL) {
					t.Errorf("Resume = %+v, want TTL %v and MaxHoldLeft in (0, %v]", got, req.TTL, req.MaxHold)
				}
				a.Close() // a's session ends: ZooKeeper deletes a's nodes at once
				refused(t, c, name, "after the granting session closed")
				after, err := c.State(ctx, name)
				if err != nil || len(after.Owners) != 1 || after.Owners[0] != before.Owners[0] {
					t.Errorf("State(%q) after the move = %+v, %v; want the same record %+v", name, after, err, before.Owners)
				}
				if err := b.Extend(ctx, []store.Request{req})[0]; err != nil {
					t.Errorf("Extend through the store that took the hold = %v, want nil", err)
				}
				if err := b.Release(ctx, req); err != nil {
					t.Errorf("Release through the store that took the hold = %v, want nil", err)
				}
				if g2 := grantedWhenFree(t, c, name, 10*time.Second); g2.Fence <= g.Fence {
					t.Errorf("fence after the moved hold = %d, want > %d", g2.Fence, g.Fence)
				}
			})
		}
	}
}

// TestReleaseElsewhereKeepsMinHold: a hold with a MinHold (and a shorter
// TTL) released early through another Store stays until grant + MinHold,
// its token holding nothing, and ends by itself no earlier. Without
// WithTakeOver the release is marked in the node, which stays in the
// granting session, whose reaper reads the mark when the TTL runs out;
// with it the hold moves into the releasing Store's session, so the
// granting session may end meanwhile.
func TestReleaseElsewhereKeepsMinHold(t *testing.T) {
	srv := zktest.Start(t)
	for _, takeOver := range []bool{false, true} {
		name := "Marked"
		if takeOver {
			name = "TakenOver"
		}
		t.Run(name, func(t *testing.T) { releaseElsewhere(t, srv, takeOver) })
	}
}

func releaseElsewhere(t *testing.T, srv *zktest.Server, takeOver bool) {
	ctx := t.Context()
	var opts []zookeeper.Option
	if takeOver {
		opts = append(opts, zookeeper.WithTakeOver())
	}
	a, b, c := openStore(t, srv.Addr()), newStore(t, srv.Addr(), opts...), newStore(t, srv.Addr())
	const minHold = 4 * time.Second
	req := store.Request{Name: "min-elsewhere-" + t.Name()[len(t.Name())-6:], Token: "tok", TTL: time.Second, MinHold: minHold, Holder: "job/1"}
	start := time.Now()
	mustGrant(t, a, req)
	if err := b.Release(ctx, req); err != nil {
		t.Fatalf("Release through another store = %v, want nil", err)
	}
	if takeOver {
		a.Close()
	}
	if time.Since(start) < minHold-time.Second {
		refused(t, c, req.Name, "within its MinHold")
		for name, s := range map[string]*zookeeper.Store{"the releasing store": b, "the granting store": a} {
			if takeOver && s == a {
				continue
			}
			if err := s.Extend(ctx, []store.Request{req})[0]; !errors.Is(err, store.ErrNotHeld) {
				t.Errorf("Extend of a released hold through %s = %v, want ErrNotHeld", name, err)
			}
			if g, err := s.Resume(ctx, req); !errors.Is(err, store.ErrNotHeld) {
				t.Errorf("Resume of a released hold through %s = %+v, %v; want ErrNotHeld", name, g, err)
			}
			if g, err := s.Acquire(ctx, req); err != nil || g.Acquired {
				t.Errorf("a late repeated Acquire of a released hold through %s = %+v, %v; want refused", name, g, err)
			}
		}
		if err := b.Release(ctx, req); err != nil {
			t.Errorf("a repeated Release = %v, want nil", err)
		}
	}
	if time.Since(start) < minHold-time.Second {
		// The TTL (1s) has run out: the granting store's reaper kept it.
		refused(t, c, req.Name, "within its MinHold, past its TTL")
	}
	grantedWhenFree(t, c, req.Name, minHold+20*time.Second)
	if d := time.Since(start); d < minHold {
		t.Errorf("the name was free %v after the grant, want no earlier than its MinHold %v", d, minHold)
	}
}

// TestExtendElsewhereKeepsMaxHold: an Extend through another Store moves
// the hold and keeps its MaxHold end: the hold ends there, long before the
// Extend's TTL, and is then not held.
func TestExtendElsewhereKeepsMaxHold(t *testing.T) {
	srv := zktest.Start(t)
	ctx := t.Context()
	a, b, c := openStore(t, srv.Addr()), newStore(t, srv.Addr(), zookeeper.WithTakeOver()), newStore(t, srv.Addr())
	const maxHold = 6 * time.Second
	req := store.Request{Name: "max-elsewhere", Token: "tok", TTL: 30 * time.Second, MaxHold: maxHold}
	start := time.Now()
	mustGrant(t, a, req)
	if err := b.Extend(ctx, []store.Request{req})[0]; err != nil {
		t.Fatalf("Extend through another store = %v, want nil", err)
	}
	a.Close()
	if time.Since(start) < maxHold-time.Second {
		refused(t, c, req.Name, "within its MaxHold, after the granting session closed")
	}
	grantedWhenFree(t, c, req.Name, maxHold+20*time.Second)
	if d := time.Since(start); d >= req.TTL {
		t.Errorf("the name was free %v after the grant, want at its MaxHold %v, before the TTL %v", d, maxHold, req.TTL)
	}
	if err := b.Extend(ctx, []store.Request{req})[0]; !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Extend past the MaxHold = %v, want ErrNotHeld", err)
	}
}

// TestExtendElsewhereStaysInItsSession: without WithTakeOver, an Extend
// through another Store (a short-lived CLI command inside `dlock run`)
// leaves the hold in its granting session: it outlives the other Store.
func TestExtendElsewhereStaysInItsSession(t *testing.T) {
	srv := zktest.Start(t)
	ctx := t.Context()
	a, b, c := newStore(t, srv.Addr()), openStore(t, srv.Addr()), newStore(t, srv.Addr())
	req := store.Request{Name: "stays", Token: "tok", TTL: 20 * time.Second}
	g := mustGrant(t, a, req)
	if err := b.Extend(ctx, []store.Request{req})[0]; err != nil {
		t.Fatalf("Extend through another store = %v, want nil", err)
	}
	if g2, err := b.Acquire(ctx, req); err != nil || !g2.Acquired || g2.Fence != g.Fence {
		t.Fatalf("a repeated Acquire through another store = %+v, %v; want the grant, fence %d", g2, err, g.Fence)
	}
	b.Close()
	refused(t, c, req.Name, "after the other store closed")
	if err := a.Extend(ctx, []store.Request{req})[0]; err != nil {
		t.Errorf("Extend through the granting store = %v, want nil", err)
	}
}

// TestSinceIsTheGrant: a fair waiter's Since is its grant (the fence's
// write), not the creation of its queue place.
func TestSinceIsTheGrant(t *testing.T) {
	srv := zktest.Start(t)
	ctx := t.Context()
	s := newStore(t, srv.Addr())
	first := store.Request{Name: "since", Token: "first", TTL: 20 * time.Second, Mode: store.ModeFair}
	waiter := store.Request{Name: "since", Token: "waiter", TTL: 20 * time.Second, Mode: store.ModeFair,
		Queue: true, QueueTTL: 20 * time.Second, Holder: "waiter/1"}
	mustGrant(t, s, first)
	if g, err := s.Acquire(ctx, waiter); err != nil || g.Acquired {
		t.Fatalf("Acquire of the waiter = %+v, %v; want a queue place", g, err)
	}
	queued := time.Now()
	for time.Since(queued) < 50*time.Millisecond { // a gap the ensemble's ms clock shows
		time.Sleep(5 * time.Millisecond)
	}
	released := time.Now()
	if err := s.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	mustGrant(t, s, waiter)
	st, err := s.State(ctx, "since")
	if err != nil || len(st.Owners) != 1 {
		t.Fatalf("State = %+v, %v; want one owner", st, err)
	}
	if since := st.Owners[0].Since; since.Before(released.Truncate(time.Millisecond)) || since.After(time.Now()) {
		t.Errorf("the waiter's Since = %v, want its grant, after the release at %v (queued at %v)", since, released, queued)
	}
}

// TestForceReleaseOtherSession: ForceRelease through one Store ends a hold
// of another session, kept by its MinHold too; the granting Store's token
// then holds nothing, and the next fence is higher.
func TestForceReleaseOtherSession(t *testing.T) {
	srv := zktest.Start(t)
	ctx := t.Context()
	a, b := newStore(t, srv.Addr()), newStore(t, srv.Addr())
	req := store.Request{Name: "forced", Token: "tok", TTL: 20 * time.Second, MinHold: 20 * time.Second, Holder: "host-a/1"}
	g := mustGrant(t, a, req)
	if err := a.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	hs, err := b.ForceRelease(ctx, req.Name)
	if err != nil || len(hs) != 1 || hs[0].Owner != req.Holder || hs[0].Fence != g.Fence {
		t.Fatalf("ForceRelease = %+v, %v; want the hold of %q, fence %d", hs, err, req.Holder, g.Fence)
	}
	if err := a.Extend(ctx, []store.Request{req})[0]; !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Extend of a force-released hold = %v, want ErrNotHeld", err)
	}
	g2, err := b.Acquire(ctx, store.Request{Name: req.Name, Token: "next", TTL: 10 * time.Second})
	if err != nil || !g2.Acquired || g2.Fence <= g.Fence {
		t.Errorf("Acquire after ForceRelease = %+v, %v; want a grant with a fence > %d", g2, err, g.Fence)
	}
}

// TestResumeHandedFairPlace: Resume of a fair waiter's place that was
// handed the hold (its holder released) before the waiter asked again is
// its grant: a fence above the last holder's, Since and MinHold counted
// from then.
func TestResumeHandedFairPlace(t *testing.T) {
	srv := zktest.Start(t)
	ctx := t.Context()
	s, c := newStore(t, srv.Addr()), newStore(t, srv.Addr())
	first := store.Request{Name: "handed", Token: "first", TTL: 20 * time.Second, Mode: store.ModeFair}
	waiter := store.Request{Name: "handed", Token: "waiter", TTL: 20 * time.Second, Mode: store.ModeFair,
		Queue: true, QueueTTL: 20 * time.Second, Holder: "waiter/1", MinHold: 20 * time.Second}
	g1 := mustGrant(t, s, first)
	if g, err := s.Acquire(ctx, waiter); err != nil || g.Acquired {
		t.Fatalf("Acquire of the waiter = %+v, %v; want a queue place", g, err)
	}
	queued := time.Now()
	for time.Since(queued) < 50*time.Millisecond { // a gap the ensemble's ms clock shows
		time.Sleep(5 * time.Millisecond)
	}
	released := time.Now()
	if err := s.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	g, err := s.Resume(ctx, waiter)
	if err != nil || !g.Acquired || g.Fence <= g1.Fence {
		t.Fatalf("Resume of the handed place = %+v, %v; want a grant with a fence > %d", g, err, g1.Fence)
	}
	st, err := c.State(ctx, "handed")
	if err != nil || len(st.Owners) != 1 || st.Owners[0].Since.Before(released.Truncate(time.Millisecond)) {
		t.Errorf("State = %+v, %v; want the waiter's hold, Since after the release at %v", st, err, released)
	}
	if err := s.Release(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	refused(t, c, "handed", "after an early release of a resumed hold with a MinHold")
}
