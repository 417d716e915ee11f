package store

import (
	"errors"
	"fmt"
)

// The errors a store returns. Package dlock re-exports each of them under
// the same name (dlock.ErrNotHeld is ErrNotHeld), so a caller matches them
// with errors.Is and errors.As through either package.
var (
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
	// ErrInvalid reports bad input; the error is an *InvalidError or a
	// *LimitError.
	ErrInvalid = errors.New("dlock: invalid argument")
	// ErrClosed reports use of a closed Locker or store.
	ErrClosed = errors.New("dlock: locker closed")
	// ErrNoLeader reports that nobody leads an election.
	ErrNoLeader = errors.New("dlock: no leader")
	// ErrUpgrade reports an attempt to take a write lock while holding a
	// read lock on the same name, which would deadlock.
	ErrUpgrade = errors.New("dlock: read-to-write upgrade not supported")
)

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
