package dlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// The errors of a Locker and its leases. Those a store returns are package
// store's values under the same names (ErrNotHeld is [store.ErrNotHeld]),
// so errors.Is and errors.As match them through either package.
var (
	// ErrLocked reports that another holder has the lock.
	ErrLocked = errors.New("dlock: lock held")
	// ErrLeaseLost reports that a lease ended before it was released: its
	// renewal was refused or could not be confirmed in time. The lock must
	// be presumed held by someone else.
	ErrLeaseLost = errors.New("dlock: lease lost")
	// ErrMaxHold reports that a lease ended because it had been held for
	// its [WithMaxHold]; the error that says so wraps ErrLeaseLost too.
	ErrMaxHold = errors.New("dlock: max hold reached")
	// ErrReleased is the cause ([context.Cause]) of a [Lease.Context]
	// cancelled because its lease was released.
	ErrReleased = errors.New("dlock: lease released")
	// ErrNotHeld reports that a token does not hold the lock it names.
	ErrNotHeld = store.ErrNotHeld
	// ErrUnavailable reports that the store could not be reached or did not
	// answer in time.
	ErrUnavailable = store.ErrUnavailable
	// ErrNoQuorum reports that too few nodes of a quorum store answered. It
	// wraps ErrUnavailable.
	ErrNoQuorum = store.ErrNoQuorum
	// ErrNotSupported reports that a store cannot provide a pattern safely.
	ErrNotSupported = store.ErrNotSupported
	// ErrInvalid reports bad input; the error is an *InvalidError or a
	// *LimitError.
	ErrInvalid = store.ErrInvalid
	// ErrClosed reports use of a closed Locker (or of a closed store).
	ErrClosed = store.ErrClosed
	// ErrNoLeader reports that nobody leads an election.
	ErrNoLeader = store.ErrNoLeader
	// ErrUpgrade reports an attempt to take a write lock while holding a
	// read lock on the same name, which would deadlock.
	ErrUpgrade = store.ErrUpgrade
)

// LockedError is returned when a lock is held by another holder. It wraps
// [ErrLocked].
type LockedError struct {
	Name string
	// RetryAfter is how long the current hold has left by the store's
	// clock; 0 when unknown.
	RetryAfter time.Duration
	// Held is the mode of the hold that refused the request (a name is one
	// lock whatever pattern holds it; see [store.Coexist]). A key set by a
	// foreign library is reported as ModeMutex.
	Held Mode
}

func (e *LockedError) Error() string {
	a := "a"
	if e.Held == ModeElection {
		a = "an"
	}
	return fmt.Sprintf("dlock: lock %q held by %s %v hold (retry after %v)", e.Name, a, e.Held, roundDuration(e.RetryAfter))
}

// roundDuration rounds d for an error string to the millisecond, the
// precision stores count in: "4.999998418s" prints as "5s". The field that
// holds d keeps it exact.
func roundDuration(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func (e *LockedError) Unwrap() error { return ErrLocked }

// LimitError reports a semaphore request whose limit differs from the limit
// that the name's permits are held with. It wraps [ErrInvalid]. It is
// [store.LimitError].
type LimitError = store.LimitError

// InvalidError names the argument that was rejected. It wraps [ErrInvalid].
// It is [store.InvalidError].
type InvalidError = store.InvalidError

// StoreError is a failure of a store operation. It wraps both
// [ErrUnavailable] and the underlying error. It is [store.StoreError].
type StoreError = store.StoreError

// maxHoldError is the loss error of a lease that reached its max hold.
type maxHoldError struct{ d time.Duration }

func (e *maxHoldError) Error() string {
	return fmt.Sprintf("dlock: lease lost: held for its max hold (%v)", roundDuration(e.d))
}

func (e *maxHoldError) Unwrap() []error { return []error{ErrLeaseLost, ErrMaxHold} }

func invalid(field, reason string) error { return &InvalidError{Field: field, Reason: reason} }
