package dlock_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/memory"
)

// lossRecorder records a Locker's events, and blocks for its stall on the
// report of the loss of the lease named slow.
type lossRecorder struct {
	stall time.Duration
	mu    sync.Mutex
	slow  string // the name whose loss report blocks
	evs   []dlock.Event
}

func (r *lossRecorder) observe(ev dlock.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	slow := r.slow
	r.mu.Unlock()
	if ev.Kind == dlock.EventLeaseLost && ev.Name == slow {
		time.Sleep(r.stall) // a slow observer: the bubble's clock moves on meanwhile
	}
}

// TestSlowLossReportDelaysNoOtherLease: an observer (or a log handler) that
// blocks 5s on the loss of one lease delays neither the renewals of 1 000
// other auto-renewed leases nor anyone's loss signals: none of them is lost
// meanwhile, each is renewed during the stall, and every event still
// reaches the observer.
func TestSlowLossReportDelaysNoOtherLease(t *testing.T) {
	for _, through := range []string{"observer", "logger"} {
		t.Run(through, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { slowLossReport(t, through) })
		})
	}
}

func slowLossReport(t *testing.T, through string) {
	const others, stall = 1000, 5 * time.Second
	ctx := context.Background()
	r := &lossRecorder{stall: stall, slow: "slow"}
	opts := []dlock.Option{dlock.WithTTL(time.Second), dlock.WithObserver(r.observe)}
	if through == "logger" {
		r.stall = 0 // only the log handler blocks
		opts = append(opts, dlock.WithLogger(slog.New(&lossLogger{r, stall})))
	}
	l := newLocker(t, memory.New(), opts...)
	leases := make([]*dlock.Lease, others)
	for i := range leases {
		ls, err := l.Mutex("other-"+strconv.Itoa(i), dlock.WithAutoRenew()).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = ls
	}
	slow, err := l.Mutex("slow").TryLock(ctx) // not renewed: lost after 1s
	if err != nil {
		t.Fatal(err)
	}
	<-slow.Done()
	lostAt := time.Now()
	time.Sleep(stall - 100*time.Millisecond) // the report of the loss still blocks
	for i, ls := range leases {
		if err := ls.Err(); err != nil {
			t.Fatalf("lease %d: Err() = %v during a slow loss report of another lease, want nil", i, err)
		}
	}
	time.Sleep(time.Second) // the stall is over
	synctest.Wait()         // and every report delivered
	checkRenewedDuringStall(t, r, lostAt, lostAt.Add(stall-100*time.Millisecond), others)
	for _, ls := range leases {
		if err := ls.Release(ctx); err != nil {
			t.Errorf("Release(%q) = %v, want nil", ls.Name(), err)
		}
	}
}

// checkRenewedDuringStall checks r's events: the one loss is slow's, and
// each of the others was renewed between from and to.
func checkRenewedDuringStall(t *testing.T, r *lossRecorder, from, to time.Time, others int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	renewed := make(map[string]bool)
	for _, ev := range r.evs {
		switch {
		case ev.Kind == dlock.EventLeaseLost && ev.Name != "slow":
			t.Errorf("lease %q lost (%v) during a slow loss report of another lease", ev.Name, ev.Err)
		case ev.Kind == dlock.EventRenew && ev.Result == "ok" && ev.Start.After(from) && ev.Start.Before(to):
			renewed[ev.Name] = true
		}
	}
	if len(renewed) != others {
		t.Errorf("%d of %d leases renewed during the slow loss report of another lease, want all", len(renewed), others)
	}
}

// lossLogger is a log handler that blocks for stall on the records of
// r.slow.
type lossLogger struct {
	r     *lossRecorder
	stall time.Duration
}

func (h *lossLogger) Enabled(context.Context, slog.Level) bool { return true }
func (h *lossLogger) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lossLogger) WithGroup(string) slog.Handler            { return h }

func (h *lossLogger) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "name" && a.Value.String() == h.r.slow {
			time.Sleep(h.stall) // a slow log handler
		}
		return true
	})
	return nil
}
