package redlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
)

// slowStore answers Acquire only after delay, having granted at once: the
// reply is late, as after a pause of the client or a slow network.
type slowStore struct {
	*memory.Store
	delay time.Duration
}

func (s slowStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	g, err := s.Store.Acquire(ctx, req)
	time.Sleep(s.delay)
	return g, err
}

// TestValidityUsedUpWhileAcquiring: a majority granted, but its replies came
// so late that TTL − elapsed − drift is not positive. Acquire refuses the
// grant (antirez's answer to a pause during acquisition) and releases it on
// every node rather than leaving it to expire.
func TestValidityUsedUpWhileAcquiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := memoryNodes(3)
		nodes := make([]store.Store, len(ms))
		for i, m := range ms {
			nodes[i] = slowStore{m, 995 * time.Millisecond}
		}
		s, err := redlock.New(nodes, redlock.WithNodeTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		req := store.Request{Name: "v", Token: "a", TTL: time.Second, Mode: store.ModeMutex}
		g, err := s.Acquire(t.Context(), req)
		var se *store.StoreError
		if g.Acquired || !errors.As(err, &se) || !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Acquire with replies after 995ms of a 1s TTL = %+v, %v; want a *StoreError", g, err)
		}
		for i, m := range ms {
			if st, _ := m.State(t.Context(), "v"); st.Holders != 0 {
				t.Errorf("node %d still holds %q (TTL left %v); want released", i, "v", st.TTL)
			}
		}
		// With time to spare, the same nodes grant.
		req.TTL = 10 * time.Second
		req.Token = "b"
		if g, err := s.Acquire(t.Context(), req); err != nil || !g.Acquired {
			t.Errorf("Acquire with replies after 995ms of a 10s TTL = %+v, %v; want a grant", g, err)
		}
	})
}

// TestDriftFactorShortensLease: a Locker's leases over a Store with a
// larger drift factor are shorter by the difference of the margins, 19% of
// the TTL between factors 0.01 and 0.2, since the Locker subtracts the
// Store's margin (store.Drifter) when it is larger than its own (0.01).
// The window from before TryLock to after TTL bounds what elapsed, so the
// bounds hold however slow the machine is. An extension's validity takes
// the same margin.
func TestDriftFactorShortensLease(t *testing.T) {
	const ttl = 10 * time.Second
	// lease returns the lease's TTL right after TryLock, and the time from
	// before TryLock to after TTL.
	lease := func(factor float64) (time.Duration, time.Duration) {
		s := newRedlock(t, asStores(memoryNodes(3)), redlock.WithDriftFactor(factor))
		l, err := dlock.New(s, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		start := time.Now()
		ls, err := l.Mutex("drift").TryLock(t.Context())
		if err != nil {
			t.Fatalf("TryLock over a Store with drift factor %v = %v", factor, err)
		}
		left := ls.TTL()
		window := time.Since(start)
		d := s.Drift(ttl)
		if left > ttl-d {
			t.Errorf("drift factor %v: lease TTL() = %v right after TryLock, want at most TTL − drift = %v", factor, left, ttl-d)
		}
		if err := ls.Extend(t.Context(), ttl); err != nil {
			t.Fatalf("drift factor %v: Extend = %v", factor, err)
		}
		if got := ls.TTL(); got > ttl-d {
			t.Errorf("drift factor %v: lease TTL() = %v right after Extend, want at most TTL − drift = %v", factor, got, ttl-d)
		}
		return left, window
	}
	small, ws := lease(0.01)
	large, wl := lease(0.2)
	// The margins are 0.01×TTL+2ms and 0.2×TTL+2ms; the leases' validities
	// were read after up to ws and wl of acquiring.
	diff := time.Duration(0.19 * float64(ttl))
	if got := small - large; got < diff-ws || got > diff+wl {
		t.Errorf("lease TTL with drift factor 0.01 − with 0.2 = %v − %v = %v, want %v (within −%v, +%v)", small, large, got, diff, ws, wl)
	}
}
