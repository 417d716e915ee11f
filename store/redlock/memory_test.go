package redlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newRedlock returns a Store over nodes that is closed when the test ends.
func newRedlock(t testing.TB, nodes []store.Store, opts ...redlock.Option) *redlock.Store {
	t.Helper()
	s, err := redlock.New(nodes, opts...)
	if err != nil {
		t.Fatalf("redlock.New = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func memoryNodes(n int) []*memory.Store {
	ms := make([]*memory.Store, n)
	for i := range ms {
		ms[i] = memory.New()
	}
	return ms
}

func asStores[S store.Store](ss []S) []store.Store {
	out := make([]store.Store, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func TestConformanceMemory(t *testing.T) {
	nodes := asStores(memoryNodes(5))
	storetest.Run(t, storetest.Harness{
		// A generous node timeout, as over redis-servers: with -race on a
		// loaded machine a memory node can stall past the default 100ms.
		New:         func(t *testing.T) store.Store { return newRedlock(t, nodes, redlock.WithNodeTimeout(2*time.Second)) },
		Unsupported: []store.Mode{store.ModeReentrant, store.ModeFair, store.ModeSemaphore},
	})
}

func TestNewInvalid(t *testing.T) {
	three := asStores(memoryNodes(3))
	tests := []struct {
		name   string
		stores []store.Store
		opts   []redlock.Option
	}{
		{"none", nil, nil},
		{"one", three[:1], nil},
		{"even", append(asStores(memoryNodes(1)), three...), nil},
		{"nil store", []store.Store{three[0], nil, three[2]}, nil},
		{"not a fence raiser", []store.Store{three[0], plainStore{three[1]}, three[2]}, nil},
		{"node timeout", three, []redlock.Option{redlock.WithNodeTimeout(0)}},
		{"drift factor", three, []redlock.Option{redlock.WithDriftFactor(0.6)}},
		{"logger", three, []redlock.Option{redlock.WithLogger(nil)}},
	}
	for _, tt := range tests {
		s, err := redlock.New(tt.stores, tt.opts...)
		var ie *store.InvalidError
		if !errors.As(err, &ie) {
			t.Errorf("New(%s) = %v, %v; want an *InvalidError", tt.name, s, err)
		}
	}
}

// plainStore hides every method but those of store.Store.
type plainStore struct{ store.Store }

func TestUnsupportedModes(t *testing.T) {
	s := newRedlock(t, asStores(memoryNodes(3)))
	for _, m := range []store.Mode{store.ModeFair, store.ModeSemaphore, store.ModeReentrant} {
		_, err := s.Acquire(t.Context(), store.Request{Name: "x", Token: "t", TTL: time.Second, Mode: m, Limit: 2})
		if !errors.Is(err, store.ErrNotSupported) {
			t.Errorf("Acquire(mode %v) = %v, want ErrNotSupported", m, err)
		}
	}
}

// faultyStore fails every call while down is set.
type faultyStore struct {
	*memory.Store
	down atomic.Bool
	// refused counts the Acquire calls failed because down was set.
	refused atomic.Int32
}

var errDown = errors.New("node down")

func (f *faultyStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	if f.down.Load() {
		f.refused.Add(1)
		return store.Grant{}, errDown
	}
	return f.Store.Acquire(ctx, req)
}

func (f *faultyStore) Extend(ctx context.Context, reqs []store.Request) []error {
	if f.down.Load() {
		errs := make([]error, len(reqs))
		for i := range errs {
			errs[i] = errDown
		}
		return errs
	}
	return f.Store.Extend(ctx, reqs)
}

func (f *faultyStore) Release(ctx context.Context, req store.Request) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.Release(ctx, req)
}

func (f *faultyStore) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.RaiseFence(ctx, req, fence)
}

func faultyNodes(n int) []*faultyStore {
	fs := make([]*faultyStore, n)
	for i := range fs {
		fs[i] = &faultyStore{Store: memory.New()}
	}
	return fs
}

func mutexReq(name, token string) store.Request {
	return store.Request{Name: name, Token: token, TTL: 10 * time.Second, Mode: store.ModeMutex}
}

func TestQuorumMemory(t *testing.T) {
	fs := faultyNodes(5)
	s := newRedlock(t, asStores(fs))
	ctx := t.Context()

	fs[0].down.Store(true)
	fs[1].down.Store(true)
	a := mutexReq("q", "a")
	g, err := s.Acquire(ctx, a)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire with 2 of 5 nodes down = %+v, %v; want a grant", g, err)
	}
	if err := s.Release(ctx, a); err != nil {
		t.Fatalf("Release with 2 of 5 nodes down = %v, want nil", err)
	}

	fs[2].down.Store(true)
	g, err = s.Acquire(ctx, mutexReq("q", "b"))
	var qe *redlock.QuorumError
	if g.Acquired || !errors.Is(err, store.ErrNoQuorum) || !errors.As(err, &qe) {
		t.Fatalf("Acquire with 3 of 5 nodes down = %+v, %v; want a *QuorumError", g, err)
	}
	var se *store.StoreError
	if !errors.As(err, &se) || se.Node < 0 || se.Node > 2 {
		t.Errorf("Acquire error %v; want a *StoreError naming a down node", err)
	}
	if len(qe.Nodes) != 3 {
		t.Errorf("QuorumError.Nodes = %v, want the 3 down nodes", qe.Nodes)
	}
	for i, f := range fs[3:] {
		if st, _ := f.State(ctx, "q"); st.Holders != 0 {
			t.Errorf("node %d holds %q after the failed acquire; want released", i+3, "q")
		}
	}
}

func TestPartialAcquireMemory(t *testing.T) {
	ms := memoryNodes(5)
	s := newRedlock(t, asStores(ms))
	ctx := t.Context()
	other := mutexReq("p", "other")
	for _, m := range ms[:3] {
		if g, err := m.Acquire(ctx, other); err != nil || !g.Acquired {
			t.Fatalf("raw Acquire = %+v, %v", g, err)
		}
	}
	g, err := s.Acquire(ctx, mutexReq("p", "ours"))
	if err != nil || g.Acquired {
		t.Fatalf("Acquire against a majority held by another = %+v, %v; want a refusal", g, err)
	}
	if g.RetryAfter < 9*time.Second {
		t.Errorf("RetryAfter = %v, want about 10s (the other holder's TTL)", g.RetryAfter)
	}
	for i, m := range ms[3:] {
		if st, _ := m.State(ctx, "p"); st.Holders != 0 {
			t.Errorf("node %d holds %q after the refused acquire; want released", i+3, "p")
		}
	}
	l, err := dlock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.Mutex("p").TryLock(ctx)
	var le *dlock.LockedError
	if !errors.As(err, &le) {
		t.Errorf("TryLock = %v, want a *LockedError", err)
	}
}

// TestFenceWriteBack shows that the write-back makes the next grant's fence
// higher even when the node that issued the highest fence is not in the
// next winner's majority.
func TestFenceWriteBack(t *testing.T) {
	fs := faultyNodes(5)
	s := newRedlock(t, asStores(fs))
	ctx := t.Context()

	// Push node 0's counter far ahead of the others.
	high := time.Now().UnixMilli()*1000 + 1e12
	pre := mutexReq("f", "pre")
	fs[0].Store.Acquire(ctx, pre)
	if err := fs[0].Store.RaiseFence(ctx, pre, high); err != nil {
		t.Fatal(err)
	}
	fs[0].Store.Release(ctx, pre)

	// A wins on nodes 0, 1, 2 (3 and 4 are down): its fence is node 0's.
	fs[3].down.Store(true)
	fs[4].down.Store(true)
	a := mutexReq("f", "a")
	ga, err := s.Acquire(ctx, a)
	if err != nil || !ga.Acquired {
		t.Fatalf("Acquire(a) = %+v, %v", ga, err)
	}
	if ga.Fence <= high {
		t.Fatalf("Acquire(a) fence = %d, want above %d", ga.Fence, high)
	}
	// Acquire returned at the majority; A's requests to nodes 3 and 4 may
	// still be on their way, and would be granted once the nodes are up.
	for _, f := range fs[3:] {
		for deadline := time.Now().Add(10 * time.Second); f.refused.Load() == 0; {
			if time.Now().After(deadline) {
				t.Fatal("A's request to a down node not answered after 10 s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	// A's key vanishes on node 2 (a clock jump there); nodes 0 and 1 stay
	// out of reach of the next client, 3 and 4 come back.
	fs[2].Store.Release(ctx, a)
	fs[0].down.Store(true)
	fs[1].down.Store(true)
	fs[3].down.Store(false)
	fs[4].down.Store(false)
	gb, err := s.Acquire(ctx, mutexReq("f", "b"))
	if err != nil || !gb.Acquired {
		t.Fatalf("Acquire(b) = %+v, %v", gb, err)
	}
	if gb.Fence <= ga.Fence {
		t.Errorf("fence of the next holder = %d, want above the stale holder's %d", gb.Fence, ga.Fence)
	}
}

// TestModelMemory checks redlock over five memory nodes against
// storetest's model of the lock semantics.
func TestModelMemory(t *testing.T) {
	t.Parallel()
	nodes := asStores(memoryNodes(5))
	storetest.RunModel(t, storetest.Harness{
		New:         func(t *testing.T) store.Store { return newRedlock(t, nodes, redlock.WithNodeTimeout(2*time.Second)) },
		Unsupported: []store.Mode{store.ModeReentrant, store.ModeFair, store.ModeSemaphore},
	}, storetest.ModelConfig{})
}
