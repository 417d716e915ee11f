package redlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
)

func (f *faultyStore) Leader(ctx context.Context, name string) (store.Leader, error) {
	if f.down.Load() {
		return store.Leader{}, errDown
	}
	return f.Store.Leader(ctx, name)
}

func electionReq(name, token, value string) store.Request {
	return store.Request{Name: name, Token: token, TTL: 10 * time.Second, Mode: store.ModeElection, Value: value}
}

// TestElectionTermWriteBack is TestFenceWriteBack for elections: node 0
// issues the highest term, every node of the winner's majority reports the
// settled term, and the next leader, elected on a majority without node 0
// after the first leader's hold vanished on node 2 (a clock jump there),
// gets a higher term, which Leader reports.
func TestElectionTermWriteBack(t *testing.T) {
	fs := faultyNodes(5)
	s := newRedlock(t, asStores(fs))
	ctx := t.Context()

	high := time.Now().UnixMilli()*1000 + 1e12
	pre := mutexReq("e", "pre")
	fs[0].Store.Acquire(ctx, pre)
	if err := fs[0].Store.RaiseFence(ctx, pre, high); err != nil {
		t.Fatal(err)
	}
	fs[0].Store.Release(ctx, pre)

	fs[3].down.Store(true)
	fs[4].down.Store(true)
	a := electionReq("e", "a", "leader-a")
	ga, err := s.Acquire(ctx, a)
	if err != nil || !ga.Acquired || ga.Fence <= high {
		t.Fatalf("Acquire(a) = %+v, %v; want a grant with a term above %d", ga, err, high)
	}
	for i, f := range fs[:3] {
		if ld, err := f.Store.Leader(ctx, "e"); err != nil || ld.Term != ga.Fence {
			t.Errorf("node %d Leader = %+v, %v; want the settled term %d", i, ld, err, ga.Fence)
		}
	}
	if ld, err := s.Leader(ctx, "e"); err != nil || ld.Value != "leader-a" || ld.Term != ga.Fence || ld.TTL <= 0 {
		t.Errorf("Leader = %+v, %v; want leader-a with term %d", ld, err, ga.Fence)
	}

	fs[2].Store.Release(ctx, a)
	fs[0].down.Store(true)
	fs[1].down.Store(true)
	fs[3].down.Store(false)
	fs[4].down.Store(false)
	gb, err := s.Acquire(ctx, electionReq("e", "b", "leader-b"))
	if err != nil || !gb.Acquired {
		t.Fatalf("Acquire(b) = %+v, %v", gb, err)
	}
	if gb.Fence <= ga.Fence {
		t.Errorf("next leader's term = %d, want above the stale leader's %d", gb.Fence, ga.Fence)
	}
	if ld, err := s.Leader(ctx, "e"); err != nil || ld.Value != "leader-b" || ld.Term != gb.Fence {
		t.Errorf("Leader with nodes 0 and 1 down = %+v, %v; want leader-b with term %d", ld, err, gb.Fence)
	}
}

// TestElectionQuorum: with 2 of 5 nodes down a candidate is elected and
// reported; with 3 down Leader and Campaign fail for lack of quorum.
func TestElectionQuorum(t *testing.T) {
	fs := faultyNodes(5)
	s := newRedlock(t, asStores(fs))
	ctx := t.Context()
	l, err := dlock.New(s, dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	fs[0].down.Store(true)
	fs[1].down.Store(true)
	e := l.Election("q")
	lease, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatalf("Campaign with 2 of 5 nodes down = %v", err)
	}
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "v" || ld.Term != lease.Fence() {
		t.Errorf("Leader with 2 of 5 nodes down = %+v, %v; want v with term %d", ld, err, lease.Fence())
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("Resign with 2 of 5 nodes down = %v", err)
	}
	if ld, err := e.Leader(ctx); !errors.Is(err, store.ErrNoLeader) {
		t.Errorf("Leader after Resign = %+v, %v; want ErrNoLeader", ld, err)
	}

	fs[2].down.Store(true)
	var qe *redlock.QuorumError
	if ld, err := s.Leader(ctx, "q"); !errors.Is(err, store.ErrNoQuorum) || !errors.As(err, &qe) {
		t.Errorf("Leader with 3 of 5 nodes down = %+v, %v; want a *QuorumError", ld, err)
	}
	cctx, ccancel := context.WithTimeout(ctx, time.Second)
	defer ccancel()
	if _, err := l.Election("q").Campaign(cctx, "w"); !errors.Is(err, store.ErrNoQuorum) {
		t.Errorf("Campaign with 3 of 5 nodes down = %v, want ErrNoQuorum", err)
	}
}

// notElector is a node that raises fences but runs no elections.
type notElector struct {
	store.Store
	store.FenceRaiser
}

func TestElectionNeedsElectors(t *testing.T) {
	ms := memoryNodes(3)
	s := newRedlock(t, []store.Store{ms[0], notElector{ms[1], ms[1]}, ms[2]})
	ctx := t.Context()
	if _, err := s.Acquire(ctx, electionReq("x", "t", "v")); !errors.Is(err, store.ErrNotSupported) {
		t.Errorf("Acquire(election) over a node without elections = %v, want ErrNotSupported", err)
	}
	if _, err := s.Leader(ctx, "x"); !errors.Is(err, store.ErrNotSupported) {
		t.Errorf("Leader over a node without elections = %v, want ErrNotSupported", err)
	}
	if _, err := s.Leader(ctx, ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Leader(%q) = %v, want ErrInvalid", "", err)
	}
}

var _ store.Elector = (*memory.Store)(nil)

// raiseHook is a node that calls hook after each fence raise has landed,
// before it answers.
type raiseHook struct {
	*memory.Store
	hook func()
}

func (r raiseHook) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
	err := r.Store.RaiseFence(ctx, req, fence)
	r.hook()
	return err
}

// TestElectionReportsOnlyReturnedTerms: a candidate wins every node, its
// term is written back to a majority, and then it stalls past its TTL
// before it gets the answers (a pause, a slow network): Acquire refuses
// the grant for lack of validity and undoes it. Leader, asked by another
// process while the write-back stands on a majority, must not have
// reported the term that Acquire never returned.
func TestElectionReportsOnlyReturnedTerms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const ttl = time.Second
		ms := memoryNodes(3)
		// Node 0 issues the highest term, so the term is written back to
		// nodes 1 and 2 at least.
		pre := mutexReq("e", "pre")
		ms[0].Acquire(ctx, pre)
		if err := ms[0].RaiseFence(ctx, pre, time.Now().UnixMilli()*1000+1e12); err != nil {
			t.Fatal(err)
		}
		ms[0].Release(ctx, pre)

		other, err := redlock.New(asStores(ms)) // another process
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		var raises atomic.Int32
		stalled := make(chan struct{})
		var seen store.Leader
		var seenErr error
		nodes := make([]store.Store, len(ms))
		for i, m := range ms {
			nodes[i] = raiseHook{m, func() {
				if raises.Add(1) != 2 {
					<-stalled
					return
				}
				// Two raises, a majority, have landed.
				seen, seenErr = other.Leader(ctx, "e")
				time.Sleep(ttl)
				close(stalled)
			}}
		}
		s, err := redlock.New(nodes)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()

		req := electionReq("e", "a", "leader-a")
		req.TTL = ttl
		g, err := s.Acquire(ctx, req)
		var se *store.StoreError
		if g.Acquired || !errors.As(err, &se) {
			t.Fatalf("Acquire stalled past its TTL = %+v, %v; want a *StoreError", g, err)
		}
		if raises.Load() < 2 {
			t.Fatalf("%d fence raises, want at least 2", raises.Load())
		}
		if !errors.Is(seenErr, store.ErrNoLeader) {
			t.Errorf("Leader during a campaign that returned no grant = %+v, %v; want ErrNoLeader", seen, seenErr)
		}
		if ld, err := other.Leader(ctx, "e"); !errors.Is(err, store.ErrNoLeader) {
			t.Errorf("Leader after the campaign = %+v, %v; want ErrNoLeader", ld, err)
		}
	})
}
