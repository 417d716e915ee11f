package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/redlock"
)

// TestInspectValkey checks State and List over three real nodes: a held
// lock shows one holder with its fence and remaining hold, a hold on one
// node alone does not count, a free lock is not listed, and one node down
// still leaves a majority to answer while two down do not.
func TestInspectValkey(t *testing.T) {
	c := startNodes(t, 3)
	s := newRedlock(t, c.nodes(), redlock.WithNodeTimeout(2*time.Second))
	ctx := t.Context()
	var in store.Inspector = s

	req := store.Request{Name: "held", Token: "a", TTL: time.Minute, Mode: store.ModeMutex}
	g, err := s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	st, err := in.State(ctx, "held")
	if err != nil {
		t.Fatalf("State = %v", err)
	}
	if st.Name != "held" || st.Holders != 1 || st.Mode != store.ModeMutex || st.Fence != g.Fence || st.TTL <= 50*time.Second || st.TTL > time.Minute {
		t.Errorf("State(held) = %+v, want 1 mutex holder, fence %d, TTL about 1m", st, g.Fence)
	}

	// A hold on one node of three: not a Redlock hold.
	part := store.Request{Name: "partial", Token: "b", TTL: time.Minute, Mode: store.ModeMutex}
	if g, err := c.stores[0].Acquire(ctx, part); err != nil || !g.Acquired {
		t.Fatalf("node 0 Acquire = %+v, %v", g, err)
	}
	if st, err := in.State(ctx, "partial"); err != nil || st.Holders != 0 || st.TTL != 0 || st.Fence != 0 {
		t.Errorf("State(partial) = %+v, %v; want no holder and no fence a majority issued", st, err)
	}

	list, err := in.List(ctx)
	if err != nil {
		t.Fatalf("List = %v", err)
	}
	if len(list) != 1 || list[0].Name != "held" || list[0].Holders != 1 || list[0].Fence != g.Fence {
		t.Errorf("List = %+v, want only held, with its fence %d", list, g.Fence)
	}

	c.srvs[2].Kill()
	if st, err := in.State(ctx, "held"); err != nil || st.Holders != 1 {
		t.Errorf("State with one node of three down = %+v, %v; want the holder", st, err)
	}
	if list, err := in.List(ctx); err != nil || len(list) != 1 {
		t.Errorf("List with one node of three down = %+v, %v; want held", list, err)
	}
	c.srvs[1].Kill()
	if _, err := in.State(ctx, "held"); !errors.Is(err, store.ErrNoQuorum) {
		t.Errorf("State with two nodes of three down = %v, want ErrNoQuorum", err)
	}
	if _, err := in.List(ctx); !errors.Is(err, store.ErrNoQuorum) {
		t.Errorf("List with two nodes of three down = %v, want ErrNoQuorum", err)
	}
	if _, err := in.State(ctx, ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("State(\"\") = %v, want ErrInvalid", err)
	}
}

// TestInspectReleased: after a release the lock has no holder, keeps its
// fence, and is not listed; a read lock held by two readers on every node
// shows two holders.
func TestInspectReleased(t *testing.T) {
	c := startNodes(t, 3)
	s := newRedlock(t, c.nodes(), redlock.WithNodeTimeout(2*time.Second))
	ctx := t.Context()
	req := store.Request{Name: "x", Token: "a", TTL: time.Minute, Mode: store.ModeMutex}
	g, err := s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	if st, err := s.State(ctx, "x"); err != nil || st.Holders != 0 || st.Fence != g.Fence {
		t.Errorf("State after release = %+v, %v; want no holder, fence %d", st, err, g.Fence)
	}
	if list, err := s.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List after release = %+v, %v; want none", list, err)
	}
	for _, tok := range []string{"r1", "r2"} {
		r := store.Request{Name: "rw", Token: tok, TTL: time.Minute, Mode: store.ModeRead}
		if g, err := s.Acquire(ctx, r); err != nil || !g.Acquired {
			t.Fatalf("Acquire(read %s) = %+v, %v", tok, g, err)
		}
	}
	if st, err := s.State(ctx, "rw"); err != nil || st.Holders != 2 || st.Mode != store.ModeRead {
		t.Errorf("State(rw) = %+v, %v; want 2 read holders", st, err)
	}
}

// noInspect is a store without the Inspector methods.
type noInspect struct {
	store.Store
	store.FenceRaiser
}

// TestInspectNotSupported: nodes that cannot describe their locks make
// State and List fail with ErrNotSupported, not a quorum error.
func TestInspectNotSupported(t *testing.T) {
	c := startNodes(t, 3)
	nodes := c.nodes()
	for i, n := range nodes {
		nodes[i] = noInspect{n, n.(store.FenceRaiser)}
	}
	s := newRedlock(t, nodes)
	if _, err := s.State(t.Context(), "x"); !errors.Is(err, store.ErrNotSupported) {
		t.Errorf("State = %v, want ErrNotSupported", err)
	}
	if _, err := s.List(t.Context()); !errors.Is(err, store.ErrNotSupported) {
		t.Errorf("List = %v, want ErrNotSupported", err)
	}
}
