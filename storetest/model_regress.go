package storetest

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// Regressions: the shrunk sequences of failures RunModel found, kept as
// plain tests that Run runs on every store.

func init() { register("ModelRegressions", store.ModeRead, testModelRegressions) }

func testModelRegressions(t *testing.T, h Harness) {
	t.Run("WriterBehindIntentHeldWrite", func(t *testing.T) {
		parallel(t)
		modelWriterBehindIntent(t, h.New(t))
	})
	t.Run("RetriedReadSameFence", func(t *testing.T) {
		parallel(t)
		modelRetriedRead(t, h.New(t))
	})
	if !h.QueuedWriterHolds {
		t.Run("ReaderBehindIntentHeldRead", func(t *testing.T) {
			parallel(t)
			modelReaderBehindIntent(t, h.New(t))
		})
	}
	if !h.supports(store.ModeFair) || !h.supports(store.ModeMutex) {
		return
	}
	t.Run("FairPositionsUnderOtherPattern", func(t *testing.T) {
		parallel(t)
		modelFairPositionsUnderMutex(t, h.New(t))
	})
	t.Run("UnqueuedRetryLeavesPlace", func(t *testing.T) {
		parallel(t)
		modelUnqueuedRetryLeavesPlace(t, h.New(t))
	})
}

// modelReaderBehindIntent: a reader holds, a writer queues its intent, the
// reader leaves; a new reader is refused by the intent alone, nobody
// holding: Held is the request's mode, read. store/etcd said write.
func modelReaderBehindIntent(t *testing.T, s store.Store) {
	name := lockName(t)
	r := readReq(name, longTTL)
	mustAcquire(t, s, r)
	w := queued(writeReq(name, longTTL), longTTL)
	mustRefuse(t, s, w)
	mustRelease(t, s, r)
	if g := mustRefuse(t, s, readReq(name, longTTL)); g.Held != store.ModeRead {
		t.Errorf("reader refused by a queued writer, nobody holding: Held = %v, want read (the request's mode)", g.Held)
	}
	mustRelease(t, s, w)
}

// modelFairPositionsUnderMutex: fair waiters that queue while a mutex holds
// the name are at positions 0, 1, 2 in turn. store/etcd put the first two
// at 0 (the head's place counted as a hold).
func modelFairPositionsUnderMutex(t *testing.T, s store.Store) {
	name := lockName(t)
	m := mutexReq(name, newToken(), longTTL)
	mustAcquire(t, s, m)
	var ws []store.Request
	for i := range 3 {
		w := fairWaiter(name, longTTL)
		if g := mustRefuse(t, s, w); g.Position != i || g.Held != store.ModeMutex {
			t.Errorf("fair waiter %d queued under a mutex: Position %d, Held %v; want %d, mutex", i, g.Position, g.Held, i)
		}
		ws = append(ws, w)
	}
	for i, w := range ws {
		if g := mustRefuse(t, s, w); g.Position != i {
			t.Errorf("fair waiter %d retried under a mutex: Position %d, want %d", i, g.Position, i)
		}
	}
	mustRelease(t, s, m)
	for _, w := range ws {
		s.Release(testContext(t), w) // the head may have been handed the lock
	}
}

// modelUnqueuedRetryLeavesPlace: a fair waiter's place lives for its
// QueueTTL; the waiter's Acquire without Queue does not renew it (for its
// TTL or at all), so the place runs out and the waiter behind moves up.
// store/etcd renewed it for the TTL.
func modelUnqueuedRetryLeavesPlace(t *testing.T, s store.Store) {
	name := lockName(t)
	m := mutexReq(name, newToken(), longTTL)
	mustAcquire(t, s, m)
	a := fairWaiter(name, 200*time.Millisecond)
	mustRefuse(t, s, a)
	b := fairWaiter(name, longTTL)
	mustRefuse(t, s, b)
	ua := a
	ua.Queue, ua.QueueTTL = false, 0
	mustRefuse(t, s, ua)                         // the head, not asking to queue
	deadline := time.Now().Add(10 * time.Second) // a's place ends 200ms on; ua's TTL is 30s
	for {
		g := mustRefuse(t, s, b)
		if g.Position == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fair waiter behind a place that ran out: Position %d 10s on, want 0 (an Acquire without Queue renewed the place)", g.Position)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustRelease(t, s, m)
	s.Release(testContext(t), b)
}

// modelWriterBehindIntent: a reader holds, writer A queues its intent, the
// reader leaves; writer B is refused (A is ahead) and, nobody holding the
// name, the refusal names the request's own mode. store/memory said read.
func modelWriterBehindIntent(t *testing.T, s store.Store) {
	name := lockName(t)
	r := readReq(name, longTTL)
	mustAcquire(t, s, r)
	a := queued(writeReq(name, longTTL), longTTL)
	mustRefuse(t, s, a)
	mustRelease(t, s, r)
	if g := mustRefuse(t, s, writeReq(name, longTTL)); g.Held != store.ModeWrite {
		t.Errorf("writer refused behind a queued writer, nobody holding: Held = %v, want write (the request's mode)", g.Held)
	}
	mustRelease(t, s, a)
}

// modelRetriedRead: a reader's retried Acquire returns the fence of its
// grant, the current fence when it was granted. store/etcd returned its
// key's revision instead.
func modelRetriedRead(t *testing.T, s store.Store) {
	name := lockName(t)
	w := writeReq(name, longTTL)
	mustAcquire(t, s, w)
	mustRelease(t, s, w)
	r := readReq(name, 150*time.Millisecond)
	g1 := mustAcquire(t, s, r)
	r.TTL = longTTL // a longer lease: some stores move the hold
	g2 := mustAcquire(t, s, r)
	if g2.Fence != g1.Fence {
		t.Errorf("retried read Acquire fence = %d, want %d (the grant's)", g2.Fence, g1.Fence)
	}
	mustRelease(t, s, r)
}
