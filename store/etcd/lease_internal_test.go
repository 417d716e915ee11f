package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestExtendRacingReaper: the reaper has judged a hold lapsed and is
// revoking its lease when an Extend of the hold comes in. The Extend must
// report ErrNotHeld, not renew a lease that is about to go (RunModel seed
// 7869609661767216491: Extend nil, then Release ErrNotHeld).
func TestExtendRacingReaper(t *testing.T) {
	srv := etcdtest.Start(t)
	s, err := New(t.Context(), []string{srv.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, m := range []store.Mode{store.ModeMutex, store.ModeReentrant} {
		req := store.Request{Name: "reaper-race-" + m.String(), Token: "t1", TTL: 20 * time.Second, Mode: m}
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("%v: Acquire = %+v, %v", m, g, err)
		}
		k, _ := kindOf(m)
		key := s.key(k, req)
		// What the reaper does at the deadline, stopped before the revoke.
		s.mu.Lock()
		lease := s.lapseLocked(key)
		s.mu.Unlock()
		for _, ttl := range []time.Duration{time.Second, 20 * time.Second, time.Minute} {
			req.TTL = ttl
			if err := s.Extend(ctx, []store.Request{req})[0]; !errors.Is(err, store.ErrNotHeld) {
				t.Errorf("%v: Extend(ttl %v) of a hold being revoked = %v, want ErrNotHeld", m, ttl, err)
			}
			if g, err := s.Acquire(ctx, req); err != nil || g.Acquired {
				t.Errorf("%v: retried Acquire(ttl %v) of a hold being revoked = %+v, %v, want a refusal", m, ttl, g, err)
			}
		}
		if err := s.Release(ctx, req); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("%v: Release of a hold being revoked = %v, want ErrNotHeld", m, err)
		}
		s.revoke(lease)
		req.Token = "t2"
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Errorf("%v: Acquire after the revoke = %+v, %v, want a grant", m, g, err)
		}
		s.Release(ctx, req)
	}
}

// TestHandoffToLocalWaiter: a fair lock released to the head of its queue
// is claimed for the waiter's hold TTL, and a waiter of this store is
// tracked so that the TTL is kept to the millisecond (RunModel seed
// 7029504653993287023, a loaded machine: the handed-over hold outlived its
// 120ms TTL on etcd's one-second lease); a place that lapsed is not claimed.
func TestHandoffToLocalWaiter(t *testing.T) {
	srv := etcdtest.Start(t)
	s, err := New(t.Context(), []string{srv.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, lapse := range []bool{false, true} {
		name := fmt.Sprintf("handoff-%v", lapse)
		f := store.Request{Name: name, Token: "f", TTL: time.Minute, Mode: store.ModeFair}
		w := store.Request{Name: name, Token: "w", TTL: 10 * time.Second, Mode: store.ModeFair, Queue: true, QueueTTL: time.Minute}
		if g, err := s.Acquire(ctx, f); err != nil || !g.Acquired {
			t.Fatalf("Acquire(f) = %+v, %v", g, err)
		}
		if g, err := s.Acquire(ctx, w); err != nil || g.Acquired || g.Position != 0 {
			t.Fatalf("queued Acquire(w) = %+v, %v; want a refusal at 0", g, err)
		}
		key := s.key(kindFair, w)
		var lease clientv3.LeaseID
		if lapse { // what the reaper does at the place's deadline, before the revoke
			s.mu.Lock()
			lease = s.lapseLocked(key)
			s.mu.Unlock()
		}
		if err := s.Release(ctx, f); err != nil {
			t.Fatalf("Release(f) = %v", err)
		}
		left, tracked := s.remaining(key)
		err := s.Extend(ctx, []store.Request{w})[0]
		if lapse {
			if !errors.Is(err, store.ErrNotHeld) {
				t.Errorf("Extend(w) after a release handed the name to its lapsed place = %v, want ErrNotHeld", err)
			}
			s.revoke(lease)
			continue
		}
		if err != nil {
			t.Fatalf("Extend(w) after the handoff = %v, want nil", err)
		}
		if !tracked || left > w.TTL {
			t.Errorf("handed-over hold: tracked %v, %v left; want tracked, at most its %v TTL", tracked, left, w.TTL)
		}
		s.Release(ctx, w)
	}
}
