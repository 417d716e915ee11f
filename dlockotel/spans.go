package dlockotel

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-dev/dlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span attribute keys (docs/metrics.md).
const (
	keyName       = attribute.Key("dlock.name")
	keyMode       = attribute.Key("dlock.mode")
	keyResult     = attribute.Key("dlock.result")
	keyFence      = attribute.Key("dlock.fence")
	keyAttempts   = attribute.Key("dlock.attempts")
	keyWaited     = attribute.Key("dlock.waited")
	keyWaitMs     = attribute.Key("dlock.wait_ms")
	keyHeldMode   = attribute.Key("dlock.held_mode")
	keyRetryAfter = attribute.Key("dlock.retry_after_ms")
	keyEnd        = attribute.Key("dlock.end")
	keyOwner      = attribute.Key("dlock.owner")
)

// acquired records the dlock.acquire span of ev and, for a grant, opens
// the lease's dlock.hold span beside it.
func (o *Observer) acquired(ctx context.Context, ev dlock.Event) {
	start := ev.Start
	if start.IsZero() {
		start = time.Now().Add(-ev.Duration)
	}
	end := start.Add(ev.Duration)
	attrs := []attribute.KeyValue{
		keyName.String(ev.Name),
		keyMode.String(ev.Mode.String()),
		keyResult.String(ev.Result),
		keyAttempts.Int(ev.Attempts),
		keyWaited.Bool(ev.Waited),
	}
	if ev.Waited {
		attrs = append(attrs, keyWaitMs.Int64(ev.Duration.Milliseconds()))
	}
	var le *dlock.LockedError
	switch {
	case ev.Result == "acquired":
		attrs = append(attrs, keyFence.Int64(ev.Fence))
	case errors.As(ev.Err, &le):
		attrs = append(attrs, keyHeldMode.String(le.Held.String()))
		if le.RetryAfter > 0 {
			attrs = append(attrs, keyRetryAfter.Int64(le.RetryAfter.Milliseconds()))
		}
	}
	_, span := o.tracer.Start(ctx, "dlock.acquire", trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if ev.Result == "error" || ev.Result == "invalid" {
		span.SetStatus(codes.Error, errText(ev.Err, "acquire failed"))
	}
	span.End(trace.WithTimestamp(end))
	if ev.Result != "acquired" || ev.Lease == 0 {
		return
	}
	holdAttrs := []attribute.KeyValue{
		keyName.String(ev.Name),
		keyMode.String(ev.Mode.String()),
		keyFence.Int64(ev.Fence),
	}
	if ev.Owner != "" {
		holdAttrs = append(holdAttrs, keyOwner.String(ev.Owner)) // who holds it (dlock.WithHolder)
	}
	_, hold := o.tracer.Start(ctx, "dlock.hold", trace.WithTimestamp(end), trace.WithAttributes(holdAttrs...))
	o.mu.Lock()
	early, ended := o.early[ev.Lease]
	if ended {
		delete(o.early, ev.Lease)
	} else {
		o.holds[ev.Lease] = hold
	}
	o.mu.Unlock()
	if ended {
		finishHold(hold, early.ev, later(early.end, end))
	}
}

// hold returns the open dlock.hold span of lease, or nil.
func (o *Observer) hold(lease uint64) trace.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.holds[lease]
}

// call records the span of an extend, renewal or release: under the
// caller's span, or the hold span when the caller has none (or, with
// underHold, always), and linked to the hold span.
func (o *Observer) call(ctx context.Context, name string, ev dlock.Event, underHold bool) {
	hold := o.hold(ev.Lease)
	opts := []trace.SpanStartOption{trace.WithAttributes(
		keyName.String(ev.Name),
		keyMode.String(ev.Mode.String()),
		keyResult.String(ev.Result),
		keyFence.Int64(ev.Fence),
	)}
	if !ev.Start.IsZero() {
		opts = append(opts, trace.WithTimestamp(ev.Start))
	}
	if hold != nil {
		if underHold || !trace.SpanContextFromContext(ctx).IsValid() {
			ctx = trace.ContextWithSpan(ctx, hold)
		} else {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: hold.SpanContext()}))
		}
	}
	_, span := o.tracer.Start(ctx, name, opts...)
	if ev.Result == "error" || ev.Result == "lost" {
		span.SetStatus(codes.Error, errText(ev.Err, name+" "+ev.Result))
	}
	end := time.Now()
	if !ev.Start.IsZero() && ev.Kind != dlock.EventRelease {
		end = ev.Start.Add(ev.Duration)
	}
	span.End(trace.WithTimestamp(end))
}

// endHold ends the dlock.hold span of ev's lease at end: released, or lost
// with an error status.
func (o *Observer) endHold(ev dlock.Event, end time.Time) {
	o.mu.Lock()
	hold, ok := o.holds[ev.Lease]
	delete(o.holds, ev.Lease)
	if !ok && ev.Lease != 0 {
		o.early[ev.Lease] = holdEnd{ev, end} // its acquire is still to come
	}
	o.mu.Unlock()
	if ok {
		finishHold(hold, ev, end)
	}
}

// finishHold ends hold, the dlock.hold span of ev's lease, at end.
func finishHold(hold trace.Span, ev dlock.Event, end time.Time) {
	switch {
	case ev.Kind == dlock.EventLeaseLost && errors.Is(ev.Err, dlock.ErrClosed):
		hold.SetAttributes(keyEnd.String("closed")) // Locker.Close: a shutdown
	case ev.Kind == dlock.EventLeaseLost:
		msg := errText(ev.Err, "lease lost")
		hold.SetAttributes(keyEnd.String("lost"))
		hold.AddEvent("dlock.lease_lost", trace.WithTimestamp(end), trace.WithAttributes(attribute.String("error", msg)))
		hold.SetStatus(codes.Error, msg)
	default:
		hold.SetAttributes(keyEnd.String("released"))
	}
	hold.End(trace.WithTimestamp(end))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func errText(err error, fallback string) string {
	if err == nil {
		return fallback
	}
	return err.Error()
}
