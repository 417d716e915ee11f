package dlock

import (
	"context"
	"time"
)

// attemptContext returns the context of one store call made for ctx: it
// has ctx's values but not its end, which cuts the call short only grace
// later; a ctx without a deadline gives the call grace from now. The
// deadline also lets a client run a lone call on its own connection
// directly (valkey-go sends a call without one through its pipeline
// goroutines, so that it can be abandoned). The caller must call the
// returned cancel.
func attemptContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		// ctx never ends (Background, WithoutCancel): nothing to outlive.
		return ctx, func() {}
	}
	dl, ok := ctx.Deadline()
	if !ok {
		// Ended by cancellation only: the call's own deadline, grace from
		// now, comes no later than grace after ctx could end.
		return context.WithDeadline(context.WithoutCancel(ctx), time.Now().Add(grace))
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
