package dlock

import (
	"testing/synctest"
	"time"
)

// HoldScheduler stops l's scheduler from looking at its leases (renewing
// them, or ending those whose validity has passed) until l is closed, as a
// scheduler held up by a loaded machine or a long pause of its goroutine
// would be: what a lease does past its validity must then not depend on
// the scheduler having noticed. A slow observer no longer holds the
// scheduler up (its events are queued), so tests that modelled a stalled
// scheduler with one use this instead.
//
// It must be called inside a synctest bubble that l belongs to, as
// StallScheduler.
func HoldScheduler(l *Locker) { StallScheduler(l) }

// SchedulerStall is a hold of a Locker's scheduler made by StallScheduler.
type SchedulerStall struct {
	l     *Locker
	looks int // the scheduler's passes when the stall began
	done  bool
}

// StallScheduler holds l's scheduler up, as HoldScheduler does, until
// Resume is called on the stall it returns (or l is closed): meanwhile the
// scheduler makes no pass over its leases, so it sends no renewal and
// ends no lease whose validity passed; the Locker's other goroutines (and
// its callers) go on. This models a scheduler goroutine held up by a
// loaded machine, which a slow observer no longer does.
//
// It must be called inside a synctest bubble that l belongs to, and not by
// two goroutines of one bubble at once: it waits for every other goroutine
// of the bubble to block (synctest.Wait), so that the scheduler waits on
// its timer, a renewal it started has made its store call, and no timer
// can fire before the stall begins; and then it stops the timer. Two
// stalls of one Locker must not overlap: the first Resume ends both.
func StallScheduler(l *Locker) *SchedulerStall {
	synctest.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sched.timer.Stop()
	l.sched.wakeAt = time.Time{} // no lease is due before it: nothing resets the timer
	return &SchedulerStall{l: l, looks: l.sched.looks}
}

// Looks returns how many passes over its leases the scheduler made since
// the stall began: 0 until Resume, unless the stall does not hold.
func (s *SchedulerStall) Looks() int {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.l.sched.looks - s.looks
}

// Resume ends the stall: the scheduler looks at its leases at once (and
// ends those whose validity passed meanwhile, if nothing else did), unless
// the Locker was closed. It returns Looks as it was just before. Later
// calls do nothing and return 0.
func (s *SchedulerStall) Resume() int {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.done {
		return 0
	}
	s.done = true
	looks := l.sched.looks - s.looks
	if !l.closed {
		// The loop is waiting on the stopped timer: wake it now. Leases
		// rescheduled meanwhile did not move wakeAt (zero), so the loop's
		// pass sets both anew.
		l.sched.wakeAt = time.Now()
		l.sched.timer.Reset(0)
	}
	return looks
}

// HeldPastValidity reports whether ls is still held although its validity
// has passed: nothing (the scheduler, or an accessor such as Err, TTL or
// Done, which would end it) has ended it since. Unlike those accessors, it
// does not end it.
func HeldPastValidity(ls *Lease) bool {
	ls.l.mu.Lock()
	defer ls.l.mu.Unlock()
	return ls.state == leaseHeld && !time.Now().Before(ls.validUntil)
}
