package dlock

import (
	"context"
	"sync/atomic"
	"time"
)

// attemptContext returns the context of one store call made for ctx: it
// has ctx's values but not its end, which cuts the call short only grace
// later; a ctx without a deadline gives the call grace from now (up to
// grace/32 more, see expiries). The deadline also lets a client run a lone
// call on its own connection directly (valkey-go sends a call without one
// through its pipeline goroutines, so that it can be abandoned). The
// caller must call the returned cancel.
func (e *expiries) attemptContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		// ctx never ends (Background, WithoutCancel): nothing to outlive.
		return ctx, noCancel
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

// expiries hands out the deadlines of a Locker's store calls whose context
// never ends otherwise. The calls asked for in the same stretch of d/32
// share one expiry: one timer and one Done channel, where a
// context.WithDeadline per call made a timer per call (a third of the
// Locker's own CPU per Lock and Release, and more under contention for the
// runtime's timers).
type expiries struct {
	cur atomic.Pointer[expiry]
}

// An expiry is a deadline and the channel closed when it passes.
type expiry struct {
	at   time.Time
	done chan struct{}
}

// context returns a context with parent's values whose deadline is between
// d and d + d/32 from now, and that ends then; parent must never end
// (context.WithoutCancel). Nothing but the deadline ends it: the caller
// cancels nothing.
func (e *expiries) context(parent context.Context, d time.Duration) context.Context {
	now := time.Now()
	earliest, slack := now.Add(d), d/32
	x := e.cur.Load()
	if x == nil || x.at.Before(earliest) || x.at.Sub(earliest) > slack {
		x = &expiry{at: earliest.Add(slack), done: make(chan struct{})}
		time.AfterFunc(x.at.Sub(now), func() { close(x.done) })
		e.cur.Store(x)
	}
	return &expiryCtx{Context: parent, x: x}
}

// expiryCtx is the context of one call, ended by its shared expiry.
type expiryCtx struct {
	context.Context // values only: it never ends
	x               *expiry
}

func (c *expiryCtx) Deadline() (time.Time, bool) { return c.x.at, true }
func (c *expiryCtx) Done() <-chan struct{}       { return c.x.done }

func (c *expiryCtx) Err() error {
	select {
	case <-c.x.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (c *expiryCtx) String() string { return "dlock.callContext" }
