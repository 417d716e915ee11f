package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
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

// failingExtends is a store whose Extend calls for one name go unanswered.
type failingExtends struct {
	store.Store
	name string
}

func (s failingExtends) Extend(ctx context.Context, reqs []dlock.Request) []error {
	errs := s.Store.Extend(ctx, reqs)
	for i, req := range reqs {
		if req.Name == s.name {
			errs[i] = errReplyLost
		}
	}
	return errs
}

// TestObserverSeesALossAfterItsRenewals: the observer gets a lease's loss
// after every renewal event of that lease, even when it is slow on another
// lease's renewal reported first: "x" fails its renewals and runs out
// while the observer still blocks on the renewal of "a", renewed in the
// same batch.
func TestObserverSeesALossAfterItsRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var mu sync.Mutex
		var evs []dlock.Event
		blocked := false
		observe := func(ev dlock.Event) {
			mu.Lock()
			evs = append(evs, ev)
			block := !blocked && ev.Kind == dlock.EventRenew && ev.Name == "a"
			blocked = blocked || block
			mu.Unlock()
			if block {
				time.Sleep(2 * time.Second) // the bubble's clock: past x's validity
			}
		}
		st := failingExtends{Store: memory.New(), name: "x"}
		l := newLocker(t, st, dlock.WithTTL(time.Second), dlock.WithAutoRenew(), dlock.WithObserver(observe))
		start := time.Now()
		if _, err := l.Mutex("a").TryLock(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // x due just after a: one batch, a first
		x, err := l.Mutex("x").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-x.Done()
		time.Sleep(3 * time.Second)
		synctest.Wait() // every report delivered
		mu.Lock()
		defer mu.Unlock()
		checkLossLast(t, evs, start)
		if !errors.Is(x.Err(), dlock.ErrLeaseLost) {
			t.Errorf("x: Err() = %v, want ErrLeaseLost", x.Err())
		}
	})
}

// checkLossLast checks that evs report each lease's loss after all its
// renewals, and report renewals of "x" and its loss.
func checkLossLast(t *testing.T, evs []dlock.Event, start time.Time) {
	t.Helper()
	lost := make(map[uint64]bool)
	renewed := false
	for _, ev := range evs {
		switch {
		case ev.Kind == dlock.EventLeaseLost:
			lost[ev.Lease] = true
		case ev.Kind == dlock.EventRenew && lost[ev.Lease]:
			t.Errorf("renewal of %q (%s, sent at +%v) reported after its loss", ev.Name, ev.Result, ev.Start.Sub(start))
		case ev.Kind == dlock.EventRenew && ev.Name == "x":
			renewed = true
		}
	}
	if !renewed || len(lost) != 1 {
		t.Errorf("%d losses reported, renewals of x reported: %v; want x's loss after its failed renewals", len(lost), renewed)
	}
}
