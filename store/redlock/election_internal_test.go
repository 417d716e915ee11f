package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// TestLeaderWaitsForSettledTerm stops a campaign between its grants and
// the write-back of its term, with the nodes' terms apart (a majority even
// agreeing on a lower one): Leader and Observe report nobody until the
// term is settled, and then exactly the settled term.
func TestLeaderWaitsForSettledTerm(t *testing.T) {
	ctx := t.Context()
	nodes := make([]store.Store, 5)
	ms := make([]*memory.Store, 5)
	for i := range nodes {
		ms[i] = memory.New()
		nodes[i] = ms[i]
	}
	// A node timeout a busy machine keeps: a memory node's answer can take
	// tens of milliseconds under -race beside other work (20ms failed so,
	// every node timing out). Leader waits up to twice it for the term to
	// settle before it reports nobody.
	s, err := New(nodes, WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := dlock.New(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	obs := l.Election("p").Observe(octx)
	if ld := <-obs; ld != (store.Leader{}) {
		t.Fatalf("first observed value = %+v, want nobody", ld)
	}

	// Nodes 0-2 grant a pending leadership all with one term, a majority
	// agreeing on it; node 3, whose counter is further ahead, with the
	// higher term that will be settled.
	base := time.Now().UnixMilli()*1000 + 1e12
	for i, c := range []int64{base, base, base, base + 1e6} {
		pre := store.Request{Name: "p", Token: "pre", TTL: time.Second, Mode: store.ModeMutex}
		ms[i].Acquire(ctx, pre)
		if err := ms[i].RaiseFence(ctx, pre, c); err != nil {
			t.Fatal(err)
		}
		ms[i].Release(ctx, pre)
	}
	req := store.Request{Name: "p", Token: "tok", TTL: 10 * time.Second, Mode: store.ModeElection}
	var top int64
	for i := range 4 {
		g, err := ms[i].Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("node %d Acquire = %+v, %v", i, g, err)
		}
		if want := base + 1; i < 3 && g.Fence != want {
			t.Fatalf("node %d term = %d, want %d", i, g.Fence, want)
		}
		top = max(top, g.Fence)
	}
	if ld, err := s.Leader(ctx, "p"); !errors.Is(err, store.ErrNoLeader) {
		t.Errorf("Leader while the term is not settled = %+v, %v; want ErrNoLeader", ld, err)
	}
	settled := req
	settled.Value = settledPrefix + "v"
	for _, i := range []int{0, 1, 3} {
		if err := ms[i].RaiseFence(ctx, settled, top); err != nil {
			t.Fatal(err)
		}
	}
	want := store.Leader{Value: "v", Term: top}
	if ld, err := s.Leader(ctx, "p"); err != nil || ld.Value != want.Value || ld.Term != want.Term {
		t.Errorf("Leader once settled = %+v, %v; want %+v", ld, err, want)
	}
	select {
	case ld := <-obs:
		if ld.Value != want.Value || ld.Term != want.Term {
			t.Errorf("observed %+v, want the settled leader %+v", ld, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the settled leader was not observed")
	}
}
