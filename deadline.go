package dlock

import (
	"context"
	"sync/atomic"
	"time"
)

// attemptContext returns the context of one store call made for ctx: it
// has ctx's values but not its end, which cuts the call short only grace
// later; a ctx that never ends, or ends by cancellation only, gives the
// call grace from now (up to grace/32 more, see expiries), so that a store
// that never answers cannot hold the call forever. The deadline also lets
// a client run a lone call on its own connection directly (valkey-go sends a call without one
// through its pipeline goroutines, so that it can be abandoned). The
// caller must call the returned cancel.
func (e *expiries) attemptContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		// ctx never ends (Background, WithoutCancel): the call still ends,
		// grace from now.
		return e.context(ctx, grace), noCancel
	}
	dl, ok := ctx.Deadline()
	if !ok {
		// Ended by cancellation only: the call's own deadline, grace from
		// now, comes no later than grace after ctx could end.
		return e.context(context.WithoutCancel(ctx), grace), noCancel
	}
	actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl.Add(grace))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-actx.Done():
		}
	})
	return actx, func() {
		stop()
		cancel()
	}
}

func noCancel() {}

// callContext returns the context of a store call whose answer ctx's caller
// waits for: ctx itself when it has a deadline, otherwise ctx ended at the
// latest the op timeout from now, so that a store that never answers
// cannot hold the caller forever (see [WithOpTimeout]). The caller must
// call the returned cancel.
func (l *Locker) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, noCancel
	}
	if ctx.Done() == nil {
		return l.expiries.context(ctx, l.cfg.opTimeout), noCancel
	}
	return context.WithTimeout(ctx, l.cfg.opTimeout)
}

// expiries hands out the deadlines of a Locker's store calls whose context
// never ends otherwise. The calls asked for in the same stretch of d/32
// share one expiry: one timer and one Done channel, where a
// context.WithDeadline per call made a timer per call (about 40 % of the
// Locker's own CPU per Lock and Release over a store that does nothing).
type expiries struct {
	cur atomic.Pointer[expiry]
}

// An expiry is a context that ends at its deadline, shared by the calls of
// one stretch.
type expiry struct {
	at     time.Time
	ctx    context.Context
	cancel context.CancelFunc // never called: the deadline ends ctx
}

// context returns a context with parent's values whose deadline is between
// d and d + d/32 from now, and that ends then; parent must never end
// (context.WithoutCancel). Nothing but the deadline ends it: the caller
// cancels nothing.
func (e *expiries) context(parent context.Context, d time.Duration) context.Context {
	earliest, slack := time.Now().Add(d), d/32
	x := e.cur.Load()
	if x == nil || x.at.Before(earliest) || x.at.Sub(earliest) > slack {
		x = &expiry{at: earliest.Add(slack)}
		x.ctx, x.cancel = context.WithDeadline(context.Background(), x.at) //nolint:gosec // G118: the deadline ends ctx; the cancel is kept in x.cancel (see expiry)
		e.cur.Store(x)
	}
	return &expiryCtx{Context: parent, x: x}
}

// expiryCtx is the context of one call: parent's values, ended by its
// shared expiry.
type expiryCtx struct {
	context.Context // values only: it never ends
	x               *expiry
}

func (c *expiryCtx) Deadline() (time.Time, bool) { return c.x.at, true }
func (c *expiryCtx) Done() <-chan struct{}       { return c.x.ctx.Done() }
func (c *expiryCtx) Err() error                  { return c.x.ctx.Err() }

// AfterFunc registers f with the shared expiry. context.AfterFunc documents
// that it schedules through this method when a context has one, so a
// call's AfterFunc (store/redlock's fan-out makes one per node request)
// costs no goroutine.
func (c *expiryCtx) AfterFunc(f func()) func() bool { return context.AfterFunc(c.x.ctx, f) }

func (c *expiryCtx) String() string { return "dlock.callContext" }
