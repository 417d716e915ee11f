package dlock

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrLocked reports that another holder has the lock.
	ErrLocked = errors.New("dlock: lock held")
	// ErrLeaseLost reports that a lease ended before it was released: its
	// renewal was refused or could not be confirmed in time. The lock must
	// be presumed held by someone else.
	ErrLeaseLost = errors.New("dlock: lease lost")
	// ErrNotHeld reports that a token does not hold the lock it names.
	ErrNotHeld = errors.New("dlock: lock not held")
	// ErrUnavailable reports that the store could not be reached or did not
	// answer in time.
	ErrUnavailable = errors.New("dlock: store unavailable")
	// ErrNoQuorum reports that too few nodes of a quorum store answered. It
	// wraps ErrUnavailable.
	ErrNoQuorum = fmt.Errorf("%w: no quorum", ErrUnavailable)
	// ErrNotSupported reports that a store cannot provide a pattern safely.
	ErrNotSupported = errors.New("dlock: not supported by this store")
	// ErrInvalid reports bad input; the error is an *InvalidError.
	ErrInvalid = errors.New("dlock: invalid argument")
	// ErrClosed reports use of a closed Locker.
	ErrClosed = errors.New("dlock: locker closed")
	// ErrNoLeader reports that nobody leads an election.
	ErrNoLeader = errors.New("dlock: no leader")
	// ErrUpgrade reports an attempt to take a write lock while holding a
	// read lock on the same name, which would deadlock.
	ErrUpgrade = errors.New("dlock: read-to-write upgrade not supported")
)

// LockedError is returned when a lock is held by another holder. It wraps
// [ErrLocked].
type LockedError struct {
	Name string
	// RetryAfter is how long the current hold has left by the store's
	// clock; 0 when unknown.
	RetryAfter time.Duration
	// Held is the mode of the hold that refused the request (a name is one
	// lock whatever pattern holds it; see [Coexist]). A key set by a
	// foreign library is reported as ModeMutex.
	Held Mode
}

func (e *LockedError) Error() string {
	a := "a"
	if e.Held == ModeElection {
		a = "an"
	}
	return fmt.Sprintf("dlock: lock %q held by %s %v hold (retry after %v)", e.Name, a, e.Held, e.RetryAfter)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// LimitError reports a semaphore request whose limit differs from the limit
// that the name's permits are held with: every user of one name must agree
// on it. It wraps [ErrInvalid].
type LimitError struct {
	Name  string
	Held  int // the limit of the permits held now
	Asked int // the limit of the request
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("dlock: invalid limit: semaphore %q is held with limit %d, not %d", e.Name, e.Held, e.Asked)
}

func (e *LimitError) Unwrap() error { return ErrInvalid }

// InvalidError names the argument that was rejected. It wraps [ErrInvalid].
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("dlock: invalid %s: %s", e.Field, e.Reason)
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }

// StoreError is a failure of a store operation. It wraps both
// [ErrUnavailable] and the underlying error.
type StoreError struct {
	Op   string // acquire, extend, release, watch
	Node int    // index of the node in a multi-node store, or -1
	Err  error
}

func (e *StoreError) Error() string {
	if e.Node >= 0 {
		return fmt.Sprintf("dlock: store %s on node %d: %v", e.Op, e.Node, e.Err)
	}
	return fmt.Sprintf("dlock: store %s: %v", e.Op, e.Err)
}

func (e *StoreError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

func invalid(field, reason string) error { return &InvalidError{Field: field, Reason: reason} }
