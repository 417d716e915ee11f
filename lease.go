package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
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
	l           *Locker
	req         Request
	fence       int64
	count       int
	delay       time.Duration // lock-delay: the store holds req.TTL = lease TTL + delay
	ownerOnly   bool          // WithOwnerReleaseOnly: the Locker never releases the store's hold
	autoRenew   bool
	renewEvery  time.Duration
	driftFactor float64
	acquiredAt  time.Time
	maxHold     time.Duration // WithMaxHold; 0: none
	holdEnd     time.Time     // acquiredAt + maxHold; zero: none
	id          uint64        // Event.Lease

	// Guarded by l.mu: made by the first Done, closed (or set to
	// closedDone) when the lease ends.
	done chan struct{}

	// Guarded by l.mu.
	state      leaseState
	err        error
	validUntil time.Time
	renewAt    time.Time
	next       time.Time // scheduler deadline
	index      int       // position in the scheduler heap, -1 when absent
	onLoss     []func(error)
	ctxs       map[*leaseCtx]struct{} // of Context, cancelled when ls ends
	// atMaxHold is set while the lease's validity runs to its max hold:
	// the scheduler renews it no more, and its expiry is the max hold.
	atMaxHold bool
	// extending is set while an extension (Extend or a renewal) is in
	// flight: one at a time, so answers are applied in the order the store
	// ran the requests. extFree, made by an Extend waiting its turn, is
	// closed when the slot is given back.
	extending bool
	extFree   chan struct{}
	// capTTL is the shortest TTL of an extension whose outcome stayed
	// unknown (0: none); see settleLocked.
	capTTL time.Duration
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
// clock, or 0 once it is lost or released (a lease whose validity has
// passed is lost, whether or not its loss has been signalled yet).
func (ls *Lease) TTL() time.Duration {
	var d time.Duration
	ls.locked(func() {
		if ls.state == leaseHeld {
			d = time.Until(ls.validUntil)
		}
	})
	return d
}

// Done returns a channel that is closed when the lease ends: released, lost
// or its Locker closed.
func (ls *Lease) Done() <-chan struct{} {
	var done chan struct{}
	ls.locked(func() {
		if ls.done == nil {
			if ls.state != leaseHeld {
				done = closedDone
				return
			}
			ls.done = make(chan struct{})
		}
		done = ls.done
	})
	return done
}

// locked runs fn holding l.mu, after ending ls as lost if its validity
// has passed (what follows a loss then runs in the background).
func (ls *Lease) locked(fn func()) {
	l := ls.l
	l.mu.Lock()
	expired := ls.expireLocked()
	fn()
	l.mu.Unlock()
	if expired {
		l.afterLossBehind(ls)
	}
}

// closedDone is the Done channel of a lease that ended before anyone asked
// for it.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// over reports whether ls was released or lost, as a closed Done would,
// without making the channel.
func (ls *Lease) over() bool {
	var over bool
	ls.locked(func() { over = ls.state != leaseHeld })
	return over
}

// end closes ls's Done channel, if it was asked for. Caller holds l.mu and
// has moved ls out of leaseHeld.
func (ls *Lease) end() {
	if ls.done != nil {
		close(ls.done)
	}
}

// Err returns nil while the lease is held and after Release; after a loss,
// or once its validity has passed, it returns an error wrapping
// [ErrLeaseLost].
func (ls *Lease) Err() error {
	var err error
	ls.locked(func() { err = ls.err })
	return err
}

// Extend renews the lease to ttl from now (0 keeps its current TTL). Only
// one extension of a lease is in flight at a time: Extend waits (until ctx
// ends) for a renewal or another Extend still in flight, so that the
// store's answers are applied in the order it ran them. The validity it
// gives the lease is counted from when the request was sent.
//
// It returns an error wrapping [ErrLeaseLost] when the lease was already
// lost, its validity has passed or the store no longer holds its token (and
// marks the lease lost), [ErrNotHeld] after Release, ctx.Err() when ctx
// ended before it could be sent, or an [*InvalidError] for a bad ttl. When
// the store did not answer it returns a [*StoreError]; the extension may
// still have been applied, so the lease then keeps no more validity than
// the shorter of its current validity and ttl from the send, and later
// extensions count no more than ttl either (a delayed request can still
// reach the store after them). Likewise, when a request of the acquire that
// made the lease got no answer, no extension counts beyond the acquire's
// TTL. With a ctx without a deadline the call is bounded by
// [WithOpTimeout].
func (ls *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl != 0 && (ttl < MinTTL || ttl > MaxTTL) {
		return invalid("ttl", "must be between 100ms and 24h")
	}
	if ls.l.cfg.observer == nil {
		return ls.extend(ctx, ttl)
	}
	start := time.Now()
	err := ls.extend(ctx, ttl)
	ls.l.emit(Event{Kind: EventExtend, Mode: ls.req.Mode, Name: ls.req.Name, Result: callResult(err), Fence: ls.fence,
		Duration: time.Since(start), Context: ctx, Lease: ls.id, Start: start, Err: err, Owner: ls.req.Holder})
	return err
}

func (ls *Lease) extend(ctx context.Context, ttl time.Duration) error {
	req, err := ls.beginExtend(ctx, ttl)
	if err != nil {
		return err
	}
	ectx, cancel := ls.l.callContext(ctx)
	defer cancel()
	sent := time.Now()
	return ls.endExtend(sent, req, ls.l.store.Extend(ectx, []Request{req})[0])
}

// beginExtend waits for ls's one extension slot, until ctx ends, and takes
// it. It returns the store request that extends ls to ttl (0: its current
// TTL), or the error Extend returns at once. The caller must end the
// extension with endExtend or cancelExtend.
func (ls *Lease) beginExtend(ctx context.Context, ttl time.Duration) (Request, error) {
	l := ls.l
	for {
		if held, err := ls.lockHeld(); !held {
			if err == nil {
				err = ErrNotHeld
			}
			return Request{}, err
		}
		if !ls.extending {
			req := ls.req
			if ttl != 0 {
				req.TTL = ttl + ls.delay
			}
			capped, ok := ls.holdTTLLocked(req.TTL - ls.delay)
			if !ok {
				l.loseLocked(ls, &maxHoldError{ls.maxHold})
				l.mu.Unlock()
				l.afterLoss(ls)
				return Request{}, ls.Err()
			}
			req.TTL = capped + ls.delay
			ls.extending = true
			ls.sendingLocked(capped)
			l.sched.reschedule(ls) // no renewal while this one is in flight
			l.mu.Unlock()
			return req, nil
		}
		if ls.extFree == nil {
			ls.extFree = make(chan struct{})
		}
		free := ls.extFree
		l.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return Request{}, ctx.Err()
		}
	}
}

// holdTTLLocked returns the TTL that an extension of ls to ttl, sent now,
// asks the store for: ttl, or less so that the store's hold ends at ls's
// max hold. ok is false when the max hold leaves nothing worth asking for
// (the extension could not keep the lease valid at all): the caller then
// ends ls as lost at its max hold. Caller holds l.mu.
func (ls *Lease) holdTTLLocked(ttl time.Duration) (time.Duration, bool) {
	if ls.holdEnd.IsZero() {
		return ttl, true
	}
	left := time.Until(ls.holdEnd).Truncate(time.Millisecond)
	if left >= ttl {
		return ttl, true
	}
	return left, left > ls.l.driftFor(ls.driftFactor, left)
}

// expiredErr is the loss error of ls once its validity has passed.
func (ls *Lease) expiredErr() error {
	if ls.atMaxHold {
		return &maxHoldError{ls.maxHold}
	}
	return fmt.Errorf("%w: not renewed in time", ErrLeaseLost)
}

// sendingLocked shortens ls's validity, as an extension to ttl is about to
// be sent, to what that extension leaves if the store applies it: ttl from
// now. The store may apply it at any moment after the send, before its
// answer comes back, so a lease extended to a shorter TTL must not look
// valid past it meanwhile. Caller holds l.mu.
func (ls *Lease) sendingLocked(ttl time.Duration) {
	if end := time.Now().Add(ttl - ls.l.driftFor(ls.driftFactor, ttl)); end.Before(ls.validUntil) {
		ls.validUntil = end
	}
}

// cancelExtend gives back the extension slot taken by beginExtend when
// nothing was sent.
func (ls *Lease) cancelExtend() {
	l := ls.l
	l.mu.Lock()
	ls.freeExtendLocked()
	if ls.state == leaseHeld {
		l.sched.reschedule(ls)
	}
	l.mu.Unlock()
}

func (ls *Lease) freeExtendLocked() {
	ls.extending = false
	if ls.extFree != nil {
		close(ls.extFree)
		ls.extFree = nil
	}
}

// endExtend applies the store's answer err to the extension req sent at
// sent, gives back the extension slot, and returns what Extend returns.
func (ls *Lease) endExtend(sent time.Time, req Request, err error) error {
	l := ls.l
	l.mu.Lock()
	res := ls.settleLocked(sent, req.TTL-ls.delay, err)
	lerr := ls.err
	l.mu.Unlock()
	switch res {
	case extendOK:
		return nil
	case extendGone:
		if lerr == nil {
			lerr = ErrNotHeld
		}
		return lerr
	case extendLost:
		l.afterLoss(ls)
		return lerr
	}
	return &StoreError{Op: "extend", Node: -1, Err: err}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// extendResult is what an extension's answer did to its lease.
type extendResult uint8

const (
	extendOK      extendResult = iota // applied: the lease is valid to the new TTL
	extendUnknown                     // not confirmed: the lease keeps its validity, at most ttl from the send
	extendLost                        // refused, or confirmed too late: the lease is lost
	extendGone                        // the lease had ended before the answer came
)

// settleLocked applies the store's answer err to an extension of ls to ttl
// sent at sent, and gives back the extension slot. Validity is counted from
// the request that was sent, never from state changed meanwhile, and is
// capped by the TTL of every extension whose outcome stayed unknown: such a
// request may still reach the store after a later one and shorten the hold
// to its own TTL from then. Caller holds l.mu, and calls afterLoss after
// unlocking for extendLost.
func (ls *Lease) settleLocked(sent time.Time, ttl time.Duration, err error) extendResult {
	l := ls.l
	ls.freeExtendLocked()
	if ls.state != leaseHeld {
		return extendGone
	}
	now := time.Now()
	switch {
	case err == nil && now.Before(ls.validUntil):
		ls.req.TTL = ttl + ls.delay
		valid := ttl
		if ls.capTTL > 0 {
			valid = min(valid, ls.capTTL)
		}
		ls.validUntil = sent.Add(valid - l.driftFor(ls.driftFactor, valid))
		if !ls.holdEnd.IsZero() {
			// Never valid past the max hold; at it once an extension
			// asked for all that was left.
			ls.validUntil = earliest(ls.validUntil, ls.holdEnd)
			ls.atMaxHold = !sent.Add(ttl + time.Millisecond).Before(ls.holdEnd)
		}
		if ls.renewEvery > valid/2 {
			ls.renewEvery = valid / 3
		}
		ls.renewAt = sent.Add(ls.renewEvery)
		l.sched.reschedule(ls)
		return extendOK
	case err == nil:
		l.loseLocked(ls, fmt.Errorf("%w: extension confirmed after the lease ran out", ErrLeaseLost))
		return extendLost
	case errors.Is(err, ErrNotHeld):
		l.loseLocked(ls, fmt.Errorf("%w: extend refused", ErrLeaseLost))
		return extendLost
	}
	// Not confirmed: the store may have applied it, now or later.
	if ls.capTTL == 0 || ttl < ls.capTTL {
		ls.capTTL = ttl
	}
	if end := sent.Add(ttl - l.driftFor(ls.driftFactor, ttl)); end.Before(ls.validUntil) {
		ls.validUntil = end
	}
	if !now.Before(ls.validUntil) {
		l.loseLocked(ls, fmt.Errorf("%w: extension not confirmed in time", ErrLeaseLost))
		return extendLost
	}
	l.sched.reschedule(ls)
	return extendUnknown
}

// lockHeld takes l.mu and reports whether ls is held, ending it as lost
// first if its validity has passed. When it is not held, lockHeld has
// released l.mu (and run what follows a loss) and returns ls's error: nil
// after a release, the loss error after a loss.
func (ls *Lease) lockHeld() (bool, error) {
	l := ls.l
	l.mu.Lock()
	expired := ls.expireLocked()
	if ls.state == leaseHeld {
		return true, nil
	}
	err := ls.err
	l.mu.Unlock()
	if expired {
		l.afterLossBehind(ls)
	}
	return false, err
}

// expireLocked ends ls as lost when its validity has passed, whether or not
// the scheduler has noticed yet, and reports whether it did; the caller
// must then call afterLossBehind (or, in Close, afterLoss) after unlocking.
// Caller holds l.mu.
func (ls *Lease) expireLocked() bool {
	if ls.state != leaseHeld || time.Now().Before(ls.validUntil) {
		return false
	}
	ls.l.loseLocked(ls, ls.expiredErr())
	if !ls.l.closed {
		ls.l.wg.Add(1) // for afterLossBehind
	}
	return true
}

// Release gives the lock up. It returns nil when the store released it, an
// error wrapping [ErrLeaseLost] when the lease had already been lost or its
// validity had passed (the store's hold is then left to run out, so a
// lock-delay still holds), [ErrNotHeld] when it was already released or the
// store no longer held it, or a [*StoreError] when the store did not
// answer (the lock then frees itself when its TTL runs out). Done is closed
// in every case.
//
// With [WithMinHold], a Release before the grant plus the min hold ends the
// lease and returns nil, but the name is not free: the store keeps it held
// (with this lease's token and fence) until then, by its own clock.
//
// Release still releases when ctx has already ended (a request's context
// in a deferred Release, say): the store call gets up to [WithOpTimeout],
// or ctx's deadline when that is later.
func (ls *Lease) Release(ctx context.Context) error {
	start := time.Now()
	if err := ls.markReleased(); err != nil {
		return err
	}
	l := ls.l
	rctx, cancel := l.releaseContext(ctx)
	defer cancel()
	err := releaseErr(l.store.Release(rctx, ls.req))
	ls.reportRelease(ctx, start, err)
	return err
}

// releaseContext returns the context of a store call that gives something
// up for ctx's caller: ctx's values but not its end, with a deadline of
// opTimeout from now, or ctx's deadline when that is later. A ctx that
// never ends, or ends sooner, shares the Locker's expiries (no timer).
func (l *Locker) releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() != nil {
		d, ok := ctx.Deadline()
		ctx = context.WithoutCancel(ctx)
		if ok && time.Until(d) > l.cfg.opTimeout {
			return context.WithDeadline(ctx, d)
		}
	}
	return l.expiries.context(ctx, l.cfg.opTimeout), noCancel
}

// markReleased ends a held lease as Release does, without asking the store.
// It returns the loss error of a lost lease (or of one whose validity has
// passed), ErrNotHeld for one already released, and nil when the caller
// must now release ls.req on the store.
func (ls *Lease) markReleased() error {
	l := ls.l
	if held, err := ls.lockHeld(); !held {
		if err == nil {
			err = ErrNotHeld // released before
		}
		return err
	}
	ls.state = leaseReleased
	l.sched.remove(ls)
	ls.end()
	ctxs := ls.endContextsLocked()
	l.mu.Unlock()
	cancelContexts(ctxs, ErrReleased)
	return nil
}

// reportRelease reports the release of ls, called at start by ctx's
// caller, to which the store answered err (see [Event]).
func (ls *Lease) reportRelease(ctx context.Context, start time.Time, err error) {
	if ls.l.cfg.observer != nil {
		ls.l.emit(Event{Kind: EventRelease, Mode: ls.req.Mode, Name: ls.req.Name, Result: callResult(err), Fence: ls.fence,
			Duration: start.Sub(ls.acquiredAt), Context: ctx, Lease: ls.id, Start: start, Err: err, Owner: ls.req.Holder})
	}
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
	if held, err := ls.lockHeld(); !held {
		if err != nil {
			fn(err)
		}
		return
	}
	ls.onLoss = append(ls.onLoss, fn)
	ls.l.mu.Unlock()
}

// newLease turns grant g of req, asked for at sent, into a held Lease and
// hands it to the scheduler. When a request of the call got no answer
// (unknownSince, its send; zero: none), the lease is capped as by an
// unanswered extension, and its max hold counts from that request's send;
// it counts from floor too when that is earlier (zero: none; see
// call.floor). A grant that came too late, after ctx ended or
// after Close is refused with an error, and the caller must release it (or
// ask again with the same token).
func (l *Locker) newLease(ctx context.Context, c *config, req Request, g store.Grant, sent, unknownSince, floor time.Time) (*Lease, error) {
	ttl := req.TTL - c.lockDelay
	validUntil := sent.Add(ttl - l.driftFor(c.driftFactor, ttl))
	first := sent // the first send that may have made the hold
	if ctx.Err() != nil || !time.Now().Before(validUntil) {
		// The caller gave up, or the grant came too late to be of use: the
		// caller releases it, or asks again.
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &StoreError{Op: "acquire", Node: -1, Err: errors.New("grant arrived after the lease ran out")}
	}
	ls := &Lease{
		l:           l,
		req:         req,
		fence:       g.Fence,
		count:       g.Count,
		delay:       c.lockDelay,
		ownerOnly:   c.ownerOnly,
		autoRenew:   c.autoRenew,
		renewEvery:  c.renewInterval(),
		driftFactor: c.driftFactor,
		acquiredAt:  sent,
		maxHold:     c.maxHold,
		id:          leaseIDs.Add(1),
		validUntil:  validUntil,
		renewAt:     sent.Add(c.renewInterval()),
		index:       -1,
	}
	if !unknownSince.IsZero() {
		// A request of the call whose outcome is unknown may still reach
		// the store and set the hold back to ttl from then: no extension
		// counts beyond ttl, and the max hold counts from its send.
		ls.capTTL = ttl
		first = unknownSince
	}
	if !floor.IsZero() && floor.Before(first) {
		first = floor
	}
	if c.maxHold > 0 {
		ls.holdEnd = first.Add(c.maxHold)
		ls.validUntil = earliest(validUntil, ls.holdEnd)
		ls.atMaxHold = !sent.Add(ttl).Before(ls.holdEnd)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	l.sched.reschedule(ls)
	l.mu.Unlock()
	return ls, nil
}
