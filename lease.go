package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

type leaseState uint8

const (
	leaseHeld leaseState = iota
	leaseReleased
	leaseLost
)

// Lease is one grant of a lock: a time-limited hold identified by a secret
// token and numbered by a fencing token.
//
// A Lease is valid until its TTL runs out on the client's monotonic clock
// (less a margin for clock drift), unless it is extended or auto-renewed in
// time. When a renewal is refused, or cannot be confirmed before the local
// validity ends, the lease is lost: Done closes and Err returns
// [ErrLeaseLost]. From then on the lock must be presumed held by someone
// else. A pause of the holder's process (GC, SIGSTOP, a VM migration) can
// outlast the lease without the holder noticing in time; only the fencing
// token, checked by the protected resource, makes such a stale holder
// harmless. See [Lease.Fence].
//
// A Lease is safe for concurrent use.
type Lease struct {
	l          *Locker
	req        Request
	fence      int64
	count      int
	delay      time.Duration // lock-delay: the store holds req.TTL = lease TTL + delay
	autoRenew  bool
	renewEvery time.Duration
	drift      time.Duration
	acquiredAt time.Time

	// Guarded by l.mu: made by the first Done, closed (or set to
	// closedDone) when the lease ends.
	done chan struct{}

	// Guarded by l.mu.
	state      leaseState
	err        error
	validUntil time.Time
	renewAt    time.Time
	renewing   bool
	next       time.Time // scheduler deadline
	index      int       // position in the scheduler heap, -1 when absent
	onLoss     []func(error)
}

// Name returns the lock name.
func (ls *Lease) Name() string { return ls.req.Name }

// Token returns the lease's secret token. Whoever has it can extend or
// release the lease; keep it out of logs and URLs.
func (ls *Lease) Token() string { return ls.req.Token }

// Fence returns the fencing token of the grant: strictly greater than the
// fence of every earlier exclusive grant of the same lock (readers of a
// read-write lock share the current fence). Pass it with every write to
// the protected resource and have the resource reject a fence lower than
// the highest it has seen; that, not the lease, is what makes a paused or
// partitioned former holder harmless.
func (ls *Lease) Fence() int64 { return ls.fence }

// Mode returns the pattern the lease was granted under.
func (ls *Lease) Mode() Mode { return ls.req.Mode }

// Count returns the hold count of a reentrant lease (1 for other patterns).
func (ls *Lease) Count() int { return max(ls.count, 1) }

// TTL returns how long the lease remains valid by the local monotonic
// clock, or 0 once it is lost or released.
func (ls *Lease) TTL() time.Duration {
	ls.l.mu.Lock()
	defer ls.l.mu.Unlock()
	if ls.state != leaseHeld {
		return 0
	}
	return max(time.Until(ls.validUntil), 0)
}

// Done returns a channel that is closed when the lease ends: released, lost
// or its Locker closed.
func (ls *Lease) Done() <-chan struct{} {
	ls.l.mu.Lock()
	defer ls.l.mu.Unlock()
	if ls.done == nil {
		if ls.state != leaseHeld {
			return closedDone
		}
		ls.done = make(chan struct{})
	}
	return ls.done
}

// closedDone is the Done channel of a lease that ended before anyone asked
// for it.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// ended reports whether ls was released or lost, as a closed Done would,
// without making the channel.
func (ls *Lease) ended() bool {
	ls.l.mu.Lock()
	defer ls.l.mu.Unlock()
	return ls.state != leaseHeld
}

// end closes ls's Done channel, if it was asked for. Caller holds l.mu and
// has moved ls out of leaseHeld.
func (ls *Lease) end() {
	if ls.done != nil {
		close(ls.done)
	}
}

// Err returns nil while the lease is held and after Release; after a loss it
// returns an error wrapping [ErrLeaseLost].
func (ls *Lease) Err() error {
	ls.l.mu.Lock()
	defer ls.l.mu.Unlock()
	return ls.err
}

// Extend renews the lease to ttl from now (0 keeps its current TTL). It
// returns an error wrapping [ErrLeaseLost] when the lease was already lost
// or the store no longer holds its token (and marks the lease lost), a
// [*StoreError] when the store did not answer (the lease stays valid until
// its current validity ends), or an [*InvalidError] for a bad ttl.
func (ls *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	req, ttl, err := ls.extendReq(ttl)
	if err != nil {
		return err
	}
	sent := time.Now()
	return ls.extended(sent, ttl, ls.l.store.Extend(ctx, []Request{req})[0])
}

// extendReq checks ttl (0: the lease's TTL) and returns the store request
// that extends the lease to it, or the error Extend returns at once.
func (ls *Lease) extendReq(ttl time.Duration) (Request, time.Duration, error) {
	if ttl == 0 {
		ttl = ls.req.TTL - ls.delay
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return Request{}, 0, invalid("ttl", "must be between 100ms and 24h")
	}
	l := ls.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if ls.state != leaseHeld {
		if ls.err != nil {
			return Request{}, 0, ls.err
		}
		return Request{}, 0, ErrNotHeld
	}
	req := ls.req
	req.TTL = ttl + ls.delay
	return req, ttl, nil
}

// extended applies the store's answer err to an extension to ttl sent at
// sent, and returns what Extend returns.
func (ls *Lease) extended(sent time.Time, ttl time.Duration, err error) error {
	l := ls.l
	l.mu.Lock()
	if ls.state != leaseHeld {
		err := ls.err
		l.mu.Unlock()
		if err == nil {
			err = ErrNotHeld
		}
		return err
	}
	switch {
	case err == nil && time.Now().Before(ls.validUntil):
		ls.req.TTL = ttl + ls.delay
		ls.drift = l.cfg.driftFor(ttl)
		ls.validUntil = sent.Add(ttl - ls.drift)
		if ls.renewEvery > ttl/2 {
			ls.renewEvery = ttl / 3
		}
		ls.renewAt = sent.Add(ls.renewEvery)
		l.sched.reschedule(ls)
		l.mu.Unlock()
		return nil
	case err == nil, errors.Is(err, ErrNotHeld):
		l.loseLocked(ls, fmt.Errorf("%w: extend refused", ErrLeaseLost))
		err := ls.err
		l.mu.Unlock()
		l.afterLoss(ls)
		return err
	default:
		l.mu.Unlock()
		return &StoreError{Op: "extend", Node: -1, Err: err}
	}
}

// Release gives the lock up. It returns nil when the store released it, an
// error wrapping [ErrLeaseLost] when the lease had already been lost,
// [ErrNotHeld] when it was already released or the store no longer held it,
// or a [*StoreError] when the store did not answer (the lock then frees
// itself when its TTL runs out). Done is closed in every case.
func (ls *Lease) Release(ctx context.Context) error {
	if err := ls.markReleased(); err != nil {
		return err
	}
	l := ls.l
	if _, ok := ctx.Deadline(); !ok {
		if ctx.Done() == nil {
			ctx = l.expiries.context(ctx, l.cfg.opTimeout)
		} else {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, l.cfg.opTimeout)
			defer cancel()
		}
	}
	return releaseErr(l.store.Release(ctx, ls.req))
}

// markReleased ends a held lease as Release does, without asking the store.
// It returns the loss error of a lost lease, ErrNotHeld for one already
// released, and nil when the caller must now release ls.req on the store.
func (ls *Lease) markReleased() error {
	l := ls.l
	l.mu.Lock()
	switch ls.state {
	case leaseLost:
		err := ls.err
		l.mu.Unlock()
		return err
	case leaseReleased:
		l.mu.Unlock()
		return ErrNotHeld
	}
	ls.state = leaseReleased
	l.sched.remove(ls)
	ls.end()
	l.mu.Unlock()
	if l.cfg.observer != nil {
		l.emit(Event{Kind: EventRelease, Mode: ls.req.Mode, Name: ls.req.Name, Fence: ls.fence, Duration: time.Since(ls.acquiredAt)})
	}
	return nil
}

// releaseErr is what Release returns for the store's answer err.
func releaseErr(err error) error {
	switch {
	case err == nil, errors.Is(err, ErrNotHeld):
		return err
	default:
		return &StoreError{Op: "release", Node: -1, Err: err}
	}
}

// notifyLoss registers fn to run (once, without l.mu held) when the lease is
// lost; fn runs at once if it already was.
func (ls *Lease) notifyLoss(fn func(error)) {
	l := ls.l
	l.mu.Lock()
	if ls.state != leaseHeld {
		err := ls.err
		l.mu.Unlock()
		if err != nil {
			fn(err)
		}
		return
	}
	ls.onLoss = append(ls.onLoss, fn)
	l.mu.Unlock()
}
