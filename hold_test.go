package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// reqRecorder is the memory store, recording every acquire request that
// reaches it (the record fields the Locker sends).
type reqRecorder struct {
	*memory.Store
	mu   sync.Mutex
	reqs []dlock.Request
}

func (r *reqRecorder) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Store.Acquire(ctx, req)
}

func (r *reqRecorder) last() dlock.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[len(r.reqs)-1]
}

func (r *reqRecorder) sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

// Bad record options are an InvalidError naming the field, and nothing
// reaches the store; a min hold on a pattern that cannot keep one too.
func TestHoldOptionsRejected(t *testing.T) {
	rec := &reqRecorder{Store: memory.New()}
	l := newLocker(t, rec)
	ctx := context.Background()
	long := strings.Repeat("h", dlock.MaxHolderLen+1)
	tests := []struct {
		name  string
		take  func() error
		field string
	}{
		{"holder too long", func() error { _, err := l.Mutex("a", dlock.WithHolder(long)).TryLock(ctx); return err }, "holder"},
		{"holder not UTF-8", func() error { _, err := l.Mutex("a", dlock.WithHolder("\xff")).TryLock(ctx); return err }, "holder"},
		{"data too long", func() error {
			_, err := l.Mutex("a", dlock.WithHolderData(strings.Repeat("d", dlock.MaxHolderData+1))).TryLock(ctx)
			return err
		}, "data"},
		{"min hold negative", func() error { _, err := l.Mutex("a", dlock.WithMinHold(-time.Second)).TryLock(ctx); return err }, "minHold"},
		{"min hold over max hold", func() error {
			_, err := l.Mutex("a", dlock.WithMinHold(time.Minute), dlock.WithMaxHold(time.Second)).TryLock(ctx)
			return err
		}, "minHold"},
		{"min hold on reentrant", func() error { _, err := l.Reentrant("a", dlock.WithMinHold(time.Second)).TryLock(ctx); return err }, "minHold"},
		{"min hold on read", func() error { _, err := l.RWMutex("a", dlock.WithMinHold(time.Second)).TryRLock(ctx); return err }, "minHold"},
		{"min hold on write", func() error { _, err := l.RWMutex("a", dlock.WithMinHold(time.Second)).TryLock(ctx); return err }, "minHold"},
		{"min hold on semaphore", func() error {
			_, err := l.Semaphore("a", 2, dlock.WithMinHold(time.Second)).TryAcquire(ctx)
			return err
		}, "minHold"},
		{"data too long on a multi", func() error {
			_, err := l.Multi([]string{"a", "b"}, dlock.WithHolderData(strings.Repeat("d", dlock.MaxHolderData+1))).TryLock(ctx)
			return err
		}, "data"},
		{"acquire's min hold on read", func() error {
			_, err := l.Acquire(ctx, dlock.Request{Name: "a", Mode: dlock.ModeRead, MinHold: time.Second}, false)
			return err
		}, "minHold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.take()
			var ie *dlock.InvalidError
			if !errors.As(err, &ie) || ie.Field != tt.field {
				t.Errorf("%s: %v, want an InvalidError for %q", tt.name, err, tt.field)
			}
		})
	}
	if n := rec.sent(); n != 0 {
		t.Errorf("%d acquire requests reached the store, want none: %v", n, rec.reqs)
	}
	if _, err := dlock.New(memory.New(), dlock.WithMinHold(2*time.Second), dlock.WithMaxHold(time.Second)); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("New(WithMinHold(2s), WithMaxHold(1s)) = %v, want ErrInvalid", err)
	}
}

// The Locker sends the record fields only when set (a plain lock costs
// the store nothing more), the min hold only for the exclusive patterns
// that keep it, and the max hold to the store as well, with the drift
// margin and lock-delay that keep the store's bound past the lease's.
func TestHoldFieldsSent(t *testing.T) {
	rec := &reqRecorder{Store: memory.New()}
	l := newLocker(t, rec, dlock.WithTTL(time.Second))
	ctx := context.Background()
	take := func(m *dlock.Mutex) dlock.Request {
		t.Helper()
		ls, err := m.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return rec.last()
	}
	if r := take(l.Mutex("plain")); r.Holder != "" || r.Data != "" || r.MinHold != 0 || r.MaxHold != 0 {
		t.Errorf("a plain TryLock sent holder %q data %q minHold %v maxHold %v, want none", r.Holder, r.Data, r.MinHold, r.MaxHold)
	}
	r := take(l.Mutex("recorded", dlock.WithHolder("web-3/77"), dlock.WithHolderData(`{"job":"report"}`), dlock.WithMaxHold(10*time.Second)))
	if r.Holder != "web-3/77" || r.Data != `{"job":"report"}` {
		t.Errorf("sent holder %q data %q, want web-3/77 and the data", r.Holder, r.Data)
	}
	// The lease's bound plus the drift margin of 10s (0.01*10s + 2ms).
	if want := 10*time.Second + 102*time.Millisecond; r.MaxHold != want {
		t.Errorf("sent maxHold %v, want %v", r.MaxHold, want)
	}
	r = take(l.Mutex("delayed", dlock.WithMaxHold(10*time.Second), dlock.WithLockDelay(time.Second)))
	if want := 11*time.Second + 102*time.Millisecond; r.MaxHold != want {
		t.Errorf("with a lock-delay of 1s: sent maxHold %v, want %v", r.MaxHold, want)
	}
	ml, err := l.Multi([]string{"m1", "m2"}, dlock.WithMinHold(3*time.Second), dlock.WithHolder("h")).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := rec.last(); r.MinHold != 3*time.Second || r.Holder != "h" {
		t.Errorf("a Multi's name sent minHold %v holder %q, want 3s and h", r.MinHold, r.Holder)
	}
	_ = ml.Release(ctx)
	re, err := l.Reentrant("re", dlock.WithMaxHold(10*time.Second)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := rec.last(); r.MaxHold != 0 {
		t.Errorf("a reentrant lock sent maxHold %v, want none: its re-entries share the first grant's bound", r.MaxHold)
	}
	_ = re.Release(ctx)
	// Locker.Acquire takes the fields from the request.
	ls, err := l.Acquire(ctx, dlock.Request{Name: "low", Mode: dlock.ModeFair, Holder: "svc", Data: "d", MinHold: time.Second}, false)
	if err != nil {
		t.Fatal(err)
	}
	if r := rec.last(); r.Holder != "svc" || r.Data != "d" || r.MinHold != time.Second {
		t.Errorf("Acquire sent holder %q data %q minHold %v, want svc, d, 1s", r.Holder, r.Data, r.MinHold)
	}
	_ = ls.Forget()
}

func TestDefaultHolder(t *testing.T) {
	host, _ := os.Hostname()
	want := fmt.Sprintf("%s/%d", host, os.Getpid())
	if got := dlock.DefaultHolder(); got != want {
		t.Errorf("DefaultHolder() = %q, want %q", got, want)
	}
}

// noResume is a store without store.Resumer or store.ForceReleaser.
type noResume struct{ store.Store }

func TestResumeAndForceReleaseNeedTheStore(t *testing.T) {
	l := newLocker(t, noResume{memory.New()})
	ctx := context.Background()
	if _, err := l.Resume(ctx, dlock.Request{Name: "job", Token: "t0000000000000000000000000000000", Mode: dlock.ModeMutex}); !errors.Is(err, dlock.ErrNotSupported) {
		t.Errorf("Resume on a store without Resumer = %v, want ErrNotSupported", err)
	}
	if _, err := l.ForceRelease(ctx, "job"); !errors.Is(err, dlock.ErrNotSupported) {
		t.Errorf("ForceRelease on a store without ForceReleaser = %v, want ErrNotSupported", err)
	}
	for _, req := range []dlock.Request{{Name: "", Token: "t", Mode: dlock.ModeMutex}, {Name: "job", Mode: dlock.ModeMutex}, {Name: "job", Token: "t", Mode: dlock.Mode(42)}} {
		if _, err := newLocker(t, memory.New()).Resume(ctx, req); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Resume(%q, token %q, mode %v) = %v, want ErrInvalid", req.Name, req.Token, req.Mode, err)
		}
	}
}

// Events name who holds the lease.
func TestEventsCarryTheHolder(t *testing.T) {
	var mu sync.Mutex
	var evs []dlock.Event
	l := newLocker(t, memory.New(), dlock.WithObserver(func(ev dlock.Event) {
		mu.Lock()
		evs = append(evs, ev)
		mu.Unlock()
	}))
	ctx := context.Background()
	ls, err := l.Mutex("job", dlock.WithHolder("api-2/9")).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Extend(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(evs) != 3 {
		t.Fatalf("%d events, want acquire, extend, release: %v", len(evs), evs)
	}
	for _, ev := range evs {
		if ev.Owner != "api-2/9" {
			t.Errorf("event %v: Owner %q, want api-2/9", ev.Kind, ev.Owner)
		}
	}
}
