package redlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
)

func (f *faultyStore) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	if f.down.Load() {
		return store.Grant{}, errDown
	}
	return f.Store.Resume(ctx, req)
}

func (f *faultyStore) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.Store.ForceRelease(ctx, name)
}

// nodeHolders returns how many holds node has on name.
func nodeHolders(t *testing.T, node *memory.Store, name string) int {
	t.Helper()
	st, err := node.State(t.Context(), name)
	if err != nil {
		t.Fatalf("node State(%q) = %v", name, err)
	}
	return st.Holders
}

// TestFailedAcquireEndsMinHoldGrants: an Acquire with a MinHold that a
// majority does not grant (refused by another holder's nodes, or without
// quorum) leaves no hold on the nodes that granted it, where a Release
// would have kept each until its MinHold (a minute) ran out.
func TestFailedAcquireEndsMinHoldGrants(t *testing.T) {
	fs := faultyNodes(3)
	s := newRedlock(t, asStores(fs), redlock.WithNodeTimeout(2*time.Second))
	ctx := t.Context()

	// Refused: another token holds node 1 (and node 2 is down), so only
	// node 0 grants.
	other := mutexReq("split", "other")
	if g, err := fs[1].Store.Acquire(ctx, other); err != nil || !g.Acquired {
		t.Fatalf("node 1 Acquire = %+v, %v", g, err)
	}
	fs[2].down.Store(true)
	ours := mutexReq("split", "ours")
	ours.MinHold = time.Minute
	if g, err := s.Acquire(ctx, ours); err != nil || g.Acquired {
		t.Fatalf("Acquire with node 1 held and node 2 down = %+v, %v; want a refusal", g, err)
	}
	if n := nodeHolders(t, fs[0].Store, "split"); n != 0 {
		t.Errorf("node 0 after the refused Acquire with a MinHold: %d holders, want none", n)
	}

	// No quorum: nodes 1 and 2 down, node 0 grants.
	fs[1].down.Store(true)
	nq := mutexReq("noquorum", "ours")
	nq.MinHold = time.Minute
	if _, err := s.Acquire(ctx, nq); !errors.Is(err, store.ErrNoQuorum) {
		t.Fatalf("Acquire with two nodes of three down = %v, want ErrNoQuorum", err)
	}
	if n := nodeHolders(t, fs[0].Store, "noquorum"); n != 0 {
		t.Errorf("node 0 after an Acquire with a MinHold without quorum: %d holders, want none", n)
	}
}

// waitNextMilli waits until the clock's millisecond has changed, so that
// two grants on either side of it have different Since.
func waitNextMilli() {
	ms := time.Now().UnixMilli()
	for time.Now().UnixMilli() == ms {
		time.Sleep(100 * time.Microsecond)
	}
}

// rawAcquire acquires req on each of nodes directly, failing t on a refusal.
func rawAcquire(t *testing.T, req store.Request, nodes ...*memory.Store) {
	t.Helper()
	for i, n := range nodes {
		if g, err := n.Acquire(t.Context(), req); err != nil || !g.Acquired {
			t.Fatalf("raw Acquire(%q, %q) on node %d = %+v, %v", req.Name, req.Token, i, g, err)
		}
	}
}

// TestOwnersAsMajoritySees: State shows the holds a majority of nodes have,
// by holder and data: a mutex holder on two nodes of three (not the other
// token on the third), its Since when the second node granted it; two
// readers on different majorities, both; a hold on one node, none.
func TestOwnersAsMajoritySees(t *testing.T) {
	ms := memoryNodes(3)
	s := newRedlock(t, asStores(ms), redlock.WithNodeTimeout(2*time.Second))
	ctx := t.Context()

	a := store.Request{Name: "m", Token: "a", TTL: time.Minute, Mode: store.ModeMutex, Holder: "host-a/1", Data: "job 1"}
	rawAcquire(t, a, ms[0])
	waitNextMilli()
	rawAcquire(t, a, ms[1])
	b := store.Request{Name: "m", Token: "b", TTL: time.Minute, Mode: store.ModeMutex, Holder: "host-b/2"}
	rawAcquire(t, b, ms[2])
	second, err := ms[1].State(ctx, "m")
	if err != nil || len(second.Owners) != 1 {
		t.Fatalf("node 1 State = %+v, %v", second, err)
	}
	st, err := s.State(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	want := second.Owners[0]
	if st.Holders != 1 || len(st.Owners) != 1 || st.Owners[0] != want {
		t.Errorf("State(m) = %+v; want one holder, %+v (node 1's record: the second grant)", st, want)
	}

	r1 := store.Request{Name: "r", Token: "r1", TTL: time.Minute, Mode: store.ModeRead, Holder: "reader-1"}
	r2 := store.Request{Name: "r", Token: "r2", TTL: time.Minute, Mode: store.ModeRead, Holder: "reader-2"}
	rawAcquire(t, r1, ms[0], ms[1])
	rawAcquire(t, r2, ms[1], ms[2])
	st, err = s.State(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if st.Holders != 2 || len(st.Owners) != 2 || st.Owners[0].Owner != "reader-1" || st.Owners[1].Owner != "reader-2" {
		t.Errorf("State(r) = %+v; want the two readers, each on a majority", st)
	}

	rawAcquire(t, store.Request{Name: "p", Token: "p", TTL: time.Minute, Mode: store.ModeMutex, Holder: "partial"}, ms[0])
	if st, err := s.State(ctx, "p"); err != nil || st.Holders != 0 || len(st.Owners) != 0 {
		t.Errorf("State(p) = %+v, %v; want no holder (one node of three)", st, err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "m" || len(list[0].Owners) != 1 || list[0].Owners[0] != want {
		t.Errorf("List = %+v, %v; want m with %+v, and r", list, err, want)
	}
}

// splitFences makes node 0's next fence for name higher than the floor a
// redlock Acquire proposes, so that a grant on all nodes settles on node 0's
// fence and writes it back to the others (which keep the fence they issued
// as their hold's).
func splitFences(t *testing.T, node *memory.Store, name string) int64 {
	t.Helper()
	pre := mutexReq(name, "pre")
	high := time.Now().UnixMilli()*1000 + 1e12
	rawAcquire(t, pre, node)
	if err := node.RaiseFence(t.Context(), pre, high); err != nil {
		t.Fatal(err)
	}
	if err := node.Release(t.Context(), pre); err != nil {
		t.Fatal(err)
	}
	return high
}

// TestResumeAfterRestart: a Store that never saw the grant (a restarted
// process) resumes it by its token with the fence the grant returned,
// though one of the two nodes that hold it reports a lower one (the fence
// it issued before the write-back), and the next holder's fence is above
// it.
func TestResumeAfterRestart(t *testing.T) {
	fs := faultyNodes(3)
	nodes := asStores(fs)
	first := newRedlock(t, nodes, redlock.WithNodeTimeout(2*time.Second))
	ctx := t.Context()
	high := splitFences(t, fs[0].Store, "res")
	a := mutexReq("res", "a")
	a.TTL = 5 * time.Second
	// Node 2 down: the grant is node 0's and node 1's, node 0's fence
	// settled on both.
	fs[2].down.Store(true)
	g, err := first.Acquire(ctx, a)
	if err != nil || !g.Acquired || g.Fence <= high {
		t.Fatalf("Acquire = %+v, %v; want a grant with node 0's fence, above %d", g, err, high)
	}
	fs[2].down.Store(false)

	restarted := newRedlock(t, nodes, redlock.WithNodeTimeout(2*time.Second))
	res := store.Request{Name: "res", Token: "a", TTL: time.Minute, Mode: store.ModeMutex}
	sent := time.Now()
	rg, err := restarted.Resume(ctx, res)
	if err != nil || !rg.Acquired || rg.Fence != g.Fence || rg.TTL != time.Minute {
		t.Fatalf("Resume = %+v, %v; want fence %d, TTL 1m", rg, err, g.Fence)
	}
	for i, f := range fs[:2] {
		if st, _ := f.State(ctx, "res"); st.TTL < time.Minute-time.Since(sent)-time.Second {
			t.Errorf("node %d TTL after Resume = %v, want about 1m (extended)", i, st.TTL)
		}
	}
	if err := restarted.Release(ctx, res); err != nil {
		t.Fatal(err)
	}
	if gb, err := first.Acquire(ctx, mutexReq("res", "b")); err != nil || !gb.Acquired || gb.Fence <= g.Fence {
		t.Errorf("Acquire after the resumed hold = %+v, %v; want a fence above %d", gb, err, g.Fence)
	}
}

// TestResumeQuorum: a token that holds a minority is not held (ErrNotHeld,
// and its minority hold is released); with too many nodes down the answer
// is a *QuorumError and the hold stays.
func TestResumeQuorum(t *testing.T) {
	fs := faultyNodes(3)
	s := newRedlock(t, asStores(fs), redlock.WithNodeTimeout(2*time.Second))
	ctx := t.Context()
	part := mutexReq("minority", "a")
	rawAcquire(t, part, fs[0].Store)
	if _, err := s.Resume(ctx, part); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("Resume of a hold on one node of three = %v, want ErrNotHeld", err)
	}
	if n := nodeHolders(t, fs[0].Store, "minority"); n != 0 {
		t.Errorf("node 0 after a refused Resume: %d holders, want the minority hold released", n)
	}

	held := mutexReq("held", "a")
	if g, err := s.Acquire(ctx, held); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	fs[1].down.Store(true)
	fs[2].down.Store(true)
	var qe *redlock.QuorumError
	if _, err := s.Resume(ctx, held); !errors.As(err, &qe) {
		t.Errorf("Resume with two nodes of three down = %v, want a *QuorumError", err)
	}
	if n := nodeHolders(t, fs[0].Store, "held"); n != 1 {
		t.Errorf("node 0 after a Resume without quorum: %d holders, want the hold kept", n)
	}
}

// TestForceReleaseQuorum: ForceRelease with one node of three down ends the
// hold on the others and returns its record; the next grant's fence is
// above the forced holder's; with two nodes down it is a *QuorumError.
func TestForceReleaseQuorum(t *testing.T) {
	fs := faultyNodes(3)
	s := newRedlock(t, asStores(fs), redlock.WithNodeTimeout(2*time.Second))
	ctx := t.Context()
	a := mutexReq("forced", "a")
	a.Holder, a.MinHold = "host-a/1", time.Minute
	g, err := s.Acquire(ctx, a)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	fs[2].down.Store(true)
	ended, err := s.ForceRelease(ctx, "forced")
	if err != nil || len(ended) != 1 || ended[0].Owner != "host-a/1" || ended[0].Fence != g.Fence {
		t.Fatalf("ForceRelease with one node down = %+v, %v; want host-a/1 with fence %d", ended, err, g.Fence)
	}
	for i, f := range fs[:2] {
		if n := nodeHolders(t, f.Store, "forced"); n != 0 {
			t.Errorf("node %d after ForceRelease: %d holders, want none", i, n)
		}
	}
	gb, err := s.Acquire(ctx, mutexReq("forced", "b"))
	if err != nil || !gb.Acquired || gb.Fence <= g.Fence {
		t.Errorf("Acquire after ForceRelease = %+v, %v; want a grant with a fence above %d", gb, err, g.Fence)
	}
	fs[1].down.Store(true)
	var qe *redlock.QuorumError
	if _, err := s.ForceRelease(ctx, "forced"); !errors.As(err, &qe) {
		t.Errorf("ForceRelease with two nodes of three down = %v, want a *QuorumError", err)
	}
}

// TestMaxHoldBoundsValidity: a grant's validity counts from its MaxHold
// when that is shorter than its TTL (the nodes cap the hold there): replies
// after 995ms leave none of a 1s MaxHold, though a 10s TTL would have.
func TestMaxHoldBoundsValidity(t *testing.T) {
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
		req := store.Request{Name: "v", Token: "a", TTL: 10 * time.Second, MaxHold: time.Second, Mode: store.ModeMutex}
		g, err := s.Acquire(t.Context(), req)
		var se *store.StoreError
		if g.Acquired || !errors.As(err, &se) {
			t.Fatalf("Acquire with replies after 995ms, TTL 10s, MaxHold 1s = %+v, %v; want a *StoreError (no validity left)", g, err)
		}
		req.MaxHold, req.Token = 0, "b"
		if g, err := s.Acquire(t.Context(), req); err != nil || !g.Acquired {
			t.Errorf("Acquire with replies after 995ms, TTL 10s, no MaxHold = %+v, %v; want a grant", g, err)
		}
	})
}

// TestForeignHoldValkey: a foreign library's key (redsync, node-redlock:
// lock:<name> holding its random value) on a majority of valkey nodes shows
// as one hold of an unknown owner, and ForceRelease ends it on every node,
// after which the name is granted.
func TestForeignHoldValkey(t *testing.T) {
	c := startNodes(t, 3)
	s := newRedlock(t, c.nodes(), redlock.WithNodeTimeout(2*time.Second))
	ctx := t.Context()
	for i := range 2 {
		if _, err := c.srvs[i].Do("SET", "lock:foreign", "redsync-value", "PX", "60000"); err != nil {
			t.Fatalf("node %d: SET = %v", i, err)
		}
	}
	st, err := s.State(ctx, "foreign")
	if err != nil || st.Holders != 1 || len(st.Owners) != 1 || st.Owners[0].Owner != "" || !st.Owners[0].Since.IsZero() {
		t.Errorf("State of a foreign hold on two nodes of three = %+v, %v; want one holder, its owner unknown", st, err)
	}
	ended, err := s.ForceRelease(ctx, "foreign")
	if err != nil || len(ended) != 1 || ended[0].Owner != "" {
		t.Errorf("ForceRelease of a foreign hold = %+v, %v; want the one unknown hold", ended, err)
	}
	for i := range 2 {
		if v := c.get(t, i, "lock:foreign"); v != "" {
			t.Errorf("node %d still has the foreign key (%q) after ForceRelease", i, v)
		}
	}
	if g, err := s.Acquire(ctx, mutexReq("foreign", "a")); err != nil || !g.Acquired {
		t.Errorf("Acquire after ForceRelease of a foreign hold = %+v, %v; want a grant", g, err)
	}
}

// slowResumer answers Resume only after delay, having extended at once.
type slowResumer struct {
	*memory.Store
	delay time.Duration
}

func (s slowResumer) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	g, err := s.Store.Resume(ctx, req)
	time.Sleep(s.delay)
	return g, err
}

// TestResumeValidityFromSend: a Resume's validity counts from before its
// first request was sent, as an Extend's: replies after 995ms of a 1s TTL
// leave none (a *store.StoreError), replies after 995ms of a 10s TTL a
// resumed hold.
func TestResumeValidityFromSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := memoryNodes(3)
		nodes := make([]store.Store, len(ms))
		for i, m := range ms {
			nodes[i] = slowResumer{m, 995 * time.Millisecond}
		}
		s, err := redlock.New(nodes, redlock.WithNodeTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		req := store.Request{Name: "v", Token: "a", TTL: time.Minute, Mode: store.ModeMutex}
		if g, err := s.Acquire(t.Context(), req); err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v", g, err)
		}
		req.TTL = time.Second
		g, err := s.Resume(t.Context(), req)
		var se *store.StoreError
		if g.Acquired || !errors.As(err, &se) {
			t.Errorf("Resume with replies after 995ms of a 1s TTL = %+v, %v; want a *StoreError (no validity left)", g, err)
		}
		req.TTL = 10 * time.Second
		if g, err := s.Resume(t.Context(), req); err != nil || !g.Acquired || g.TTL != req.TTL {
			t.Errorf("Resume with replies after 995ms of a 10s TTL = %+v, %v; want the hold, TTL 10s", g, err)
		}
	})
}
