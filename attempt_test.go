package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// lateStore holds back one Acquire (the n-th) until release is closed. When
// the caller's ctx ends first, the call returns ctx's error at once and
// still runs on the store once released: a command a client had queued on
// a backed-up connection, which reaches the server after later commands
// sent on other connections.
type lateStore struct {
	store.Store
	n       int32
	calls   atomic.Int32
	started chan struct{} // closed when the held-back call begins
	release chan struct{} // closed by the test to let it reach the store
	applied chan struct{} // closed once it ran on the store
}

func (s *lateStore) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	if s.calls.Add(1) != s.n {
		return s.Store.Acquire(ctx, req)
	}
	close(s.started)
	type reply struct {
		g   store.Grant
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		<-s.release
		g, err := s.Store.Acquire(context.Background(), req)
		close(s.applied)
		ch <- reply{g, err}
	}()
	select {
	case r := <-ch:
		return r.g, r.err
	case <-ctx.Done():
		return store.Grant{}, ctx.Err()
	}
}

// TestCanceledWriterLeavesNoLateIntent checks that a waiting writer whose
// ctx ends while an Acquire is on its way does not abandon that call: were
// it abandoned, the store could run it after the Release that withdrew the
// writer's intent and keep readers out for the queue TTL (seen on valkey,
// whose client spreads calls over several connections).
func TestCanceledWriterLeavesNoLateIntent(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	l := newLocker(t, mem, dlock.WithTTL(time.Minute), dlock.WithQueueTTL(time.Minute))
	r, err := l.RWMutex("rw").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	// Call 1 is the writer's first attempt (it leaves the intent), call 2
	// the attempt after it starts watching.
	late := &lateStore{Store: mem, n: 2, started: make(chan struct{}), release: make(chan struct{}), applied: make(chan struct{})}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := newLocker(t, late, dlock.WithTTL(time.Minute), dlock.WithQueueTTL(time.Minute)).RWMutex("rw").Lock(wctx)
		done <- err
	}()
	select {
	case <-late.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer's second attempt did not start within 10s")
	}
	cancel()
	// Give a writer that abandons the call time to return and withdraw its
	// intent before the held-back call reaches the store; one that waits
	// for the reply returns only after it.
	select {
	case err = <-done:
		close(late.release)
	case <-time.After(100 * time.Millisecond):
		close(late.release)
		err = <-done
	}
	<-late.applied
	if !errors.Is(err, context.Canceled) || !errors.Is(err, dlock.ErrLocked) {
		t.Errorf("Lock after its ctx ended = %v, want an error matching context.Canceled and ErrLocked", err)
	}
	r2, err := l.RWMutex("rw").TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock after the writer gave up = %v, want a grant (no intent left behind)", err)
	}
	r2.Release(ctx)
}
