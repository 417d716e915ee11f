package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
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
	for _, m := range []dlock.Mode{dlock.ModeMutex, dlock.ModeReentrant} {
		req := dlock.Request{Name: "reaper-race-" + m.String(), Token: "t1", TTL: 20 * time.Second, Mode: m}
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("%v: Acquire = %+v, %v", m, g, err)
		}
		kind, _ := kindOf(m)
		key := s.key(kind, req)
		// What the reaper does at the deadline, stopped before the revoke.
		s.mu.Lock()
		lease := s.lapseLocked(key)
		s.mu.Unlock()
		for _, ttl := range []time.Duration{time.Second, 20 * time.Second, time.Minute} {
			req.TTL = ttl
			if err := s.Extend(ctx, []dlock.Request{req})[0]; !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("%v: Extend(ttl %v) of a hold being revoked = %v, want ErrNotHeld", m, ttl, err)
			}
			if g, err := s.Acquire(ctx, req); err != nil || g.Acquired {
				t.Errorf("%v: retried Acquire(ttl %v) of a hold being revoked = %+v, %v, want a refusal", m, ttl, g, err)
			}
		}
		if err := s.Release(ctx, req); !errors.Is(err, dlock.ErrNotHeld) {
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
