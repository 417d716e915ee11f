package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The bounds of issue 38 on etcd must hold when no dlock process is left to
// apply them: etcd's own lease expiry ends the hold (its whole second plus
// its half-second check late), not a timer of the process that took it.
// These tests close the granting store (its reaper stops) and watch the
// name from a second store, as a second replica or a restarted process
// would.

// expiryGrace bounds how late etcd ends a lease after its TTL: the TTL is
// rounded up to a second, the leader checks every half second, and the
// machine is shared (as TestStore's HoldEndsWithItsLeaseWhenTheProcessIsGone).
// Without the bounds the holds of these tests last 30s.
const expiryGrace = 10 * time.Second

func openStore(t *testing.T, srv *etcdtest.Server) *Store {
	t.Helper()
	s, err := New(t.Context(), []string{srv.Endpoint()})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// leaseOf is the etcd lease of req's key and its TTL left, by the server;
// lease 0 when the key is gone.
func leaseOf(t *testing.T, s *Store, req store.Request) (clientv3.LeaseID, time.Duration) {
	t.Helper()
	k, _ := kindOf(req.Mode)
	resp, err := s.cli.Get(t.Context(), s.key(k, req))
	if err != nil {
		t.Fatalf("Get = %v", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0
	}
	id := clientv3.LeaseID(resp.Kvs[0].Lease)
	ttl, err := s.cli.TimeToLive(t.Context(), id)
	if err != nil {
		t.Fatalf("TimeToLive = %v", err)
	}
	return id, time.Duration(ttl.TTL) * time.Second
}

// freeAt polls (every 20ms, up to limit) until a mutex Acquire by s is
// granted on name, and returns when; it releases the grant.
func freeAt(t *testing.T, s *Store, name string, limit time.Time) time.Time {
	t.Helper()
	req := store.Request{Name: name, Token: "probe", TTL: time.Minute}
	for {
		g, err := s.Acquire(t.Context(), req)
		now := time.Now()
		if err != nil {
			t.Fatalf("Acquire = %v", err)
		}
		if g.Acquired {
			if err := s.Release(t.Context(), req); err != nil {
				t.Fatalf("Release = %v", err)
			}
			return now
		}
		if now.After(limit) {
			t.Fatalf("%q still held at %v", name, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMinHoldEndsWithoutItsProcess: a mutex held with a 30s TTL and a 2s
// MinHold, released at once by a process that then goes away (its store is
// closed): the name stays held until grant + MinHold and is then freed by
// etcd alone, within its lease granularity, long before the TTL.
func TestMinHoldEndsWithoutItsProcess(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := openStore(t, srv), openStore(t, srv)
	const minHold = 2 * time.Second
	req := store.Request{Name: "min-gone", Token: "a", TTL: 30 * time.Second, MinHold: minHold, Holder: "a"}
	before := time.Now()
	if g, err := a.Acquire(t.Context(), req); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	if err := a.Release(t.Context(), req); err != nil {
		t.Fatalf("Release before MinHold = %v, want nil", err)
	}
	granted := time.Now() // the grant was before this
	if _, ttl := leaseOf(t, b, req); ttl > minHold {
		t.Errorf("released hold's lease TTL = %v, want at most %v: the hold ends at grant + MinHold on etcd", ttl, minHold)
	}
	a.Close() // no process of the holder is left
	free := freeAt(t, b, req.Name, granted.Add(minHold+expiryGrace))
	if free.Before(before.Add(minHold)) {
		t.Errorf("name free %v after the Acquire was sent, want at least the MinHold %v", free.Sub(before), minHold)
	}
	t.Logf("free %v after the grant (MinHold %v, left to etcd)", free.Sub(before), minHold)
}

// TestMaxHoldKeptByAnotherStore: a hold with a 30s TTL and a 2s MaxHold,
// its granting process gone, is extended by a second store (a replica that
// did not grant it): the extend is capped (the lease etcd keeps ends by
// grant + MaxHold), and once that passed the second store's Extend and
// Resume answer ErrNotHeld and etcd has freed the name.
func TestMaxHoldKeptByAnotherStore(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := openStore(t, srv), openStore(t, srv)
	const maxHold = 2 * time.Second
	req := store.Request{Name: "max-replica", Token: "a", TTL: 30 * time.Second, MaxHold: maxHold}
	before := time.Now()
	if g, err := a.Acquire(t.Context(), req); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	if _, ttl := leaseOf(t, b, req); ttl > maxHold {
		t.Errorf("lease TTL after the grant = %v, want at most %v", ttl, maxHold)
	}
	a.Close()
	if err := b.Extend(t.Context(), []store.Request{req})[0]; err != nil && time.Since(before) < maxHold-time.Second {
		t.Fatalf("Extend by another store inside MaxHold = %v, want nil", err)
	}
	if _, ttl := leaseOf(t, b, req); ttl > maxHold {
		t.Errorf("lease TTL after an Extend for 30s by another store = %v, want at most %v", ttl, maxHold)
	}
	b.Close() // neither process is left: etcd alone ends the hold
	c := openStore(t, srv)
	free := freeAt(t, c, req.Name, before.Add(maxHold+expiryGrace))
	t.Logf("free %v after the grant (MaxHold %v, TTL 30s, left to etcd)", free.Sub(before), maxHold)
	if err := c.Extend(t.Context(), []store.Request{req})[0]; !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Extend after grant + MaxHold = %v, want ErrNotHeld", err)
	}
	if g, err := c.Resume(t.Context(), req); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Resume after grant + MaxHold = %+v, %v, want ErrNotHeld", g, err)
	}
}

// TestResumeAfterRestart: a process takes a hold with a record and goes
// away; a new process resumes it by its token (same fence, record kept,
// the lease moved to the TTL asked for), releases it, and the name is free.
func TestResumeAfterRestart(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := openStore(t, srv), openStore(t, srv)
	req := store.Request{Name: "resumed", Token: "a", TTL: 3 * time.Second, Mode: store.ModeFair, Holder: "host/1", Data: "job 7"}
	g, err := a.Acquire(t.Context(), req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	a.Close()
	old, _ := leaseOf(t, b, req)
	again := req
	again.TTL = 20 * time.Second
	r, err := b.Resume(t.Context(), again)
	if err != nil || !r.Acquired || r.Fence != g.Fence || r.TTL != again.TTL {
		t.Fatalf("Resume = %+v, %v; want Acquired, fence %d, TTL %v", r, err, g.Fence, again.TTL)
	}
	if id, ttl := leaseOf(t, b, req); id == old || ttl < 10*time.Second {
		t.Errorf("lease after Resume = %x (was %x), TTL %v; want a new lease of about 20s", id, old, ttl)
	}
	if ttl, err := b.cli.TimeToLive(t.Context(), old); err == nil && ttl.TTL > 0 {
		t.Errorf("the lease before Resume still lives (TTL %ds), want it revoked", ttl.TTL)
	}
	st, err := b.State(t.Context(), req.Name)
	if err != nil || len(st.Owners) != 1 || st.Owners[0].Owner != req.Holder || st.Owners[0].Data != req.Data || st.Owners[0].Fence != g.Fence {
		t.Errorf("State after Resume = %+v, %v; want the first grant's record", st, err)
	}
	if err := b.Release(t.Context(), again); err != nil {
		t.Fatalf("Release of the resumed hold = %v", err)
	}
	freeAt(t, b, req.Name, time.Now().Add(expiryGrace))
}

// TestForceReleaseRevokesLeases: ForceRelease by another store ends the
// holds by their leases, so the holder's keep-alive renews nothing after
// it (the key and its lease end together, as on a Release), and the
// holder's Extend answers ErrNotHeld.
func TestForceReleaseRevokesLeases(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := openStore(t, srv), openStore(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var reqs []store.Request
	var leases []clientv3.LeaseID
	for _, tok := range []string{"p1", "p2", "p3"} {
		req := store.Request{Name: "forced", Token: tok, TTL: time.Minute, Mode: store.ModeSemaphore, Limit: 3, Holder: tok}
		if g, err := a.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v", tok, g, err)
		}
		id, _ := leaseOf(t, a, req)
		reqs, leases = append(reqs, req), append(leases, id)
	}
	ended, err := b.ForceRelease(ctx, "forced")
	if err != nil || len(ended) != 3 {
		t.Fatalf("ForceRelease = %+v, %v; want the 3 permits", ended, err)
	}
	for i, id := range leases {
		if _, err := a.cli.KeepAliveOnce(ctx, id); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.Errorf("keep-alive of permit %d's lease after ForceRelease = %v, want ErrLeaseNotFound", i, err)
		}
	}
	for _, err := range a.Extend(ctx, reqs) {
		if !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Extend of a force-released permit = %v, want ErrNotHeld", err)
		}
	}
	resp, err := b.cli.Get(ctx, b.slotPrefix("forced"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("slot keys after ForceRelease: %v, %v; want none", resp, err)
	}
}

// TestReleasedBeforeMinHoldHoldsNothing: a hold released before its
// MinHold keeps the name, but its token holds nothing any more: an Extend
// (a late renewal), a Resume, a repeated Acquire or Release by it cannot
// keep the name past grant + MinHold. State still shows the hold; an
// operator's ForceRelease ends it.
func TestReleasedBeforeMinHoldHoldsNothing(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openStore(t, srv)
	ctx := t.Context()
	for _, m := range []store.Mode{store.ModeMutex, store.ModeFair, store.ModeElection} {
		req := store.Request{Name: "released-" + m.String(), Token: "a", TTL: 30 * time.Second, Mode: m, MinHold: 30 * time.Second, Holder: "a"}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("%v: Acquire = %+v, %v", m, g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("%v: Release before MinHold = %v, want nil", m, err)
		}
		if err := s.Extend(ctx, []store.Request{req})[0]; !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("%v: Extend after the Release = %v, want ErrNotHeld", m, err)
		}
		if r, err := s.Resume(ctx, req); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("%v: Resume after the Release = %+v, %v, want ErrNotHeld", m, r, err)
		}
		if r, err := s.Acquire(ctx, req); err != nil || r.Acquired || r.Held != m {
			t.Errorf("%v: Acquire by the released token = %+v, %v, want a refusal by a %v hold", m, r, err, m)
		}
		if err := s.Release(ctx, req); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("%v: second Release = %v, want ErrNotHeld", m, err)
		}
		st, err := s.State(ctx, req.Name)
		if err != nil || st.Holders != 1 || len(st.Owners) != 1 || st.Owners[0].Fence != g.Fence || st.TTL > req.MinHold {
			t.Errorf("%v: State of the kept hold = %+v, %v; want its one hold, fence %d, TTL at most %v", m, st, err, g.Fence, req.MinHold)
		}
		ended, err := s.ForceRelease(ctx, req.Name)
		if err != nil || len(ended) != 1 || ended[0].Owner != "a" {
			t.Errorf("%v: ForceRelease = %+v, %v; want the kept hold", m, ended, err)
		}
		freeAt(t, s, req.Name, time.Now().Add(expiryGrace))
	}
}
