package dlock

import "time"

// EventKind says what an [Event] reports.
type EventKind uint8

const (
	EventAcquire   EventKind = iota // an acquire finished: Result is acquired, locked, canceled or error
	EventRelease                    // a lease was released: Duration is how long it was held
	EventRenew                      // a renewal finished: Result is ok, lost or error
	EventLeaseLost                  // a lease was lost: Duration is how long it was held
)

// Event is what a Locker reports to its observer (see [WithObserver]).
// Name is the lock name; an observer exporting metrics must not use it as a
// label value.
type Event struct {
	Kind     EventKind
	Mode     Mode
	Name     string
	Result   string
	Fence    int64
	Duration time.Duration // acquire: time spent, including waiting; release and loss: hold time
	Waited   bool          // acquire: whether the call waited for the lock
}
