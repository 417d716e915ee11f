package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// signallingStore is a real store that tells of every acquire request sent
// to it.
type signallingStore struct {
	store.Store
	acquires chan string
}

func (s signallingStore) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	g, err := s.Store.Acquire(ctx, req)
	select {
	case s.acquires <- req.Name:
	default:
	}
	return g, err
}

// events records what a Locker reports to its observer.
type events struct {
	mu  sync.Mutex
	evs []dlock.Event
	ch  chan dlock.Event
}

func newEvents() *events { return &events{ch: make(chan dlock.Event, 64)} }

func (e *events) observe(ev dlock.Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
	e.ch <- ev
}

// next waits for the next event of kind (skipping others) until a deadline.
func (e *events) next(t *testing.T, kind dlock.EventKind) dlock.Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no event of kind %d within 10s", kind)
		}
	}
}

type ctxKey struct{}

// TestObserverEventsCarryTheCall: the events of a lease carry what a
// tracing observer needs: the caller's context, one lease number from grant
// to release, when the call started, the attempts of an acquire and the
// refusal's held mode, and the result of Extend and Release.
func TestObserverEventsCarryTheCall(t *testing.T) {
	e := newEvents()
	st := signallingStore{Store: memory.New(), acquires: make(chan string, 64)}
	l := newLocker(t, st, dlock.WithObserver(e.observe), dlock.WithBackoff(time.Millisecond, 5*time.Millisecond))
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")

	held, err := l.RWMutex("obs-call").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acq := e.next(t, dlock.EventAcquire)
	if acq.Context == nil || acq.Context.Value(ctxKey{}) != "caller" {
		t.Errorf("acquire event Context = %v, want the caller's", acq.Context)
	}
	if acq.Lease == 0 || acq.Attempts != 1 || acq.Start.IsZero() || acq.Err != nil {
		t.Errorf("acquire event: Lease %d, Attempts %d, Start %v, Err %v; want a lease number, 1 attempt, a start, no error", acq.Lease, acq.Attempts, acq.Start, acq.Err)
	}

	// A refusal names the held mode.
	if _, err := l.Mutex("obs-call").TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
		t.Fatalf("TryLock of a read-held name = %v, want ErrLocked", err)
	}
	ref := e.next(t, dlock.EventAcquire)
	var le *dlock.LockedError
	if ref.Result != "locked" || ref.Lease != 0 || !errors.As(ref.Err, &le) || le.Held != dlock.ModeRead {
		t.Errorf("refused acquire event: Result %q, Lease %d, Err %v; want locked, 0, a *LockedError held by read", ref.Result, ref.Lease, ref.Err)
	}

	// A wait counts its attempts: the first is refused, a later one granted.
	for len(st.acquires) > 0 {
		<-st.acquires
	}
	got := make(chan error, 1)
	go func() {
		ls, err := l.Mutex("obs-call").Lock(ctx)
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	select { // the wait's first attempt was refused: the name is read-held
	case <-st.acquires:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter sent no acquire within 10s")
	}
	if err := held.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	ext := e.next(t, dlock.EventExtend)
	if ext.Lease != acq.Lease || ext.Result != "ok" || ext.Context.Value(ctxKey{}) != "caller" || ext.Start.IsZero() {
		t.Errorf("extend event: Lease %d (want %d), Result %q, Context %v, Start %v", ext.Lease, acq.Lease, ext.Result, ext.Context, ext.Start)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := held.Release(cancelled); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// The waiter may be granted, and release, before the first release's
	// event is out (the store released first): the three events in any
	// order, told apart by their leases.
	var rel, waited, rel2 dlock.Event
	deadline := time.After(10 * time.Second)
	for rel.Lease == 0 || waited.Lease == 0 || rel2.Lease == 0 {
		select {
		case ev := <-e.ch:
			switch {
			case ev.Kind == dlock.EventRelease && ev.Lease == acq.Lease:
				rel = ev
			case ev.Kind == dlock.EventAcquire:
				waited = ev
			case ev.Kind == dlock.EventRelease:
				rel2 = ev
			}
		case <-deadline:
			t.Fatalf("within 10s: release event %+v, waited acquire %+v, its release %+v; want all three", rel, waited, rel2)
		}
	}
	if rel.Result != "ok" || rel.Context != cancelled || rel.Start.Before(acq.Start) || rel.Duration <= 0 {
		t.Errorf("release event: Lease %d (want %d), Result %q, Context %v, Start %v, Duration %v", rel.Lease, acq.Lease, rel.Result, rel.Context, rel.Start, rel.Duration)
	}
	if waited.Result != "acquired" || waited.Attempts < 2 || !waited.Waited || waited.Lease == acq.Lease {
		t.Errorf("waited acquire event: Result %q, Attempts %d, Waited %v, Lease %d; want acquired after at least 2 attempts, a new lease", waited.Result, waited.Attempts, waited.Waited, waited.Lease)
	}
	if rel2.Lease != waited.Lease {
		t.Errorf("second release event: Lease %d, want %d", rel2.Lease, waited.Lease)
	}

	// A second Extend of a released lease reports lost.
	if err := held.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend after Release = %v, want ErrNotHeld", err)
	}
	if ext := e.next(t, dlock.EventExtend); ext.Result != "lost" || !errors.Is(ext.Err, dlock.ErrNotHeld) {
		t.Errorf("extend after release: Result %q, Err %v; want lost, ErrNotHeld", ext.Result, ext.Err)
	}
}

// TestObserverSeesLeasesEndedByClose: Close ends the leases it finds held,
// and each is reported as lost, so an observer's count of held leases (and
// a tracing observer's open hold span) ends with them.
func TestObserverSeesLeasesEndedByClose(t *testing.T) {
	e := newEvents()
	l, err := dlock.New(memory.New(), dlock.WithObserver(e.observe))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := l.Mutex("obs-close").TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	acq := e.next(t, dlock.EventAcquire)
	l.Close()
	lost := e.next(t, dlock.EventLeaseLost)
	if lost.Lease != acq.Lease || !errors.Is(lost.Err, dlock.ErrClosed) || lost.Context != nil {
		t.Errorf("loss event at Close: Lease %d (want %d), Err %v (want ErrClosed), Context %v (want nil)", lost.Lease, acq.Lease, lost.Err, lost.Context)
	}
	if !errors.Is(ls.Err(), dlock.ErrClosed) {
		t.Errorf("lease Err after Close = %v", ls.Err())
	}
}
