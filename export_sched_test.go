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
// It must be called inside a synctest bubble that l belongs to: it waits
// for every goroutine of the bubble to block, so that the scheduler waits
// on its timer, and then stops the timer.
func HoldScheduler(l *Locker) {
	synctest.Wait()
	l.mu.Lock()
	l.sched.timer.Stop()
	l.sched.wakeAt = time.Time{} // no lease is due before it: nothing resets the timer
	l.mu.Unlock()
}
