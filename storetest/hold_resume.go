package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// Taking a hold back by its token (store.Resumer) and an operator's
// force-release (store.ForceReleaser).

// holdResume: Resume by the holder's token confirms the hold in its mode:
// the same fence, the reentrant count, the TTL asked for (no MaxHold:
// MaxHoldLeft 0), the first record kept, and the hold extended.
func holdResume(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	in, r := s.(store.Inspector), s.(store.Resumer)
	for _, m := range modes {
		name := lockName(t)
		held := takeRecorded(t, s, name, m, 5*time.Second)
		for _, rec := range held.recs {
			res := resumeOf(rec.req, longTTL)
			res.Holder, res.Data = "resumer", "not recorded"
			sent := time.Now()
			g, err := r.Resume(testContext(t), res)
			if err != nil || !g.Acquired || g.Fence != rec.fence || g.TTL != longTTL || g.MaxHoldLeft != 0 {
				t.Errorf("%v Resume by the holder = %+v, %v; want Acquired, fence %d, TTL %v, MaxHoldLeft 0", m, g, err, rec.fence, longTTL)
			}
			if m == store.ModeReentrant && g.Count != 2 {
				t.Errorf("reentrant Resume Count = %d, want 2 (the hold's count)", g.Count)
			}
			st := mustState(t, in, name)
			if low := longTTL - time.Since(sent) - clockSlack; st.TTL < low {
				t.Errorf("%v State TTL after Resume for %v = %v, want at least %v (extended)", m, longTTL, st.TTL, low)
			}
		}
		checkOwners(t, fmt.Sprintf("State after %v Resume", m), mustState(t, in, name).Owners, held.recs)
		held.release(t, s)
	}
}

// holdResumeMaxHold: Resume caps the TTL by the hold's MaxHold (from its
// grant, whatever the Resume request says) and reports what is left of it.
func holdResumeMaxHold(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	r := s.(store.Resumer)
	const maxHold = 20 * time.Second
	for _, m := range modes {
		req := crossReq(lockName(t), m, 2*time.Second)
		req.MaxHold = maxHold
		before := time.Now()
		g := mustAcquire(t, s, req)
		res := resumeOf(req, longTTL)
		rg, err := r.Resume(testContext(t), res)
		returned := time.Now()
		if err != nil || !rg.Acquired || rg.Fence != g.Fence {
			t.Errorf("%v Resume = %+v, %v; want Acquired with fence %d", m, rg, err, g.Fence)
			continue
		}
		low := before.Add(maxHold).Sub(returned) - clockSlack
		if rg.MaxHoldLeft > maxHold || rg.MaxHoldLeft < low {
			t.Errorf("%v Resume MaxHoldLeft = %v, want in [%v, %v]", m, rg.MaxHoldLeft, low, maxHold)
		}
		if rg.TTL <= 0 || rg.TTL > maxHold || rg.TTL > rg.MaxHoldLeft+clockSlack {
			t.Errorf("%v Resume for %v with MaxHold %v: TTL %v, want capped at MaxHoldLeft %v", m, longTTL, maxHold, rg.TTL, rg.MaxHoldLeft)
		}
		mustRelease(t, s, req)
	}
}

// otherModeOf returns a supported mode in which a token holding in m
// holds nothing: the writer's for a reader and the reader's for a writer
// (one read-write lock), else the mutex or, for a mutex, the first other.
func otherModeOf(m store.Mode, modes []store.Mode) store.Mode {
	switch {
	case m == store.ModeRead && slices.Contains(modes, store.ModeWrite):
		return store.ModeWrite
	case m == store.ModeWrite:
		return store.ModeRead
	case m != store.ModeMutex:
		return store.ModeMutex
	}
	for _, o := range modes {
		if o != m {
			return o
		}
	}
	return m // the store supports the mutex alone
}

// holdResumeRefused: Resume by a token that does not hold the name (a
// stranger's, the holder's in another mode, a fair waiter's, any token on
// a free name) answers ErrNotHeld and changes nothing.
func holdResumeRefused(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	in, r := s.(store.Inspector), s.(store.Resumer)
	for _, m := range modes {
		name := lockName(t)
		held := takeRecorded(t, s, name, m, longTTL)
		req := held.recs[0].req
		var refused []store.Request
		stranger := resumeOf(req, longTTL)
		stranger.Token = newToken()
		refused = append(refused, stranger)
		if len(modes) > 1 {
			other := resumeOf(req, longTTL)
			other.Mode = otherModeOf(m, modes)
			refused = append(refused, other)
		}
		if m == store.ModeFair {
			w := crossReq(name, m, longTTL)
			w.Queue, w.QueueTTL = true, longTTL
			mustRefuse(t, s, w)
			refused = append(refused, resumeOf(w, longTTL))
		}
		before := mustState(t, in, name)
		for _, res := range refused {
			if g, err := r.Resume(testContext(t), res); !errors.Is(err, store.ErrNotHeld) || g.Acquired {
				t.Errorf("Resume(mode %v) of a %v hold by a token that does not hold it = %+v, %v; want ErrNotHeld", res.Mode, m, g, err)
			}
		}
		after := mustState(t, in, name)
		after.TTL, before.TTL = 0, 0
		if !sameState(after, before) {
			t.Errorf("State of a %v hold after refused Resumes = %+v, want %+v (unchanged)", m, after, before)
		}
		held.release(t, s)
		free := resumeOf(crossReq(lockName(t), m, longTTL), longTTL)
		if _, err := r.Resume(testContext(t), free); !errors.Is(err, store.ErrNotHeld) {
			t.Errorf("Resume(mode %v) of a free name = %v, want ErrNotHeld", m, err)
		}
		if st := mustState(t, in, free.Name); st.Holders != 0 {
			t.Errorf("State after a refused Resume of a free name = %+v, want free", st)
		}
	}
}

// holdResumeExpired: a hold that ran out cannot be resumed.
func holdResumeExpired(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	in, r := s.(store.Inspector), s.(store.Resumer)
	reqs := make([]store.Request, len(modes))
	for i, m := range modes {
		reqs[i] = crossReq(lockName(t), m, holdShort)
		mustAcquire(t, s, reqs[i])
	}
	sleepUntil(time.Now().Add(holdShort + clockSlack))
	for _, req := range reqs {
		waitFree(t, in, req.Name)
		if g, err := r.Resume(testContext(t), resumeOf(req, longTTL)); !errors.Is(err, store.ErrNotHeld) || g.Acquired {
			t.Errorf("Resume(mode %v) of an expired hold = %+v, %v; want ErrNotHeld", req.Mode, g, err)
		}
		if st := mustState(t, in, req.Name); st.Holders != 0 {
			t.Errorf("State after a refused Resume of an expired %v hold = %+v, want free", req.Mode, st)
		}
	}
}

// forceAndCheck force-releases name, held as before shows: the answer is
// the holds State showed, the watcher is woken, the name is free, and the
// ended tokens hold nothing. It returns the highest fence ended.
func forceAndCheck(t *testing.T, s store.Store, name string, before store.State, ended []store.Request) int64 {
	t.Helper()
	in, fr := s.(store.Inspector), s.(store.ForceReleaser)
	wake, stop := watchArmed(t, s, name)
	defer stop()
	got, err := fr.ForceRelease(testContext(t), name)
	if err != nil || !sameHolders(got, before.Owners) {
		t.Errorf("ForceRelease(%q) of a %v lock = %+v, %v; want the holds State showed, %+v", name, before.Mode, got, err, before.Owners)
	}
	last := maxFence(before.Owners)
	// Free, or (fair) handed to the queued head with a higher fence.
	if st := mustState(t, in, name); st.Holders != 0 && (len(st.Owners) != 1 || st.Owners[0].Fence <= last) {
		t.Fatalf("State after ForceRelease = %+v, want none of the ended holds (fences up to %d)", st, last)
	}
	for _, req := range ended {
		mustNotHold(t, s, req, "of a force-released hold")
	}
	if !waitClosedOrWoken(wake) {
		t.Errorf("a watcher of %q was not woken within %v of ForceRelease", name, waitTimeout)
	}
	return last
}

// waitClosedOrWoken waits up to waitTimeout for a value on wake.
func waitClosedOrWoken(wake <-chan struct{}) bool {
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case <-wake:
		return true
	case <-timer.C:
		return false
	}
}

func maxFence(hs []store.Holder) int64 {
	var f int64
	for _, h := range hs {
		f = max(f, h.Fence)
	}
	return f
}

// holdForceRelease: ForceRelease ends every hold of a name in every mode
// and returns them as State showed them; the next grant's fence is above
// theirs; a free name gives none.
func holdForceRelease(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	in, fr := s.(store.Inspector), s.(store.ForceReleaser)
	for _, m := range modes {
		name := lockName(t)
		held := takeRecorded(t, s, name, m, longTTL)
		before := mustState(t, in, name)
		last := forceAndCheck(t, s, name, before, held.reqs)
		if st := mustState(t, in, name); st.Holders != 0 {
			t.Errorf("State after ForceRelease of a %v lock = %+v, want free", m, st)
		}
		if g := mustAcquire(t, s, mutexReq(name, newToken(), longTTL)); g.Fence <= last {
			t.Errorf("mutex grant after ForceRelease of a %v lock: fence %d, want > %d (every ended hold's)", m, g.Fence, last)
		}
	}
	got, err := fr.ForceRelease(testContext(t), lockName(t))
	if err != nil || len(got) != 0 {
		t.Errorf("ForceRelease of a free name = %+v, %v; want none, nil", got, err)
	}
	if _, err := fr.ForceRelease(testContext(t), ""); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ForceRelease(\"\") = %v, want an error wrapping ErrInvalid", err)
	}
}

// holdForceReleaseMinHold: a hold kept by its MinHold after an early
// release is ended by ForceRelease: another token is granted at once.
func holdForceReleaseMinHold(t *testing.T, h Harness, s store.Store, _ []store.Mode) {
	in := s.(store.Inspector)
	for _, m := range minHoldModes {
		if !h.supports(m) {
			continue
		}
		k := takeKept(t, s, lockName(t), m, 20*time.Second)
		before := mustState(t, in, k.req.Name)
		if before.Holders != 1 {
			t.Fatalf("State of a %v hold kept by its MinHold = %+v, want held", m, before)
		}
		last := forceAndCheck(t, s, k.req.Name, before, []store.Request{k.req})
		if g := mustAcquire(t, s, crossReq(k.req.Name, m, longTTL)); g.Fence <= last {
			t.Errorf("%v grant after ForceRelease: fence %d, want > %d", m, g.Fence, last)
		}
	}
}

// holdForceReleaseQueue: ForceRelease keeps queue places: a fair lock's
// queued waiter and a queued writer come before a newcomer and are granted
// with a fence above the ended holds'.
func holdForceReleaseQueue(t *testing.T, h Harness, s store.Store, _ []store.Mode) {
	in := s.(store.Inspector)
	cases := []struct{ held, queued, newcomer store.Mode }{
		{store.ModeFair, store.ModeFair, store.ModeFair},
		{store.ModeRead, store.ModeWrite, store.ModeRead},
	}
	for _, c := range cases {
		if !h.supports(c.held) || !h.supports(c.queued) {
			continue
		}
		name := lockName(t)
		held := takeRecorded(t, s, name, c.held, longTTL)
		w := crossReq(name, c.queued, longTTL)
		w.Queue, w.QueueTTL = true, longTTL
		mustRefuse(t, s, w)
		before := mustState(t, in, name)
		last := forceAndCheck(t, s, name, before, held.reqs)
		mustRefuse(t, s, crossReq(name, c.newcomer, longTTL)) // the queued one is ahead
		g, _ := acquireWhenFree(t, s, w)
		if g.Fence <= last {
			t.Errorf("queued %v grant after ForceRelease: fence %d, want > %d", c.queued, g.Fence, last)
		}
		mustRelease(t, s, w)
	}
}
