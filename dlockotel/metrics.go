package dlockotel

import (
	"context"
	"errors"

	"github.com/dlock-dev/dlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The attribute values are those of dlockprom: values outside these sets
// are recorded as "other", so the number of series stays bounded.
var (
	patterns       = [...]string{"mutex", "reentrant", "read", "write", "fair", "semaphore"}
	acquireResults = [...]string{"acquired", "locked", "canceled", "invalid", "error"}
	renewResults   = [...]string{"ok", "lost", "error"}
	storeOps       = [...]string{"acquire", "extend", "release", "watch", "ping"}
)

// Bucket boundaries of the duration histograms, in seconds: dlockprom's.
var (
	latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	holdBuckets    = []float64{.001, .01, .1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

// instruments are the OpenTelemetry counterparts of dlockprom's series.
type instruments struct {
	acquires      metric.Int64Counter     // dlock.acquire {pattern, result}
	acquireDur    metric.Float64Histogram // dlock.acquire.duration {pattern}
	waitDur       metric.Float64Histogram // dlock.wait.duration {pattern}
	holdDur       metric.Float64Histogram // dlock.hold.duration {pattern}
	renewals      metric.Int64Counter     // dlock.renewals {result}
	leasesLost    metric.Int64Counter     // dlock.leases.lost
	fenceRejected metric.Int64Counter     // dlock.fencing.rejections
	storeErrors   metric.Int64Counter     // dlock.store.errors {op}
	leasesHeld    metric.Int64UpDownCounter
}

func (m *instruments) init(meter metric.Meter) error {
	var errs [9]error
	m.acquires, errs[0] = meter.Int64Counter("dlock.acquire", metric.WithUnit("{acquire}"),
		metric.WithDescription("Acquire attempts by pattern and result (acquired, locked, canceled, error)."))
	m.acquireDur, errs[1] = meter.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time an acquire took, waiting included, by pattern."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	m.waitDur, errs[2] = meter.Float64Histogram("dlock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time spent by acquires that waited for the lock, by pattern."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	m.holdDur, errs[3] = meter.Float64Histogram("dlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long leases were held until released or lost, by pattern."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	m.renewals, errs[4] = meter.Int64Counter("dlock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals by result (ok, lost, error)."))
	m.leasesLost, errs[5] = meter.Int64Counter("dlock.leases.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases that ended before they were released."))
	m.fenceRejected, errs[6] = meter.Int64Counter("dlock.fencing.rejections", metric.WithUnit("{write}"),
		metric.WithDescription("Writes refused by a protected resource because their fence was stale."))
	m.storeErrors, errs[7] = meter.Int64Counter("dlock.store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed store operations by operation (acquire, extend)."))
	m.leasesHeld, errs[8] = meter.Int64UpDownCounter("dlock.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases currently held by this process."))
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// record counts ev as dlockprom's Observe does.
func (m *instruments) record(ctx context.Context, ev dlock.Event) {
	pattern := metric.WithAttributeSet(patternSet(oneOf(ev.Mode.String(), patterns[:])))
	switch ev.Kind {
	case dlock.EventAcquire:
		result := oneOf(ev.Result, acquireResults[:])
		m.acquires.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
			attribute.String("pattern", oneOf(ev.Mode.String(), patterns[:])), attribute.String("result", result))))
		m.acquireDur.Record(ctx, ev.Duration.Seconds(), pattern)
		if ev.Waited {
			m.waitDur.Record(ctx, ev.Duration.Seconds(), pattern)
		}
		switch result {
		case "acquired":
			m.leasesHeld.Add(ctx, 1)
		case "error":
			m.storeErrors.Add(ctx, 1, metric.WithAttributeSet(opSet("acquire")))
		}
	case dlock.EventRelease:
		m.leasesHeld.Add(ctx, -1)
		m.holdDur.Record(ctx, ev.Duration.Seconds(), pattern)
	case dlock.EventLeaseLost:
		m.leasesHeld.Add(ctx, -1)
		if !errors.Is(ev.Err, dlock.ErrClosed) { // Locker.Close: a shutdown, not a loss
			m.leasesLost.Add(ctx, 1)
		}
		m.holdDur.Record(ctx, ev.Duration.Seconds(), pattern)
	case dlock.EventRenew:
		result := oneOf(ev.Result, renewResults[:])
		m.renewals.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(attribute.String("result", result))))
		if result == "error" {
			m.storeErrors.Add(ctx, 1, metric.WithAttributeSet(opSet("extend")))
		}
	}
}

func patternSet(p string) attribute.Set { return attribute.NewSet(attribute.String("pattern", p)) }
func opSet(op string) attribute.Set     { return attribute.NewSet(attribute.String("op", op)) }

// oneOf returns s when it is in set, else "other".
func oneOf(s string, set []string) string {
	for _, v := range set {
		if s == v {
			return s
		}
	}
	return "other"
}
