package dlock

import (
	"context"
	"time"
)

// attemptContext returns the context of one store call made for ctx: it
// has ctx's values but not its end, which cuts the call short only grace
// later. The caller must call the returned cancel.
func attemptContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		// ctx never ends (Background, WithoutCancel): nothing to outlive.
		return ctx, func() {}
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
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
