package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// The cross-pattern suite: a name is one lock, whatever pattern holds it
// (store.Coexist). It runs on every store over the modes the store
// supports.

func init() { register("CrossPattern", store.ModeMutex, testCrossPattern) }

var allModes = []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeWrite, store.ModeFair, store.ModeSemaphore, store.ModeElection}

// crossLimit is the semaphore limit the suite uses.
const crossLimit = 2

// crossReq returns a request in mode m on name with a fresh token (and a
// fresh reentrant owner).
func crossReq(name string, m store.Mode, ttl time.Duration) store.Request {
	req := store.Request{Name: name, Token: newToken(), TTL: ttl, Mode: m}
	switch m {
	case store.ModeReentrant:
		req.Owner = newToken()
	case store.ModeSemaphore:
		req.Limit = crossLimit
	case store.ModeElection:
		req.Value = "candidate"
	}
	return req
}

func testCrossPattern(t *testing.T, h Harness) {
	var modes []store.Mode
	for _, m := range allModes {
		if h.supports(m) {
			modes = append(modes, m)
		}
	}
	for _, held := range modes {
		for _, asked := range modes {
			t.Run(fmt.Sprintf("Pair/%v-then-%v", held, asked), func(t *testing.T) {
				parallel(t)
				s := h.New(t)
				crossPair(t, s, peerStore(t, h, s), held, asked)
			})
		}
	}
	t.Run("FencesAcrossModes", func(t *testing.T) {
		parallel(t)
		crossFences(t, h.New(t), modes)
	})
	if h.supports(store.ModeSemaphore) {
		t.Run("SemaphoreLimitMismatch", func(t *testing.T) {
			parallel(t)
			crossLimitMismatch(t, h.New(t))
		})
	}
	t.Run("MultiAgainstModes", func(t *testing.T) {
		parallel(t)
		crossMulti(t, h.New(t), modes)
	})
	t.Run("MinHoldAgainstModes", func(t *testing.T) {
		parallel(t)
		s := h.New(t)
		needHolds(t, h, s, needsMinHold)
		crossMinHold(t, s, modes)
	})
	t.Run("MixedGoroutines", func(t *testing.T) {
		parallel(t)
		crossMixed(t, h, modes)
	})
}

// crossPair holds the name in mode held, then asks for it in mode asked:
// granted only when store.Coexist(held, asked), otherwise refused with
// Held = held and RetryAfter the hold's remaining time. Once the holder
// releases, the asked request is granted, with a fence above the holder's
// when it is exclusive. Then again with the hold taken and released through
// other (a second store on the same backend, when there is one): a watcher
// of the asked mode on s is woken by that release.
func crossPair(t *testing.T, s, other store.Store, held, asked store.Mode) {
	ctx := testContext(t)
	name := lockName(t)
	hreq := crossReq(name, held, longTTL)
	start := time.Now()
	hg := mustAcquire(t, s, hreq)
	areq := crossReq(name, asked, longTTL)
	g, err := s.Acquire(ctx, areq)
	if err != nil {
		t.Fatalf("Acquire(mode %v) while a %v hold has the name = %+v, %v; want a grant or a refusal", asked, held, g, err)
	}
	if store.Coexist(held, asked) {
		if !g.Acquired {
			t.Fatalf("Acquire(mode %v) while a %v hold has the name = %+v; want a grant (shared modes coexist)", asked, held, g)
		}
		mustRelease(t, s, areq)
		mustRelease(t, s, hreq)
		return
	}
	if g.Acquired {
		s.Release(ctx, areq)
		t.Fatalf("Acquire(mode %v) while a %v hold has the name = %+v; want a refusal (a name is one lock)", asked, held, g)
	}
	if g.Held != held {
		t.Errorf("refusal of mode %v: Held = %v, want %v (the mode holding the name)", asked, g.Held, held)
	}
	if elapsed := time.Since(start); g.RetryAfter <= 0 || g.RetryAfter > longTTL+clockSlack || g.RetryAfter < longTTL-elapsed-time.Second {
		t.Errorf("refusal of mode %v by a %v hold: RetryAfter = %v, want the hold's remaining time, in [%v, %v]", asked, held, g.RetryAfter, longTTL-elapsed-time.Second, longTTL)
	}
	mustRelease(t, s, hreq)
	g = mustAcquire(t, s, areq)
	switch {
	case asked == store.ModeRead && g.Fence < hg.Fence:
		t.Errorf("read grant after a %v hold: fence %d, want at least %d (the current fence)", held, g.Fence, hg.Fence)
	case asked != store.ModeRead && g.Fence <= hg.Fence:
		t.Errorf("%v grant after a %v hold: fence %d, want > %d", asked, held, g.Fence, hg.Fence)
	}
	mustRelease(t, s, areq)

	// Woken through the backend.
	hreq = crossReq(name, held, longTTL)
	mustAcquire(t, other, hreq)
	wake, stop, err := s.Watch(ctx, name, asked)
	if err != nil {
		t.Fatalf("Watch(mode %v) = %v", asked, err)
	}
	defer stop()
	areq = crossReq(name, asked, longTTL)
	mustRefuse(t, s, areq) // after the watch: a refusal arms it
	for len(wake) > 0 {
		<-wake
	}
	mustRelease(t, other, hreq)
	select {
	case <-wake:
	case <-time.After(waitTimeout):
		t.Errorf("a %v watcher was not woken within %v of the release of a %v hold through another store", asked, waitTimeout, held)
	}
	mustAcquire(t, s, areq)
	mustRelease(t, s, areq)
}

// crossMulti checks that a multi-lock is refused by a hold of any mode on
// one of its names (naming it and its mode, leaving the other name free),
// and that its holds refuse every mode; with names spread over a cluster's
// slots and with names in one slot (taken in one operation where the store
// can).
func crossMulti(t *testing.T, s store.Store, modes []store.Mode) {
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	for _, m := range modes {
		for _, c := range slotCases {
			crossMultiMode(t, s, l, m, multiNames(lockName(t), 2, c.oneSlot))
		}
	}
}

func crossMultiMode(t *testing.T, s store.Store, l *dlock.Locker, m store.Mode, names []string) {
	ctx := testContext(t)
	held := crossReq(names[1], m, longTTL)
	mustAcquire(t, s, held)
	_, err := l.Multi(names).TryLock(ctx)
	var le *dlock.LockedError
	if !errors.As(err, &le) || le.Name != names[1] || le.Held != m {
		t.Errorf("multi-lock %q TryLock while a %v hold has %q = %v; want a *LockedError naming it, Held %v", names, m, names[1], err, m)
	}
	free := crossReq(names[0], m, longTTL)
	mustAcquire(t, s, free) // the refused multi-lock left it free
	mustRelease(t, s, free)
	mustRelease(t, s, held)
	ml, err := l.Multi(names).TryLock(ctx)
	if err != nil {
		t.Fatalf("multi-lock %q TryLock when free = %v", names, err)
	}
	for _, n := range names {
		if g := mustRefuse(t, s, crossReq(n, m, longTTL)); g.Held != store.ModeMutex {
			t.Errorf("%v request on a multi-locked name: Held = %v, want mutex", m, g.Held)
		}
	}
	if err := ml.Release(ctx); err != nil {
		t.Errorf("multi-lock Release = %v", err)
	}
}

// crossMinHold checks that a hold kept by its MinHold after an early
// release (mutex, fair, election) excludes every other mode as the hold
// did, naming its mode, until grant + MinHold, and that the name is then
// granted with a higher fence.
func crossMinHold(t *testing.T, s store.Store, modes []store.Mode) {
	var ks []kept
	for _, m := range minHoldModes {
		if slices.Contains(modes, m) {
			ks = append(ks, takeKept(t, s, lockName(t), m, holdMinHold))
		}
	}
	for _, k := range ks {
		for _, asked := range modes {
			checkKept(t, s, k, crossReq(k.req.Name, asked, longTTL), k.req.Mode)
		}
	}
	for _, k := range ks {
		grantedAfter(t, s, k, crossReq(k.req.Name, otherModeOf(k.req.Mode, modes), longTTL))
	}
}

// crossFences takes exclusive grants of every supported mode in turn on
// one name and checks that their fences strictly increase: one counter per
// name serves every mode.
func crossFences(t *testing.T, s store.Store, modes []store.Mode) {
	name := lockName(t)
	var last int64
	var lastMode store.Mode
	for range 3 {
		for _, m := range modes {
			if m == store.ModeRead {
				continue // a reader gets the current fence
			}
			req := crossReq(name, m, longTTL)
			g := mustAcquire(t, s, req)
			if g.Fence <= last {
				t.Errorf("%v grant fence %d after a %v grant's %d; want strictly increasing across modes", m, g.Fence, lastMode, last)
			}
			last, lastMode = g.Fence, m
			mustRelease(t, s, req)
		}
	}
}

// crossLimitMismatch checks that a semaphore request whose limit differs
// from the one the name's permits are held with fails with a
// *store.LimitError naming both, and takes nothing.
func crossLimitMismatch(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	held := crossReq(name, store.ModeSemaphore, longTTL)
	mustAcquire(t, s, held)
	asked := crossReq(name, store.ModeSemaphore, longTTL)
	asked.Limit = crossLimit + 3
	g, err := s.Acquire(ctx, asked)
	var le *store.LimitError
	if !errors.As(err, &le) || g.Acquired {
		if g.Acquired {
			s.Release(ctx, asked)
		}
		t.Fatalf("Acquire(limit %d) while permits of limit %d are held = %+v, %v; want a *store.LimitError", asked.Limit, crossLimit, g, err)
	}
	if le.Held != crossLimit || le.Asked != asked.Limit || !errors.Is(err, store.ErrInvalid) {
		t.Errorf("LimitError = %+v (%v), want Held %d, Asked %d, wrapping ErrInvalid", le, err, crossLimit, asked.Limit)
	}
	mustRelease(t, s, held)
	mustAcquire(t, s, asked)
	mustRelease(t, s, asked)
}

// holdChecker records the holds that goroutines believe they have and
// reports two that break store.Coexist. A hold is entered after its grant
// returned and left before its release is sent, so it lies inside the
// store's own hold: an overlap here is an overlap in the store.
type holdChecker struct {
	mu         sync.Mutex
	holds      map[store.Mode]int // holds now, by mode
	violations []string
	grants     map[store.Mode]int
}

func (c *holdChecker) enter(m store.Mode, who int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for held, n := range c.holds {
		if n > 0 && !store.Coexist(held, m) {
			c.violations = append(c.violations, fmt.Sprintf("goroutine %d granted %v while %d %v hold(s) had the name", who, m, n, held))
		}
	}
	if m == store.ModeSemaphore && c.holds[m] >= crossLimit {
		c.violations = append(c.violations, fmt.Sprintf("goroutine %d granted permit %d of %d", who, c.holds[m]+1, crossLimit))
	}
	c.holds[m]++
	c.grants[m]++
}

func (c *holdChecker) leave(m store.Mode) {
	c.mu.Lock()
	c.holds[m]--
	c.mu.Unlock()
}

// crossMixed runs goroutines that each take the same name in a random
// supported mode, through a Locker that waits (woken by the store), for
// a fixed number of rounds, and checks that no two holds ever break the
// rule and that every goroutine gets every lock it waits for.
func crossMixed(t *testing.T, h Harness, modes []store.Mode) {
	const goroutines, rounds = 6, 12
	name := lockName(t)
	c := &holdChecker{holds: make(map[store.Mode]int), grants: make(map[store.Mode]int)}
	var failures errs
	var wg sync.WaitGroup
	s := h.New(t)
	peer := peerStore(t, h, s)
	for g := range goroutines {
		on := s
		if g%2 == 1 {
			on = peer
		}
		l := newLocker(t, on, dlock.WithTTL(longTTL), dlock.WithBackoff(5*time.Millisecond, 200*time.Millisecond))
		rnd := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				m := modes[rnd.IntN(len(modes))]
				req := crossReq(name, m, 0)
				req.Token = ""
				req.TTL = 0
				req.Queue = m == store.ModeWrite || m == store.ModeFair
				ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
				lease, err := l.Acquire(ctx, req, true)
				cancel()
				if err != nil {
					failures.add(fmt.Errorf("goroutine %d round %d: Acquire(mode %v) = %v", g, r, m, err))
					return
				}
				c.enter(m, g)
				time.Sleep(time.Duration(rnd.IntN(2000)) * time.Microsecond)
				c.leave(m)
				rctx, rcancel := context.WithTimeout(context.Background(), waitTimeout)
				if err := lease.Release(rctx); err != nil {
					failures.add(fmt.Errorf("goroutine %d round %d: Release(mode %v) = %v", g, r, m, err))
				}
				rcancel()
			}
		}()
	}
	wg.Wait()
	failures.report(t)
	for _, v := range c.violations {
		t.Error(v)
	}
	t.Logf("grants by mode: %v", c.grants)
}
