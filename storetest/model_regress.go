package storetest

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// Regressions: the shrunk sequences of failures RunModel found, kept as
// plain tests that Run runs on every store.

func init() { register("ModelRegressions", dlock.ModeRead, testModelRegressions) }

func testModelRegressions(t *testing.T, h Harness) {
	t.Run("WriterBehindIntentHeldWrite", func(t *testing.T) {
		parallel(t)
		modelWriterBehindIntent(t, h.New(t))
	})
	t.Run("RetriedReadSameFence", func(t *testing.T) {
		parallel(t)
		modelRetriedRead(t, h.New(t))
	})
}

// modelWriterBehindIntent: a reader holds, writer A queues its intent, the
// reader leaves; writer B is refused (A is ahead) and, nobody holding the
// name, the refusal names the request's own mode. store/memory said read.
func modelWriterBehindIntent(t *testing.T, s dlock.Store) {
	name := lockName(t)
	r := readReq(name, longTTL)
	mustAcquire(t, s, r)
	a := queued(writeReq(name, longTTL), longTTL)
	mustRefuse(t, s, a)
	mustRelease(t, s, r)
	if g := mustRefuse(t, s, writeReq(name, longTTL)); g.Held != dlock.ModeWrite {
		t.Errorf("writer refused behind a queued writer, nobody holding: Held = %v, want write (the request's mode)", g.Held)
	}
	mustRelease(t, s, a)
}

// modelRetriedRead: a reader's retried Acquire returns the fence of its
// grant, the current fence when it was granted. store/etcd returned its
// key's revision instead.
func modelRetriedRead(t *testing.T, s dlock.Store) {
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
