package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// The bounds of a hold kept on the store: MinHold ("at most once per
// interval") and MaxHold.

// minHoldModes are the modes a MinHold keeps (each name of a multi-lock
// too): the other modes ignore it.
var minHoldModes = []store.Mode{store.ModeMutex, store.ModeFair, store.ModeElection}

// kept is a hold released before its MinHold ran out.
type kept struct {
	req    store.Request
	fence  int64
	before time.Time // before its Acquire was sent: its grant is later
}

// end is the earliest the name may be granted again: the grant was after
// before, and the hold lasts until grant + MinHold.
func (k kept) end() time.Time { return k.before.Add(k.req.MinHold) }

// takeKept acquires name in mode m with MinHold d and releases it at once:
// the release answers nil and the hold stays.
func takeKept(t *testing.T, s store.Store, name string, m store.Mode, d time.Duration) kept {
	t.Helper()
	req := crossReq(name, m, longTTL)
	req.MinHold, req.Holder = d, "kept"
	before := time.Now()
	g := mustAcquire(t, s, req)
	if err := s.Release(testContext(t), req); err != nil {
		t.Errorf("%v Release before its MinHold = %v, want nil", m, err)
	}
	return kept{req: req, fence: g.Fence, before: before}
}

// checkKept asks for k's name with ask: a grant returned before k.end()
// breaks the MinHold; a refusal must name held. A grant after k.end() on a
// slow machine checks nothing and is released.
func checkKept(t *testing.T, s store.Store, k kept, ask store.Request, held store.Mode) {
	t.Helper()
	g, err := s.Acquire(testContext(t), ask)
	returned := time.Now()
	if err != nil {
		t.Fatalf("Acquire(mode %v) of a name kept by a MinHold = %v", ask.Mode, err)
	}
	if !g.Acquired {
		if g.Held != held {
			t.Errorf("Acquire(mode %v) refused by a %v hold kept by its MinHold: Held = %v, want %v", ask.Mode, held, g.Held, held)
		}
		return
	}
	mustRelease(t, s, ask)
	if returned.Before(k.end()) {
		t.Errorf("Acquire(mode %v) granted %v after the %v holder's Acquire was sent, released early with MinHold %v: the name must stay held until grant + MinHold",
			ask.Mode, returned.Sub(k.before), held, k.req.MinHold)
	} else {
		t.Logf("Acquire(mode %v) came %v after the kept hold's Acquire (past its MinHold): the machine was too slow to check the refusal", ask.Mode, returned.Sub(k.before))
	}
}

// checkKeptState checks that State shows k's hold with its record while
// the MinHold certainly keeps it.
func checkKeptState(t *testing.T, in store.Inspector, k kept) {
	t.Helper()
	st := mustState(t, in, k.req.Name)
	if time.Now().Before(k.end()) && (st.Holders != 1 || len(st.Owners) != 1 || st.Owners[0].Owner != "kept" || st.Owners[0].Fence != k.fence) {
		t.Errorf("State of a %v hold kept by its MinHold = %+v, want its one holder \"kept\" with fence %d", k.req.Mode, st, k.fence)
	}
}

// grantedAfter waits until ask is granted and checks that the grant came
// after k's MinHold (by ordering: it returned after k.end()) with a fence
// above k's.
func grantedAfter(t *testing.T, s store.Store, k kept, ask store.Request) {
	t.Helper()
	g, at := acquireWhenFree(t, s, ask)
	if at.Before(k.end()) {
		t.Errorf("Acquire(mode %v) granted %v after a %v MinHold hold's Acquire was sent, before its MinHold %v ran out", ask.Mode, at.Sub(k.before), k.req.Mode, k.req.MinHold)
	}
	if g.Fence <= k.fence && ask.Mode != store.ModeRead {
		t.Errorf("Acquire(mode %v) after a MinHold hold: fence %d, want > %d", ask.Mode, g.Fence, k.fence)
	}
	mustRelease(t, s, ask)
}

// holdMinHoldKeeps: in every mode a MinHold keeps, a release before grant
// + MinHold answers nil and leaves the hold (and its record) there: another
// token is refused until then, and granted after with a higher fence.
func holdMinHoldKeeps(t *testing.T, h Harness, s store.Store, _ []store.Mode) {
	in := s.(store.Inspector)
	var ks []kept
	for _, m := range minHoldModes {
		if h.supports(m) {
			ks = append(ks, takeKept(t, s, lockName(t), m, holdMinHold))
		}
	}
	for _, k := range ks {
		checkKeptState(t, in, k)
		checkKept(t, s, k, crossReq(k.req.Name, k.req.Mode, longTTL), k.req.Mode)
	}
	for _, k := range ks {
		grantedAfter(t, s, k, crossReq(k.req.Name, k.req.Mode, longTTL))
	}
}

// holdMinHoldLateRequests: once a hold released early is kept by its
// MinHold, a late request of its token (an Extend delayed past the
// release, asking for less) does not end it sooner: the name stays
// refused until grant + MinHold, and is granted after it.
func holdMinHoldLateRequests(t *testing.T, h Harness, s store.Store, _ []store.Mode) {
	var ks []kept
	for _, m := range minHoldModes {
		if h.supports(m) {
			ks = append(ks, takeKept(t, s, lockName(t), m, holdMinHold))
		}
	}
	start := time.Now()
	for _, k := range ks {
		short := k.req
		short.TTL = holdShort
		s.Extend(testContext(t), []store.Request{short}) // the answer is not the point: the end is
	}
	sleepUntil(start.Add(holdShort + clockSlack))
	for _, k := range ks {
		checkKept(t, s, k, crossReq(k.req.Name, k.req.Mode, longTTL), k.req.Mode)
	}
	for _, k := range ks {
		grantedAfter(t, s, k, crossReq(k.req.Name, k.req.Mode, longTTL))
	}
}

// holdMinHoldPassed: a release after grant + MinHold frees the name at
// once.
func holdMinHoldPassed(t *testing.T, h Harness, s store.Store, _ []store.Mode) {
	const d = holdShort
	type taken struct {
		req   store.Request
		after time.Time
	}
	var held []taken
	for _, m := range minHoldModes {
		if h.supports(m) {
			req := crossReq(lockName(t), m, longTTL)
			req.MinHold = d
			mustAcquire(t, s, req)
			held = append(held, taken{req, time.Now()})
		}
	}
	sleepUntil(held[len(held)-1].after.Add(d + clockSlack))
	for _, x := range held {
		mustRelease(t, s, x.req)
		mustAcquire(t, s, crossReq(x.req.Name, x.req.Mode, longTTL))
	}
}

// holdMinHoldShared: readers and permits ignore a MinHold: once released,
// an exclusive request is granted at once.
func holdMinHoldShared(t *testing.T, h Harness, s store.Store, _ []store.Mode) {
	for _, m := range []store.Mode{store.ModeRead, store.ModeSemaphore} {
		if !h.supports(m) {
			continue
		}
		req := crossReq(lockName(t), m, longTTL)
		req.MinHold = holdMinHold
		mustAcquire(t, s, req)
		mustRelease(t, s, req)
		mustAcquire(t, s, mutexReq(req.Name, newToken(), longTTL))
	}
}

// holdMinHoldMulti: on a store.MultiStore, each name of a multi-lock is
// kept by its MinHold after ReleaseMulti.
func holdMinHoldMulti(t *testing.T, _ Harness, s store.Store, _ []store.Mode) {
	names := multiNames(lockName(t), 2, true)
	ms, ok := s.(store.MultiStore)
	if !ok || !ms.AtomicMulti(names) {
		t.Skipf("%T takes multi-locks name by name (each a mutex: see MinHold)", s)
	}
	ctx := testContext(t)
	token := newToken()
	reqs := make([]store.Request, len(names))
	for i, n := range names {
		reqs[i] = mutexReq(n, token, longTTL)
		reqs[i].MinHold = holdMinHold
	}
	before := time.Now()
	mg, err := ms.AcquireMulti(ctx, reqs)
	if err != nil || !mg.Acquired {
		t.Fatalf("AcquireMulti(%q) with MinHold = %+v, %v; want a grant", names, mg, err)
	}
	for i, err := range ms.ReleaseMulti(ctx, reqs) {
		if err != nil {
			t.Errorf("ReleaseMulti of %q before its MinHold = %v, want nil", names[i], err)
		}
	}
	for i, req := range reqs {
		k := kept{req: req, fence: mg.Fences[i], before: before}
		checkKept(t, s, k, mutexReq(req.Name, newToken(), longTTL), store.ModeMutex)
	}
	for i, req := range reqs {
		grantedAfter(t, s, kept{req: req, fence: mg.Fences[i], before: before}, mutexReq(req.Name, newToken(), longTTL))
	}
}

// bounded is a hold taken with a MaxHold.
type bounded struct {
	req   store.Request
	fence int64
	after time.Time // after its Acquire returned: its grant was earlier
}

// end is the latest the hold may last: grant + MaxHold.
func (b bounded) end() time.Time { return b.after.Add(b.req.MaxHold) }

// checkBounded checks that State's TTL of b's name does not reach past
// b.end(), after what.
func checkBounded(t *testing.T, in store.Inspector, b bounded, what string) {
	t.Helper()
	sent := time.Now()
	st := mustState(t, in, b.req.Name)
	if limit := b.end().Sub(sent) + clockSlack; st.TTL > limit {
		t.Errorf("%v hold with MaxHold %v, after %s: State TTL %v, want at most %v (grant + MaxHold)", b.req.Mode, b.req.MaxHold, what, st.TTL, limit)
	}
}

// takeBounded acquires name in mode m for longTTL with MaxHold d, then
// extends it and repeats its Acquire (and, reentrant, re-enters without a
// MaxHold), each asking for longTTL: the hold never reaches past grant + d.
func takeBounded(t *testing.T, s store.Store, in store.Inspector, name string, m store.Mode, d time.Duration) bounded {
	t.Helper()
	req := crossReq(name, m, longTTL)
	req.MaxHold = d
	g := mustAcquire(t, s, req)
	b := bounded{req: req, fence: g.Fence, after: time.Now()}
	checkBounded(t, in, b, "its grant for "+longTTL.String())
	sent := time.Now()
	if err := s.Extend(testContext(t), []store.Request{req})[0]; err != nil && sent.Before(b.after.Add(d-time.Second)) {
		t.Errorf("%v Extend inside MaxHold = %v, want nil (capped)", m, err)
	}
	checkBounded(t, in, b, "an Extend")
	mustAcquire(t, s, req)
	checkBounded(t, in, b, "a repeated Acquire")
	if m == store.ModeReentrant {
		again := req
		again.Token, again.MaxHold = newToken(), 0
		mustAcquire(t, s, again)
		checkBounded(t, in, b, "a re-entry without a MaxHold")
	}
	return b
}

// holdMaxHoldCaps: in every mode, a grant, an Extend, a repeated Acquire
// (and a re-entry) never move the hold past grant + MaxHold; at that end
// the name is free, though extended, and an Extend answers ErrNotHeld.
func holdMaxHoldCaps(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	in := s.(store.Inspector)
	var bs []bounded
	for _, m := range modes {
		bs = append(bs, takeBounded(t, s, in, lockName(t), m, holdMaxHold))
	}
	sleepUntil(bs[len(bs)-1].end().Add(clockSlack))
	for _, b := range bs {
		if err := s.Extend(testContext(t), []store.Request{b.req})[0]; !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("%v Extend after grant + MaxHold = %v, want ErrNotHeld", b.req.Mode, err)
		}
		g := mustAcquire(t, s, mutexReq(b.req.Name, newToken(), longTTL))
		if g.Fence <= b.fence {
			t.Errorf("mutex grant after a %v hold's MaxHold: fence %d, want > %d", b.req.Mode, g.Fence, b.fence)
		}
	}
}
