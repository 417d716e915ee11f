package dlockprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestObserve(t *testing.T) {
	m := dlockprom.New()
	var seen []dlock.Event
	unsub := m.Subscribe(func(ev dlock.Event) { seen = append(seen, ev) })
	for _, ev := range []dlock.Event{
		{Kind: dlock.EventAcquire, Mode: dlock.ModeMutex, Name: "a", Result: "acquired", Duration: time.Millisecond},
		{Kind: dlock.EventAcquire, Mode: dlock.ModeMutex, Name: "a", Result: "locked", Duration: time.Second, Waited: true},
		{Kind: dlock.EventAcquire, Mode: dlock.ModeRead, Name: "b", Result: "acquired"},
		{Kind: dlock.EventAcquire, Mode: dlock.ModeRead, Name: "b", Result: "error"},
		{Kind: dlock.EventAcquire, Mode: dlock.Mode(99), Name: "c", Result: "weird"},
		{Kind: dlock.EventRenew, Mode: dlock.ModeMutex, Name: "a", Result: "ok"},
		{Kind: dlock.EventRenew, Mode: dlock.ModeMutex, Name: "a", Result: "error"},
		{Kind: dlock.EventRelease, Mode: dlock.ModeMutex, Name: "a", Duration: 2 * time.Second},
		{Kind: dlock.EventLeaseLost, Mode: dlock.ModeRead, Name: "b", Duration: 3 * time.Second},
		// A lease Locker.Close ended: held no more, not counted as lost.
		{Kind: dlock.EventAcquire, Mode: dlock.ModeWrite, Name: "d", Result: "acquired"},
		{Kind: dlock.EventLeaseLost, Mode: dlock.ModeWrite, Name: "d", Duration: time.Second, Err: errors.Join(dlock.ErrLeaseLost, dlock.ErrClosed)},
	} {
		m.Observe(ev)
	}
	m.FencingRejected()
	m.StoreError("release")
	m.StoreError("bogus")
	unsub()
	m.Observe(dlock.Event{Kind: dlock.EventAcquire, Result: "acquired"}) // counted, not seen
	if len(seen) != 11 {
		t.Errorf("subscriber saw %d events, want 11 (none after unsubscribe)", len(seen))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	want := `
# HELP dlock_acquire_total Acquire attempts by pattern and result (acquired, locked, canceled, invalid, error).
# TYPE dlock_acquire_total counter
dlock_acquire_total{pattern="mutex",result="acquired"} 2
dlock_acquire_total{pattern="mutex",result="locked"} 1
dlock_acquire_total{pattern="read",result="acquired"} 1
dlock_acquire_total{pattern="read",result="error"} 1
dlock_acquire_total{pattern="other",result="other"} 1
# HELP dlock_leases_held Leases currently held by this process.
# TYPE dlock_leases_held gauge
dlock_leases_held 1
# HELP dlock_leases_lost_total Leases that ended before they were released.
# TYPE dlock_leases_lost_total counter
dlock_leases_lost_total 1
# HELP dlock_fencing_rejections_total Writes refused by a protected resource because their fence was stale.
# TYPE dlock_fencing_rejections_total counter
dlock_fencing_rejections_total 1
# HELP dlock_renewals_total Lease renewals by result (ok, lost, error).
# TYPE dlock_renewals_total counter
dlock_renewals_total{result="error"} 1
dlock_renewals_total{result="lost"} 0
dlock_renewals_total{result="ok"} 1
# HELP dlock_store_errors_total Failed store operations by operation (acquire, extend).
# TYPE dlock_store_errors_total counter
dlock_store_errors_total{op="acquire"} 1
dlock_store_errors_total{op="extend"} 1
dlock_store_errors_total{op="other"} 1
dlock_store_errors_total{op="release"} 1
`
	names := []string{"dlock_leases_held", "dlock_leases_lost_total", "dlock_fencing_rejections_total", "dlock_renewals_total", "dlock_store_errors_total"}
	// Only the non-zero acquire series are compared.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(filterZero(want)), names...); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"mutex", "acquired"}, 2}, {[]string{"mutex", "locked"}, 1}, {[]string{"read", "error"}, 1}, {[]string{"other", "other"}, 1}, {[]string{"fair", "acquired"}, 0},
	} {
		if got := counterValue(t, reg, "dlock_acquire_total", c.labels...); got != c.want {
			t.Errorf("dlock_acquire_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if n := histCount(t, reg, "dlock_wait_duration_seconds", "mutex"); n != 1 {
		t.Errorf("dlock_wait_duration_seconds{mutex} count = %d, want 1", n)
	}
	if n := histCount(t, reg, "dlock_hold_duration_seconds", "read"); n != 1 {
		t.Errorf("dlock_hold_duration_seconds{read} count = %d, want 1", n)
	}
}

// filterZero drops the acquire block, compared separately.
func filterZero(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, "dlock_acquire_total") {
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, lp := range m.GetLabel() {
				vals = append(vals, lp.GetValue())
			}
			if strings.Join(vals, ",") == strings.Join(labels, ",") {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func histCount(t *testing.T, reg *prometheus.Registry, name, pattern string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == pattern {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// TestWithLocker: a Locker's real events reach the collectors.
func TestWithLocker(t *testing.T) {
	m := dlockprom.New()
	l, err := dlock.New(memory.New(), dlock.WithObserver(m.Observe))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	ls, err := l.Mutex("job").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Mutex("job").TryLock(ctx); err == nil {
		t.Fatal("second TryLock succeeded")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	if got := counterValue(t, reg, "dlock_acquire_total", "mutex", "locked"); got != 1 {
		t.Errorf("locked = %v, want 1", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP dlock_leases_held Leases currently held by this process.\n# TYPE dlock_leases_held gauge\ndlock_leases_held 1\n"), "dlock_leases_held"); err != nil {
		t.Error(err)
	}
	ls.Release(ctx)
	if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP dlock_leases_held Leases currently held by this process.\n# TYPE dlock_leases_held gauge\ndlock_leases_held 0\n"), "dlock_leases_held"); err != nil {
		t.Error(err)
	}
	for _, line := range []string{"job"} {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, mm := range mf.GetMetric() {
				for _, lp := range mm.GetLabel() {
					if lp.GetValue() == line {
						t.Errorf("lock name %q used as a label value in %s", line, mf.GetName())
					}
				}
			}
		}
	}
}

// BenchmarkObserve is the cost an acquire and a release add to a Locker
// with the Prometheus observer.
func BenchmarkObserve(b *testing.B) {
	m := dlockprom.New()
	acq := dlock.Event{Kind: dlock.EventAcquire, Mode: dlock.ModeMutex, Name: "a", Result: "acquired", Duration: time.Millisecond}
	rel := dlock.Event{Kind: dlock.EventRelease, Mode: dlock.ModeMutex, Name: "a", Duration: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(acq)
		m.Observe(rel)
	}
}

// TestInputErrorIsNotAStoreError: a request the store refuses as bad input
// (a semaphore asked with another limit than its holders') is counted as
// result "invalid", neither as "error" nor in dlock_store_errors_total,
// which operators alert on.
func TestInputErrorIsNotAStoreError(t *testing.T) {
	m := dlockprom.New()
	l, err := dlock.New(memory.New(), dlock.WithObserver(m.Observe))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	ls, err := l.Semaphore("pool", 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	if _, err := l.Semaphore("pool", 5).TryAcquire(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("TryAcquire with another limit = %v, want ErrInvalid", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dlock_acquire_total", []string{"semaphore", "invalid"}, 1},
		{"dlock_acquire_total", []string{"semaphore", "error"}, 0},
		{"dlock_store_errors_total", []string{"acquire"}, 0},
	} {
		if got := counterValue(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
