// Package fence is the resource side of fencing tokens: what a protected
// resource does with the [dlock.Lease.Fence] a writer sends, so that a
// writer whose lease ended without its knowledge (a long pause, a clock
// jump, a failover) is refused.
//
// The rule is one comparison: accept a write only if its fence is at least
// the highest fence accepted so far, and remember the new highest, atomically
// with the write. A [Guard] does that for one resource in memory; a
// [Register] is a value protected by a Guard, for tests and demos. In a
// database the same rule is a conditional update, for example in PostgreSQL:
//
//	UPDATE accounts SET balance = $2, fence = $3
//	WHERE id = $1 AND fence <= $3
//
// and a write that updated no row was stale (store/postgres has a helper).
// Equal fences are accepted so that one holder can write more than once.
package fence

import (
	"errors"
	"fmt"
	"sync"
)

// ErrStale reports a write whose fence is lower than one already accepted.
// The error is a *StaleError.
var ErrStale = errors.New("fence: stale fencing token")

// StaleError is a refused write. It wraps [ErrStale].
type StaleError struct {
	Fence   int64 // the writer's fence
	Highest int64 // the highest fence accepted before
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale fencing token %d (highest accepted %d)", e.Fence, e.Highest)
}

func (e *StaleError) Unwrap() error { return ErrStale }

// Guard tracks the highest fence a resource accepted. The zero value
// accepts any fence first. It is safe for concurrent use.
type Guard struct {
	mu       sync.Mutex
	highest  int64
	rejected int64
	// OnReject, if set, is called (without the Guard's lock) for every
	// refused fence, e.g. dlockprom's Metrics.FencingRejected.
	OnReject func()
}

// Admit accepts fence if it is at least the highest accepted so far and
// records it; otherwise it returns a [*StaleError] and records nothing.
func (g *Guard) Admit(fence int64) error {
	return g.Do(fence, func() error { return nil })
}

// Do runs write while holding the guard, only if fence is admissible, and
// records fence only if write succeeds. Use it when the write and the check
// must be one step (an in-process resource).
func (g *Guard) Do(fence int64, write func() error) error {
	g.mu.Lock()
	if fence < g.highest {
		g.rejected++
		err := &StaleError{Fence: fence, Highest: g.highest}
		g.mu.Unlock()
		if g.OnReject != nil {
			g.OnReject()
		}
		return err
	}
	defer g.mu.Unlock()
	if err := write(); err != nil {
		return err
	}
	g.highest = fence
	return nil
}

// Highest returns the highest fence accepted so far.
func (g *Guard) Highest() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest
}

// Rejected returns how many fences were refused.
func (g *Guard) Rejected() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rejected
}

// Register is a value that only accepts writes carrying an admissible
// fence: an in-memory stand-in for a fenced database row.
type Register[T any] struct {
	Guard
	value T
}

// Write stores v if fence is admissible, else returns a [*StaleError].
func (r *Register[T]) Write(fence int64, v T) error {
	return r.Do(fence, func() error {
		r.value = v
		return nil
	})
}

// Read returns the value and the fence of the write that stored it.
func (r *Register[T]) Read() (T, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, r.highest
}
