// Package dlockotel reports the events of a [dlock.Locker] as OpenTelemetry
// spans and metrics. It is fed by the library's dependency-free observer
// hook, like package dlockprom:
//
//	o := dlockotel.New() // the global tracer and meter providers
//	locker, err := dlock.New(store, dlock.WithObserver(o.Observe))
//
// Spans (see docs/metrics.md for their attributes):
//
//   - dlock.acquire: one per acquire call (TryLock, Lock, Do, ...), from the
//     call to its answer, waiting included, under the span of the caller's
//     context: its result, attempts, the wait, the fence of a grant or the
//     held mode of a refusal.
//   - dlock.hold: from the grant to the release or the loss of the lease,
//     with its fence; a lost lease ends it with an error status and a
//     dlock.lease_lost event. It is a sibling of the acquire span.
//   - dlock.extend and dlock.release: one per [dlock.Lease.Extend] and
//     [dlock.Lease.Release] call, under the caller's span (the hold span
//     when the caller has none) and linked to the hold span.
//   - dlock.renew: one per automatic renewal, under the hold span.
//
// Metrics are those of dlockprom under OpenTelemetry names that a
// Prometheus exporter turns into dlockprom's (dlock.acquire becomes
// dlock_acquire_total, dlock.hold.duration in seconds becomes
// dlock_hold_duration_seconds), with the same attributes: pattern, result
// and op, from small fixed sets. Lock names are span attributes, never
// metric attributes.
package dlockotel

import (
	"context"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/dlock-dev/dlock/dlockotel"

// Observer turns a Locker's events into spans and metrics. Create it with
// [New] and pass its Observe to [dlock.WithObserver]; one Observer may serve
// several Lockers. It is safe for concurrent use.
type Observer struct {
	tracer trace.Tracer
	m      instruments

	mu    sync.Mutex
	holds map[uint64]trace.Span // open dlock.hold spans by dlock.Event.Lease
	// early holds the ends of leases reported before their acquire: a
	// lease can be lost (its validity run out) before the acquire that
	// got it is reported. The acquire, which always follows, ends its
	// hold span at once.
	early map[uint64]holdEnd
}

type holdEnd struct {
	ev  dlock.Event
	end time.Time
}

type config struct {
	tp trace.TracerProvider
	mp metric.MeterProvider
}

// Option configures an Observer.
type Option func(*config)

// WithTracerProvider sets where spans go. Default: the global provider
// ([otel.GetTracerProvider]) at the time of New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithMeterProvider sets where metrics go. Default: the global provider
// ([otel.GetMeterProvider]) at the time of New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// New returns an Observer. It returns an error only when the meter provider
// refuses to create an instrument.
func New(opts ...Option) (*Observer, error) {
	c := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider()}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	o := &Observer{
		tracer: c.tp.Tracer(ScopeName),
		holds:  make(map[uint64]trace.Span),
		early:  make(map[uint64]holdEnd),
	}
	if err := o.m.init(c.mp.Meter(ScopeName)); err != nil {
		return nil, err
	}
	return o, nil
}

// Observe records ev. Pass it to [dlock.WithObserver]. It never blocks on
// anything but the providers' own span and metric recording.
func (o *Observer) Observe(ev dlock.Event) {
	ctx := ev.Context
	if ctx == nil {
		ctx = context.Background()
	}
	o.m.record(ctx, ev)
	switch ev.Kind {
	case dlock.EventAcquire:
		o.acquired(ctx, ev)
	case dlock.EventExtend:
		o.call(ctx, "dlock.extend", ev, false)
	case dlock.EventRenew:
		o.call(ctx, "dlock.renew", ev, true)
	case dlock.EventRelease:
		o.call(ctx, "dlock.release", ev, false)
		o.endHold(ev, ev.Start)
	case dlock.EventLeaseLost:
		o.endHold(ev, time.Now())
	}
}

// FencingRejected counts a write that the protected resource refused
// because its fence was lower than one it had already accepted.
func (o *Observer) FencingRejected(ctx context.Context) {
	o.m.fenceRejected.Add(ctx, 1)
}

// StoreError counts a failed store operation the Locker does not report
// itself (op should be one of acquire, extend, release, watch, ping).
func (o *Observer) StoreError(ctx context.Context, op string) {
	o.m.storeErrors.Add(ctx, 1, metric.WithAttributeSet(opSet(oneOf(op, storeOps[:]))))
}

// Holds returns how many dlock.hold spans are open: leases granted and not
// yet released or lost.
func (o *Observer) Holds() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.holds)
}
