// Package dlockprom exports the events of a [dlock.Locker] as Prometheus
// metrics. It is fed by the library's dependency-free observer hook:
//
//	m := dlockprom.New()
//	prometheus.MustRegister(m)
//	locker, err := dlock.New(store, dlock.WithObserver(m.Observe))
//
// The metric names are fixed (see docs/metrics.md). Lock names are never
// label values, so the number of series stays bounded however many locks
// an application takes: pattern is one of the [dlock.Mode] names, result,
// op and the other labels come from small fixed sets.
package dlockprom

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/dlock-dev/dlock"
	"github.com/prometheus/client_golang/prometheus"
)

var _ prometheus.Collector = (*Metrics)(nil)

// Metrics is a set of Prometheus collectors fed by [Metrics.Observe]. It is
// itself a [prometheus.Collector]: register it once. A Metrics is safe for
// concurrent use.
type Metrics struct {
	acquires      *prometheus.CounterVec
	acquireDur    *prometheus.HistogramVec
	waitDur       *prometheus.HistogramVec
	holdDur       *prometheus.HistogramVec
	renewals      *prometheus.CounterVec
	leasesLost    prometheus.Counter
	fenceRejected prometheus.Counter
	storeErrors   *prometheus.CounterVec
	leasesHeld    prometheus.Gauge

	// The expected series, resolved once: Observe looks labels up only for
	// values outside the fixed sets ("other").
	byPattern   [len(patterns)]patternSeries
	renewBy     [len(renewResults)]prometheus.Counter
	acquireErrs prometheus.Counter
	extendErrs  prometheus.Counter

	mu   sync.Mutex // serialises changes of subs
	subs atomic.Pointer[[]subscriber]
	next int
}

type patternSeries struct {
	acquires                     [len(acquireResults)]prometheus.Counter
	acquireDur, waitDur, holdDur prometheus.Observer
}

type subscriber struct {
	id int
	fn func(dlock.Event)
}

// Buckets of the duration histograms, in seconds: from 100µs (an acquire on
// a local store) to about 5 minutes (the longest holds and waits).
var (
	latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	holdBuckets    = []float64{.001, .01, .1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

// New returns a Metrics with every series at zero.
func New() *Metrics {
	m := &Metrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlock_acquire_total",
			Help: "Acquire attempts by pattern and result (acquired, locked, canceled, invalid, error).",
		}, []string{"pattern", "result"}),
		acquireDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dlock_acquire_duration_seconds",
			Help:    "Time an acquire took, waiting included, by pattern.",
			Buckets: latencyBuckets,
		}, []string{"pattern"}),
		waitDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dlock_wait_duration_seconds",
			Help:    "Time spent by acquires that waited for the lock, by pattern.",
			Buckets: holdBuckets,
		}, []string{"pattern"}),
		holdDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dlock_hold_duration_seconds",
			Help:    "How long leases were held until released or lost, by pattern.",
			Buckets: holdBuckets,
		}, []string{"pattern"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlock_renewals_total",
			Help: "Lease renewals by result (ok, lost, error).",
		}, []string{"result"}),
		leasesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlock_leases_lost_total",
			Help: "Leases that ended before they were released.",
		}),
		fenceRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlock_fencing_rejections_total",
			Help: "Writes refused by a protected resource because their fence was stale.",
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlock_store_errors_total",
			Help: "Failed store operations by operation (acquire, extend).",
		}, []string{"op"}),
		leasesHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dlock_leases_held",
			Help: "Leases currently held by this process.",
		}),
	}
	// Export the expected series from the start, so that rate() and
	// alerts see zeros rather than absent series.
	for i, p := range patterns {
		ps := &m.byPattern[i]
		for j, r := range acquireResults {
			ps.acquires[j] = m.acquires.WithLabelValues(p, r)
		}
		ps.acquireDur = m.acquireDur.WithLabelValues(p)
		ps.waitDur = m.waitDur.WithLabelValues(p)
		ps.holdDur = m.holdDur.WithLabelValues(p)
	}
	for i, r := range renewResults {
		m.renewBy[i] = m.renewals.WithLabelValues(r)
	}
	m.acquireErrs = m.storeErrors.WithLabelValues("acquire")
	m.extendErrs = m.storeErrors.WithLabelValues("extend")
	return m
}

var (
	patterns       = [...]string{"mutex", "reentrant", "read", "write", "fair", "semaphore"}
	acquireResults = [...]string{"acquired", "locked", "canceled", "invalid", "error"}
	renewResults   = [...]string{"ok", "lost", "error"}
)

const (
	resultAcquired = 0 // index in acquireResults
	resultError    = 4
	renewError     = 2 // index in renewResults
)

// indexOf returns the index of s in set, or -1: values outside the set are
// counted as "other", so label values stay bounded whatever a Locker reports.
func indexOf(s string, set []string) int {
	for i, v := range set {
		if s == v {
			return i
		}
	}
	return -1
}

// observeKnown records ev through the resolved series and reports whether
// it could: false when a label value is outside its fixed set.
func (m *Metrics) observeKnown(ev dlock.Event) bool {
	p := indexOf(ev.Mode.String(), patterns[:])
	if p < 0 {
		return false
	}
	ps := &m.byPattern[p]
	switch ev.Kind {
	case dlock.EventAcquire:
		r := indexOf(ev.Result, acquireResults[:])
		if r < 0 {
			return false
		}
		ps.acquires[r].Inc()
		ps.acquireDur.Observe(ev.Duration.Seconds())
		if ev.Waited {
			ps.waitDur.Observe(ev.Duration.Seconds())
		}
		switch r {
		case resultAcquired:
			m.leasesHeld.Inc()
		case resultError:
			m.acquireErrs.Inc()
		}
	case dlock.EventRelease:
		m.leasesHeld.Dec()
		ps.holdDur.Observe(ev.Duration.Seconds())
	case dlock.EventLeaseLost:
		m.leasesHeld.Dec()
		if !closedByLocker(ev) {
			m.leasesLost.Inc()
		}
		ps.holdDur.Observe(ev.Duration.Seconds())
	case dlock.EventRenew:
		r := indexOf(ev.Result, renewResults[:])
		if r < 0 {
			return false
		}
		m.renewBy[r].Inc()
		if r == renewError {
			m.extendErrs.Inc()
		}
	}
	return true
}

// observeOther records ev by label lookups, with "other" for the values
// outside the fixed sets.
func (m *Metrics) observeOther(ev dlock.Event) {
	pattern := oneOf(ev.Mode.String(), patterns[:])
	switch ev.Kind {
	case dlock.EventAcquire:
		result := oneOf(ev.Result, acquireResults[:])
		m.acquires.WithLabelValues(pattern, result).Inc()
		m.acquireDur.WithLabelValues(pattern).Observe(ev.Duration.Seconds())
		if ev.Waited {
			m.waitDur.WithLabelValues(pattern).Observe(ev.Duration.Seconds())
		}
		switch result {
		case "acquired":
			m.leasesHeld.Inc()
		case "error":
			m.storeErrors.WithLabelValues("acquire").Inc()
		}
	case dlock.EventRelease:
		m.leasesHeld.Dec()
		m.holdDur.WithLabelValues(pattern).Observe(ev.Duration.Seconds())
	case dlock.EventLeaseLost:
		m.leasesHeld.Dec()
		if !closedByLocker(ev) {
			m.leasesLost.Inc()
		}
		m.holdDur.WithLabelValues(pattern).Observe(ev.Duration.Seconds())
	case dlock.EventRenew:
		result := oneOf(ev.Result, renewResults[:])
		m.renewals.WithLabelValues(result).Inc()
		if result == "error" {
			m.storeErrors.WithLabelValues("extend").Inc()
		}
	}
}

// closedByLocker reports whether ev is the end of a lease that Locker.Close
// found held: the program shut down, which is not a loss to alert on.
func closedByLocker(ev dlock.Event) bool { return errors.Is(ev.Err, dlock.ErrClosed) }

// oneOf returns s when it is in set, else "other".
func oneOf(s string, set []string) string {
	if indexOf(s, set) < 0 {
		return "other"
	}
	return s
}

// Observe records ev. Pass it to [dlock.WithObserver]. It never blocks
// (subscribers must not either; see [Metrics.Subscribe]).
func (m *Metrics) Observe(ev dlock.Event) {
	if !m.observeKnown(ev) {
		m.observeOther(ev)
	}
	if subs := m.subs.Load(); subs != nil {
		for _, s := range *subs {
			s.fn(ev)
		}
	}
}

// Subscribe registers fn to be called with every event after it is
// recorded, for live views such as the dlock dashboard. fn runs on the
// goroutine that reported the event and must not block. The returned
// function removes the subscription.
func (m *Metrics) Subscribe(fn func(dlock.Event)) (unsubscribe func()) {
	m.mu.Lock()
	id := m.next
	m.next++
	m.setSubs(func(old []subscriber) []subscriber { return append(old, subscriber{id, fn}) })
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			m.setSubs(func(old []subscriber) []subscriber {
				var kept []subscriber
				for _, s := range old {
					if s.id != id {
						kept = append(kept, s)
					}
				}
				return kept
			})
			m.mu.Unlock()
		})
	}
}

// setSubs replaces the subscriber list by a changed copy. Caller holds m.mu.
func (m *Metrics) setSubs(change func([]subscriber) []subscriber) {
	var old []subscriber
	if p := m.subs.Load(); p != nil {
		old = append(old, *p...)
	}
	next := change(old)
	m.subs.Store(&next)
}

// FencingRejected counts a write that the protected resource refused
// because its fence was lower than one it had already accepted. Call it
// from the resource's fence check (package fence does).
func (m *Metrics) FencingRejected() { m.fenceRejected.Inc() }

// StoreError counts a failed store operation the Locker does not report
// itself (op should be one of acquire, extend, release, watch, ping).
func (m *Metrics) StoreError(op string) {
	m.storeErrors.WithLabelValues(oneOf(op, []string{"acquire", "extend", "release", "watch", "ping"})).Inc()
}

// Describe implements [prometheus.Collector].
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements [prometheus.Collector].
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquires, m.acquireDur, m.waitDur, m.holdDur, m.renewals,
		m.leasesLost, m.fenceRejected, m.storeErrors, m.leasesHeld}
}
