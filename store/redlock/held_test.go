package redlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
)

// gatedStore answers Acquire only once gate is closed.
type gatedStore struct {
	*memory.Store
	gate <-chan struct{}
}

func (g gatedStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return store.Grant{}, ctx.Err()
	}
	return g.Store.Acquire(ctx, req)
}

// countingStore closes done when its Acquire has returned.
type countingStore struct {
	*memory.Store
	left *atomic.Int32
	done chan struct{}
}

func (c countingStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	g, err := c.Store.Acquire(ctx, req)
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
	return g, err
}

// TestRefusalHeldByMajority: a refusal names the pattern a majority of the
// nodes hold the name in, even when the first refusals come from a
// minority that still keeps an older hold (a renewal of a reader that
// reached two nodes after the reader's shorter re-acquire, as the model
// suite saw under load: the refusal said read while a writer held it).
func TestRefusalHeldByMajority(t *testing.T) {
	ms := memoryNodes(5)
	ctx := t.Context()
	hold := func(i int, mode store.Mode, token string) {
		t.Helper()
		g, err := ms[i].Acquire(ctx, store.Request{Name: "x", Token: token, TTL: time.Minute, Mode: mode})
		if err != nil || !g.Acquired {
			t.Fatalf("node %d: Acquire(%v) = %+v, %v", i, mode, g, err)
		}
	}
	hold(0, store.ModeRead, "reader")
	hold(1, store.ModeRead, "reader")
	for i := 2; i < 5; i++ {
		hold(i, store.ModeWrite, "writer")
	}
	// The two readers' nodes answer first; the writer's three after them.
	var left atomic.Int32
	left.Store(2)
	first := make(chan struct{})
	nodes := make([]store.Store, 5)
	for i := range nodes {
		if i < 2 {
			nodes[i] = countingStore{ms[i], &left, first}
		} else {
			nodes[i] = gatedStore{ms[i], first}
		}
	}
	s := newRedlock(t, nodes)
	g, err := s.Acquire(ctx, store.Request{Name: "x", Token: "mutex", TTL: time.Second, Mode: store.ModeMutex})
	if err != nil || g.Acquired {
		t.Fatalf("Acquire(mutex) = %+v, %v; want a refusal", g, err)
	}
	if g.Held != store.ModeWrite {
		t.Errorf("refusal Held = %v, want %v (3 of 5 nodes hold it for the writer)", g.Held, store.ModeWrite)
	}
}

// gatedExtendStore holds every Extend until gate is closed, and closes
// extended when one has returned.
type gatedExtendStore struct {
	*memory.Store
	gate     <-chan struct{}
	extended chan struct{}
}

func (g gatedExtendStore) Extend(ctx context.Context, reqs []store.Request) []error {
	<-g.gate
	defer close(g.extended)
	return g.Store.Extend(ctx, reqs)
}

// TestExtendReachesNodesInOrder: a renewal that returned on a majority
// still reaches the last node before the holder's next operation on the
// name does there. Before, a re-acquire with a shorter TTL could overtake
// it, and that node kept the renewal's longer hold (the model suite saw a
// refusal report a reader that had ended on the majority).
func TestExtendReachesNodesInOrder(t *testing.T) {
	ms := memoryNodes(5)
	gate, extended := make(chan struct{}), make(chan struct{})
	nodes := asStores(ms)
	nodes[4] = gatedExtendStore{ms[4], gate, extended}
	s := newRedlock(t, nodes, redlock.WithNodeTimeout(time.Minute))
	ctx := t.Context()
	req := store.Request{Name: "x", Token: "holder", TTL: time.Minute, Mode: store.ModeMutex}
	if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	long := req
	long.TTL = time.Hour
	if errs := s.Extend(ctx, []store.Request{long}); errs[0] != nil {
		t.Fatalf("Extend = %v (a majority answered)", errs[0])
	}
	short := req
	short.TTL = 5 * time.Second
	done := make(chan error, 1)
	go func() {
		g, err := s.Acquire(ctx, short)
		if err == nil && !g.Acquired {
			err = fmt.Errorf("re-acquire refused: %+v", g)
		}
		done <- err
	}()
	ttl := func(i int) time.Duration {
		st, err := ms[i].State(ctx, "x")
		if err != nil {
			t.Fatalf("node %d: State = %v", i, err)
		}
		return st.TTL
	}
	// The re-acquire reaches the nodes that renewed; then the renewal may
	// reach the last one.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if ttl(0) <= short.TTL && ttl(1) <= short.TTL && ttl(2) <= short.TTL && ttl(3) <= short.TTL {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the re-acquire did not reach nodes 0-3 within 10s")
		}
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-extended
	if got := ttl(4); got > short.TTL {
		t.Errorf("node 4 holds the lock for %v after the re-acquire of %v: the earlier renewal overtook it", got, short.TTL)
	}
}
