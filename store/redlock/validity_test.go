package redlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
)

// slowStore answers Acquire only after delay, having granted at once: the
// reply is late, as after a pause of the client or a slow network.
type slowStore struct {
	*memory.Store
	delay time.Duration
}

func (s slowStore) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, error) {
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
		nodes := make([]dlock.Store, len(ms))
		for i, m := range ms {
			nodes[i] = slowStore{m, 995 * time.Millisecond}
		}
		s, err := redlock.New(nodes, redlock.WithNodeTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		req := dlock.Request{Name: "v", Token: "a", TTL: time.Second, Mode: dlock.ModeMutex}
		g, err := s.Acquire(t.Context(), req)
		var se *dlock.StoreError
		if g.Acquired || !errors.As(err, &se) || !errors.Is(err, dlock.ErrUnavailable) {
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
