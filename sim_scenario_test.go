package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// The directed scenarios of the simulation: each builds one interleaving
// that broke the client core, with the simulation's network (whose script
// makes the faults of the scenario and nothing else) and its invariant
// checker, which asserts the contract rather than the code's behaviour of
// the day: a fixed core may take another path through a scenario, and the
// checker still holds it to the invariants.

// simScenario is one directed scenario: a faultless net but for its
// script, the checker ticking, and Lockers on links of their own.
type simScenario struct {
	t       *testing.T
	net     *simNet
	ck      *simChecker
	start   time.Time
	lockers []*dlock.Locker
	stop    func()
}

func newSimScenario(t *testing.T, script func(c simCall) (simFlight, bool)) *simScenario {
	net := newSimNet(0, simProfile{name: "scenario"})
	net.script = script
	s := &simScenario{t: t, net: net, start: net.start,
		ck: newSimChecker(t, net, fmt.Sprintf("go test -race -run '^%s$' .", t.Name()))}
	s.ck.all = true // show what follows the first failure too
	s.stop = s.ck.run(simTick)
	t.Cleanup(s.done)
	return s
}

// locker returns process id's Locker.
func (s *simScenario) locker(id int, opts ...dlock.Option) *dlock.Locker {
	l, err := dlock.New(s.net.link(id, 0), opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.lockers = append(s.lockers, l)
	return l
}

// ctx is a context of the worker who (for the trace).
func (s *simScenario) ctx(who string) context.Context {
	return context.WithValue(context.Background(), simWhoKey{}, who)
}

// sleepUntil sleeps until d into the scenario.
func (s *simScenario) sleepUntil(d time.Duration) { time.Sleep(time.Until(s.start.Add(d))) }

// hold registers ls, held by who with lock-delay delay, and takes a holder
// step with it.
func (s *simScenario) hold(who string, ls *dlock.Lease, delay time.Duration) *simHeld {
	h := &simHeld{who: who, name: ls.Name(), mode: ls.Mode(), fence: ls.Fence(), delay: delay, lease: ls}
	s.ck.add(h)
	s.ck.action(h)
	return h
}

// done stops checking and closes the Lockers.
func (s *simScenario) done() {
	if s.stop == nil {
		return
	}
	s.stop()
	s.stop = nil
	s.ck.stop()
	for _, l := range s.lockers {
		l.Close()
	}
	s.net.wg.Wait()
}

// reorderedExtends is the script of p1/w0's Extend(10s) and Extend(1s):
// the store applies 10s at once and 1s 10ms later, and 1s's reply comes
// back first.
func reorderedExtends(c simCall) (simFlight, bool) {
	if c.op != "extend" || c.from != "p1/w0" {
		return simFlight{}, false
	}
	switch c.ttl() {
	case 10 * time.Second:
		return simFlight{applied: true, back: 100 * time.Millisecond}, true
	case time.Second:
		return simFlight{applied: true, out: 10 * time.Millisecond, back: 10 * time.Millisecond}, true
	}
	return simFlight{}, false
}

// TestSimConcurrentExtends: a lease of 1s has Extend(10s) and Extend(1s) in
// flight at once; the store applies 10s, then 1s, but the reply to 1s
// comes back first. The lease must not end up claiming ~10s while the
// store lets the lock go after 1s (and another Locker takes it).
func TestSimConcurrentExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSimScenario(t, reorderedExtends)
		a, b := s.locker(1), s.locker(2)
		ctx := s.ctx("p1/w0")
		ls, err := a.Mutex("n", dlock.WithTTL(time.Second)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h := s.hold("p1/w0", ls, 0)
		var wg sync.WaitGroup
		wg.Go(func() { ls.Extend(ctx, 10*time.Second) })
		wg.Go(func() { ls.Extend(ctx, time.Second) })
		wg.Wait()
		s.ck.action(h)

		// The store's hold ran out 1s after it applied Extend(1s).
		s.sleepUntil(1020 * time.Millisecond)
		if lb, err := b.Mutex("n").TryLock(s.ctx("p2/w0")); err == nil {
			s.hold("p2/w0", lb, 0)
		}
		s.ck.action(h)
	})
}

// TestSimExtendBesideRenewal: an auto-renewed lease of 1s calls
// Extend(10s) while the scheduler's renewal, built with the old TTL, is in
// flight; the renewal lands after the extension, and then the link goes
// down, so no later renewal repairs the store's hold. The lease must not
// claim ~9s while the store lets the lock go after 1s.
func TestSimExtendBesideRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		renewing := make(chan struct{})
		var first sync.Once
		s := newSimScenario(t, func(c simCall) (simFlight, bool) {
			if c.op != "extend" || c.from != "p1 renewal" {
				return simFlight{}, false
			}
			f := simFlight{applied: true}
			first.Do(func() {
				close(renewing)
				f.out, f.back = 50*time.Millisecond, 50*time.Millisecond
			})
			return f, true
		})
		a, b := s.locker(1), s.locker(2)
		ctx := s.ctx("p1/w0")
		ls, err := a.Mutex("n", dlock.WithTTL(time.Second), dlock.WithAutoRenew()).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h := s.hold("p1/w0", ls, 0)
		<-renewing // at TTL/3, applied 50ms later, answered 50ms after that
		err = ls.Extend(ctx, 10*time.Second)
		s.net.logf("p1/w0 Extend(10s) n: %v, TTL now %v", err, ls.TTL())
		s.ck.action(h)

		s.sleepUntil(450 * time.Millisecond)
		s.net.logf("p1 link down")
		a.Store().(*simLink).cut(time.Minute)

		// The store's hold ran out 1s after it applied the renewal.
		s.sleepUntil(1450 * time.Millisecond)
		s.ck.action(h)
		if lb, err := b.Mutex("n").TryLock(s.ctx("p2/w0")); err == nil {
			s.hold("p2/w0", lb, 0)
		}
		s.ck.action(h)
	})
}

// TestSimStaleFairGrant: a fair waiter's queue refresh is answered late
// (a pause of its process would do the same), and meanwhile the lock is
// handed to it, pushed late, and runs out on the store; another Locker
// takes the name. The waiter's next refresh is refused, and then the stale
// grant arrives: it must not become a lease, valid for a full TTL, while
// the other Locker holds the name.
func TestSimStaleFairGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var refreshes atomic.Int32
		s := newSimScenario(t, func(c simCall) (simFlight, bool) {
			switch {
			case c.op == "acquire" && c.from == "p2/w0" && refreshes.Add(1) == 2:
				return simFlight{applied: true, back: 1200 * time.Millisecond}, true // applied at 333ms, answered at 1.533s
			case c.op == "grant" && c.link.id == 2:
				return simFlight{applied: true, back: 1500 * time.Millisecond}, true
			}
			return simFlight{}, false
		})
		a, b, c := s.locker(1), s.locker(2), s.locker(3)
		opt := dlock.WithTTL(time.Second)
		la, err := a.Fair("n", opt).TryLock(s.ctx("p1/w0"))
		if err != nil {
			t.Fatal(err)
		}
		s.hold("p1/w0", la, 0)

		// B queues at once and refreshes its place every TTL/3.
		var wg sync.WaitGroup
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(s.ctx("p2/w0"), 5*time.Second)
			defer cancel()
			lb, err := b.Fair("n", opt).Lock(ctx)
			s.net.logf("p2/w0 Fair.Lock n: %v", err)
			if err != nil {
				return
			}
			h := s.hold("p2/w0", lb, 0)
			time.Sleep(100 * time.Millisecond)
			s.ck.action(h)
			s.ck.releasing(h)
			lb.Release(s.ctx("p2/w0"))
		})

		// A's release hands the lock to B at 400ms; the grant is pushed at
		// 1.9s, and the hold runs out at 1.4s.
		s.sleepUntil(400 * time.Millisecond)
		la.Release(s.ctx("p1/w0"))

		s.sleepUntil(1450 * time.Millisecond)
		lc, err := c.Mutex("n", opt).TryLock(s.ctx("p3/w0"))
		if err != nil {
			t.Fatalf("TryLock by another Locker after the handed hold ran out: %v", err)
		}
		hc := s.hold("p3/w0", lc, 0)
		s.sleepUntil(2 * time.Second)
		s.ck.action(hc)
		s.ck.releasing(hc)
		lc.Release(s.ctx("p3/w0"))
		wg.Wait()
	})
}

// TestSimReleaseAfterValidity: a holder with a lock-delay resumes from a
// pause after its lease's validity ended, but before its Locker's
// scheduler (itself held up, here from when it reported another lease's
// loss) marked the lease lost, and releases it. The release must not free
// the name: the lock-delay keeps it until validity + delay.
func TestSimReleaseAfterValidity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSimScenario(t, nil)
		stalls := make(chan *simStall, 1)
		var a *dlock.Locker
		stall := dlock.WithObserver(func(ev dlock.Event) {
			if ev.Kind == dlock.EventLeaseLost && ev.Name == "decoy" {
				s.net.logf("p1 stalls 1s reporting the loss of decoy %s", simProcessStall)
				stalls <- s.net.stallScheduler(a, a.Store().(*simLink), time.Second, nil)
			}
		})
		a = s.locker(1, stall)
		b := s.locker(2)
		ctx := s.ctx("p1/w0")
		// The decoy's validity ends at 889ms, and the scheduler stalls then.
		if _, err := a.Mutex("decoy", dlock.WithTTL(900*time.Millisecond)).TryLock(ctx); err != nil {
			t.Fatal(err)
		}
		const delay = 5 * time.Second
		ls, err := a.Mutex("n", dlock.WithTTL(time.Second), dlock.WithLockDelay(delay)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		validEnd := time.Now().Add(ls.TTL())
		done := ls.Done()
		h := s.hold("p1/w0", ls, delay)

		s.sleepUntil(1200 * time.Millisecond) // the holder's pause: validity ended at 988ms
		var st *simStall
		select {
		case st = <-stalls:
		default:
			t.Fatal("the scheduler did not stall when it reported the decoy's loss")
		}
		// The scheduler has not looked at its leases since before the
		// lease's validity ended: it has not noticed. Err and Done tell
		// of the loss all the same.
		if !st.start.Before(validEnd) || time.Now().Before(validEnd) {
			t.Fatalf("the stall began at %v, the validity ended at %v, now is %v: want a stall across the end of validity",
				st.start.Sub(s.start), validEnd.Sub(s.start), time.Since(s.start))
		}
		if n := st.st.Looks(); n != 0 {
			t.Fatalf("the stalled scheduler made %d passes over its leases, want none: it may have noticed the loss", n)
		}
		if err := ls.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("Err() = %v past the lease's validity, want ErrLeaseLost", err)
		}
		select {
		case <-done:
		default:
			t.Error("Done() is open past the lease's validity")
		}
		s.ck.releasing(h)
		err = ls.Release(ctx)
		s.net.logf("p1/w0 released n after its validity: %v", err)

		s.sleepUntil(1300 * time.Millisecond)
		if lb, err := b.Mutex("n").TryLock(s.ctx("p2/w0")); err == nil {
			s.hold("p2/w0", lb, 0)
		}
		if n := st.st.Looks(); n != 0 {
			t.Fatalf("the stalled scheduler made %d passes over its leases by 1.3s, want none", n)
		}
	})
}

// TestSimStalledSchedulerRenewsNothing: an auto-renewed lease of 1s whose
// Locker's scheduler stalls from 100ms to 1.5s is not renewed: no renewal
// call goes out, and its validity ends at 1s with the scheduler not having
// noticed; Err and Done tell of the loss before anything looks at it
// (validity is truth), and another Locker takes the name once the store's
// hold ran out. When the scheduler resumes, it sends nothing for it. A
// stall that did not hold the scheduler (as a slow observer no longer
// does) fails here: the lease would be renewed at 333ms.
func TestSimStalledSchedulerRenewsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSimScenario(t, nil)
		a, b := s.locker(1), s.locker(2)
		link := a.Store().(*simLink)
		ctx := s.ctx("p1/w0")
		ls, err := a.Mutex("n", dlock.WithTTL(time.Second), dlock.WithAutoRenew()).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := ls.Done()
		// Registered with the checker (s.hold) only once it has been
		// looked at here: the checker's reads of Err and TTL would end it.

		s.sleepUntil(100 * time.Millisecond)
		s.net.logf("p1 stalls 1.4s %s", simProcessStall)
		st := s.net.stallScheduler(a, link, 1400*time.Millisecond, nil)

		s.sleepUntil(1100 * time.Millisecond) // past the lease's validity, renewal due at 333ms
		if n := st.renewalsSent(); n != 0 {
			t.Errorf("%d renewal calls went out with the scheduler stalled, want none", n)
		}
		if n := st.st.Looks(); n != 0 {
			t.Errorf("the stalled scheduler made %d passes over its leases, want none", n)
		}
		if !dlock.HeldPastValidity(ls) {
			t.Errorf("the lease is not held past its validity at 1.1s with the scheduler stalled since 100ms (TTL %v): renewed, or ended by the scheduler", ls.TTL())
		}
		if err := ls.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
			t.Errorf("Err() = %v past the lease's validity, want ErrLeaseLost", err)
		}
		select {
		case <-done:
		default:
			t.Error("Done() is open past the lease's validity")
		}
		if dlock.HeldPastValidity(ls) {
			t.Error("the lease is still held after Err reported its loss")
		}
		h := s.hold("p1/w0", ls, 0)
		lb, err := b.Mutex("n", dlock.WithTTL(time.Second)).TryLock(s.ctx("p2/w0"))
		if err != nil {
			t.Errorf("TryLock by another Locker after the unrenewed lease's hold ran out: %v", err)
		} else {
			s.hold("p2/w0", lb, 0)
		}
		s.ck.action(h)

		s.sleepUntil(1600 * time.Millisecond) // the stall ended at 1.5s
		if n := link.renewals.Load(); n != 0 {
			t.Errorf("%d renewal calls went out by 1.6s, want none: the lease was lost before the scheduler resumed", n)
		}
	})
}

// TestSimShrinkingExtendLost: a lease of 10s is extended to 1s, and the
// store applies it but the reply is lost, so Extend fails. The lease must
// not go on claiming ~10s, since the store may hold it for 1s only.
func TestSimShrinkingExtendLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSimScenario(t, func(c simCall) (simFlight, bool) {
			if c.op == "extend" && c.from == "p1/w0" && c.ttl() == time.Second {
				return simFlight{applied: true, back: 10 * time.Millisecond, lost: true}, true
			}
			return simFlight{}, false
		})
		a, b := s.locker(1), s.locker(2)
		ctx := s.ctx("p1/w0")
		ls, err := a.Mutex("n", dlock.WithTTL(10*time.Second)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h := s.hold("p1/w0", ls, 0)
		err = ls.Extend(ctx, time.Second)
		s.net.logf("p1/w0 Extend(1s) n: %v, TTL now %v", err, ls.TTL())
		s.ck.action(h)

		s.sleepUntil(1100 * time.Millisecond)
		if lb, err := b.Mutex("n").TryLock(s.ctx("p2/w0")); err == nil {
			s.hold("p2/w0", lb, 0)
		}
		s.ck.action(h)
	})
}

// TestSimCleanupReleaseAfterRetry: a waiting Lock's attempt loses its
// reply, so does the ownership re-check, and the release that cleans up
// behind them is slow: the Locker gives up on it after its op timeout,
// and the next attempt, with the same token, is granted. When the stale
// release lands, it must not free the lock of the lease that attempt
// returned.
func TestSimCleanupReleaseAfterRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var acquires, releases atomic.Int32
		s := newSimScenario(t, func(c simCall) (simFlight, bool) {
			if c.from != "p2/w0" {
				return simFlight{}, false
			}
			switch {
			case c.op == "acquire" && acquires.Add(1) == 2:
				return simFlight{back: 10 * time.Millisecond, lost: true}, true // the attempt: lost on the way
			case c.op == "acquire" && acquires.Load() == 3:
				return simFlight{back: 100 * time.Millisecond, lost: true}, true // the re-check: lost too
			case c.op == "release" && releases.Add(1) == 1:
				return simFlight{applied: true, out: 150 * time.Millisecond}, true // the cleanup: lands at 260ms
			}
			return simFlight{}, false
		})
		a, b, c := s.locker(1), s.locker(2, dlock.WithOpTimeout(200*time.Millisecond)), s.locker(3)
		opt := dlock.WithTTL(time.Second)
		la, err := a.Mutex("n", opt).TryLock(s.ctx("p1/w0"))
		if err != nil {
			t.Fatal(err)
		}
		ha := s.hold("p1/w0", la, 0)

		var wg sync.WaitGroup
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(s.ctx("p2/w0"), 3*time.Second)
			defer cancel()
			lb, err := b.Mutex("n", opt).Lock(ctx) // refused, then the attempt above at once
			s.net.logf("p2/w0 Mutex.Lock n: %v", err)
			if err != nil {
				return
			}
			h := s.hold("p2/w0", lb, 0)
			s.sleepUntil(400 * time.Millisecond)
			s.ck.action(h)
			s.ck.releasing(h)
			lb.Release(s.ctx("p2/w0"))
		})

		s.sleepUntil(150 * time.Millisecond)
		s.ck.releasing(ha)
		la.Release(s.ctx("p1/w0"))

		s.sleepUntil(300 * time.Millisecond)
		if lc, err := c.Mutex("n", opt).TryLock(s.ctx("p3/w0")); err == nil {
			hc := s.hold("p3/w0", lc, 0)
			s.ck.releasing(hc)
			lc.Release(s.ctx("p3/w0"))
		}
		wg.Wait()
	})
}

// TestSimValidityIsTheTruth: Err, TTL, Done and Extend see a lease whose
// validity has passed as lost, whether or not the scheduler has marked it
// yet: the test wakes at the very instant the validity ends, beside the
// scheduler's own timer, in whichever order the bubble runs them.
func TestSimValidityIsTheTruth(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			s := newSimScenario(t, nil)
			ctx := s.ctx("p1/w0")
			ls, err := s.locker(1).Mutex("n", dlock.WithTTL(time.Second)).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(ls.TTL())
			if err := ls.Err(); !errors.Is(err, dlock.ErrLeaseLost) {
				t.Errorf("Err at the end of validity = %v, want ErrLeaseLost", err)
			}
			if ttl := ls.TTL(); ttl != 0 {
				t.Errorf("TTL at the end of validity = %v, want 0", ttl)
			}
			select {
			case <-ls.Done():
			default:
				t.Errorf("Done not closed at the end of validity")
			}
			if err := ls.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrLeaseLost) {
				t.Errorf("Extend at the end of validity = %v, want ErrLeaseLost", err)
			}
		})
	}
}

// TestSimUnconfirmedExtendCaps: an Extend(200ms) whose caller gives up
// after 50ms still reaches the store at 100ms, after a later Extend(10s),
// and shortens the hold to 200ms from then. The lease must not count the
// 10s beyond it: the store lets the lock go at 300ms.
func TestSimUnconfirmedExtendCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSimScenario(t, func(c simCall) (simFlight, bool) {
			if c.op == "extend" && c.from == "p1/w0" && c.ttl() == 200*time.Millisecond {
				return simFlight{applied: true, out: 100 * time.Millisecond}, true
			}
			return simFlight{}, false
		})
		a, b := s.locker(1), s.locker(2)
		ctx := s.ctx("p1/w0")
		ls, err := a.Mutex("n", dlock.WithTTL(time.Second)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h := s.hold("p1/w0", ls, 0)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := ls.Extend(short, 200*time.Millisecond); err == nil {
			t.Fatal("Extend(200ms) whose caller gave up at 50ms succeeded")
		}
		if err := ls.Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("Extend(10s) = %v", err)
		}
		if ttl := ls.TTL(); ttl > 200*time.Millisecond {
			t.Errorf("TTL after an unconfirmed 200ms extension and a 10s one = %v, want at most 200ms", ttl)
		}
		s.ck.action(h)

		s.sleepUntil(400 * time.Millisecond) // the late 200ms extension ran out at 300ms
		if lb, err := b.Mutex("n").TryLock(s.ctx("p2/w0")); err == nil {
			s.hold("p2/w0", lb, 0)
			if ls.TTL() > 0 || ls.Err() == nil {
				t.Errorf("p2 got n (fence %d) while p1's lease says TTL %v, Err %v: the lease outlived its hold", lb.Fence(), ls.TTL(), ls.Err())
			}
		}
		s.ck.action(h)
	})
}

// simMultiLink is a link that takes several names in one operation (a
// stand-in for Valkey's scripts, built from the model's single
// operations): an atomic Multi's extensions go through ExtendMulti, over
// the link with its flights.
type simMultiLink struct{ *simLink }

func (k simMultiLink) AtomicMulti([]string) bool { return true }

func (k simMultiLink) AcquireMulti(ctx context.Context, reqs []dlock.Request) (store.MultiGrant, error) {
	var mg store.MultiGrant
	var err error
	sent := time.Now()
	e := k.call(ctx, simCall{op: "acquire", reqs: reqs}, func(from string) {
		mg = store.MultiGrant{Acquired: true}
		for i, req := range reqs {
			g, aerr := k.net.acquire(from, req, sent)
			if aerr != nil || !g.Acquired {
				for _, taken := range reqs[:i] {
					k.net.release(from, taken)
				}
				mg, err = store.MultiGrant{Refused: i, Refusal: g}, aerr
				return
			}
			mg.Fences = append(mg.Fences, g.Fence)
		}
	})
	if e != nil {
		return store.MultiGrant{}, e
	}
	return mg, err
}

func (k simMultiLink) ExtendMulti(ctx context.Context, reqs []dlock.Request) []error {
	return k.Extend(ctx, reqs)
}

func (k simMultiLink) ReleaseMulti(ctx context.Context, reqs []dlock.Request) []error {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = k.Release(ctx, req)
	}
	return errs
}

// TestSimConcurrentMultiExtends: TestSimConcurrentExtends for an atomic
// multi-lease: Extend(10s) and Extend(1s) of both names in flight at
// once, applied in one order and answered in the other, must not leave the
// multi-lease believing the longer one.
func TestSimConcurrentMultiExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSimScenario(t, reorderedExtends)
		a, err := dlock.New(simMultiLink{s.net.link(1, 0)})
		if err != nil {
			t.Fatal(err)
		}
		s.lockers = append(s.lockers, a)
		b := s.locker(2)
		ctx := s.ctx("p1/w0")
		m := a.Multi([]string{"m1", "m2"}, dlock.WithTTL(time.Second))
		if !m.Atomic() {
			t.Fatal("Multi over a MultiStore is not atomic")
		}
		ml, err := m.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { ml.Extend(ctx, 10*time.Second) })
		wg.Go(func() { ml.Extend(ctx, time.Second) })
		wg.Wait()

		// The store's hold ran out 1s after it applied Extend(1s).
		s.sleepUntil(1200 * time.Millisecond)
		if lb, err := b.Mutex("m1").TryLock(s.ctx("p2/w0")); err == nil {
			s.hold("p2/w0", lb, 0)
			if ml.TTL() > 0 || ml.Err() == nil {
				t.Errorf("p2 got m1 (fence %d) while the multi-lease says TTL %v, Err %v: it outlived its hold", lb.Fence(), ml.TTL(), ml.Err())
			}
		}
	})
}
