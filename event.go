package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// EventKind says what an [Event] reports.
type EventKind uint8

// The kinds of [Event].
const (
	EventAcquire   EventKind = iota // an acquire finished: Result is acquired, locked, canceled, invalid or error
	EventRelease                    // a Release call ended the lease: Duration is how long it was held; Result is ok, lost or error
	EventRenew                      // a renewal finished: Result is ok, lost or error
	EventLeaseLost                  // a lease was lost: Duration is how long it was held
	EventExtend                     // a call of [Lease.Extend] finished: Result is ok, lost or error
)

// Event is what a Locker reports to its observer (see [WithObserver]).
// Name is the lock name; an observer exporting metrics must not use it as a
// label value.
//
// Events are delivered in one of two ways, and a Locker promises this
// much about their order:
//
//   - An event that reports a caller's call (EventAcquire, EventExtend,
//     EventRelease) is delivered in the caller's goroutine, before the call
//     returns.
//   - An event of what the Locker does by itself (EventRenew,
//     EventLeaseLost, including the losses of Close) is queued and
//     delivered from a goroutine of the Locker, one at a time, in the order
//     the Locker queued them. For each lease, its EventLeaseLost comes
//     after every EventRenew of it and is the last of these; a renewal
//     still in flight when its lease is lost is not reported. Close returns
//     once every queued event has been delivered.
//
// Nothing else is ordered: the events of a caller and those of the Locker
// may interleave (a lease's EventLeaseLost can even be delivered before its
// EventAcquire, when it is lost before the acquire returns), and the
// observer is called from several goroutines at once. A slow observer
// delays no renewal and no loss signal (Done, Err, [Lease.Context]): the
// Locker's events queue behind it, in memory and without bound, so an
// observer learns of a loss no sooner than the holder does, and possibly
// much later.
//
// Start and Duration time the call an event reports: for EventAcquire,
// EventExtend and EventRenew, the call itself (an acquire's waiting
// included); for EventRelease, Start is when Release was called and
// Duration the hold time up to then; for EventLeaseLost, Duration is the
// hold time and Start is zero.
type Event struct {
	Kind     EventKind
	Mode     Mode
	Name     string
	Result   string
	Fence    int64
	Duration time.Duration // acquire, extend, renewal: time the call took; release and loss: hold time
	Waited   bool          // acquire: whether the call waited for the lock
	// Owner is who holds the lease as the store records it: the
	// [WithHolder] it was asked with ("" when none was set). Never a token.
	Owner string

	// Context is the context of the caller whose call the event reports
	// (the acquire, Extend or Release; for a [Multi], its Lock or TryLock),
	// for an observer that parents its trace spans under the caller's. It
	// is nil for what the Locker does by itself: renewals, and losses
	// (which may also end leases when the Locker is closed). An observer
	// must not keep it past its return.
	Context context.Context
	// Lease identifies the lease the event is about, in this process:
	// the same non-zero number in the acquire that granted it and in its
	// renewal, extend, release and loss events; 0 in an acquire that got
	// no lease.
	Lease uint64
	// Start is when the call the event reports began (see above).
	Start time.Time
	// Attempts is, for EventAcquire, how many acquire requests were sent
	// to the store (a grant the store handed over counts none).
	Attempts int
	// Err is the error the call returned (an acquire refused: a
	// [*LockedError] naming the held mode), the error of a renewal that
	// failed, or the loss error of EventLeaseLost; nil on success.
	Err error
}

// leaseIDs numbers the leases of the process, for Event.Lease.
var leaseIDs atomic.Uint64

// callResult is the Result of an extend, renewal or release whose call
// returned err: ok, lost (the lease was lost or the store no longer held
// it) or error.
func callResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrNotHeld):
		return "lost"
	}
	return "error"
}
