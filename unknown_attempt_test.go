package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// lostAcquires wraps the memory store (in a synctest bubble): its first
// fail Acquire calls get no answer. The first of them reaches the store
// late, after the caller gave up on it, and the others never do; every
// later call goes through. arrived is closed once the late request was
// applied.
type lostAcquires struct {
	*memory.Store
	late    time.Duration // when the first request reaches the store, after its send
	answer  time.Duration // how long the caller waits for an answer that never comes
	fail    int
	arrived chan struct{}

	mu    sync.Mutex
	calls int
}

func newLostAcquires(fail int, late, answer time.Duration) *lostAcquires {
	return &lostAcquires{Store: memory.New(), late: late, answer: answer, fail: fail, arrived: make(chan struct{})}
}

func (s *lostAcquires) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	if n > s.fail {
		return s.Store.Acquire(ctx, req)
	}
	if n == 1 {
		go func() {
			time.Sleep(s.late)
			_, _ = s.Store.Acquire(context.Background(), req) // a repeat of a token that holds: it refreshes the hold to req.TTL
			close(s.arrived)
		}()
	}
	time.Sleep(s.answer)
	return store.Grant{}, errReplyLost
}

// extendable is a lease, or a multi-lease, that the test extends.
type extendable interface {
	Extend(ctx context.Context, ttl time.Duration) error
	TTL() time.Duration
	Err() error
}

// An acquire request whose answer never came can reach the store after the
// retry that got the grant, and after a longer Extend: a repeat of a token
// that holds, it sets the hold back to the acquire's TTL from then. The lease
// must not count the Extend beyond that (on 636d7c8 it said about 8.5s left,
// Err nil, while a second holder had the name), whichever acquire made it:
// TryLock (ask's retry), a wait's round that failed (Lock, Fair.Lock), or a
// Multi.
func TestLateAcquireCannotShortenACountedHold(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail int // the Acquire calls that get no answer
		take func(context.Context, *dlock.Locker) (extendable, error)
	}{
		{"Mutex.TryLock", 1, func(ctx context.Context, l *dlock.Locker) (extendable, error) { return l.Mutex("late").TryLock(ctx) }},
		{"Mutex.Lock", 2, func(ctx context.Context, l *dlock.Locker) (extendable, error) { return l.Mutex("late").Lock(ctx) }},
		{"Fair.Lock", 2, func(ctx context.Context, l *dlock.Locker) (extendable, error) { return l.Fair("late").Lock(ctx) }},
		{"Multi.Lock", 1, func(ctx context.Context, l *dlock.Locker) (extendable, error) {
			return l.Multi([]string{"late"}).Lock(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				s := newLostAcquires(tc.fail, 500*time.Millisecond, 10*time.Millisecond)
				l := newLocker(t, s, dlock.WithTTL(time.Second))
				lease, err := tc.take(ctx, l)
				if err != nil {
					t.Fatalf("%s = %v", tc.name, err)
				}
				if err := lease.Extend(ctx, 10*time.Second); err != nil {
					t.Fatalf("Extend(10s) = %v", err)
				}
				<-s.arrived // the hold now ends 1s after the late request
				time.Sleep(time.Second)
				other := newLocker(t, s.Store, dlock.WithTTL(time.Second))
				got, err := other.Mutex("late").TryLock(ctx)
				if err != nil {
					return // the store still holds the first lease: fine
				}
				if ttl := lease.TTL(); ttl > 0 || lease.Err() == nil {
					t.Errorf("a second holder (fence %d) got the name while the first lease says TTL %v, Err %v: it outlived its hold",
						got.Fence(), ttl, lease.Err())
				}
			})
		})
	}
}

// WithMaxHold counts from the first send of a request that may have made
// the hold: an acquire whose first answer was lost (the request applied at
// once, the answer given up on 100ms later) and whose retry got the grant
// is held for the max hold from the first send, not from the retry's (on
// 636d7c8 it was valid 100ms past grant + max hold).
func TestMaxHoldCountsFromTheFirstUnansweredRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := newLostAcquires(1, 0, 100*time.Millisecond)
		l := newLocker(t, s, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(), dlock.WithMaxHold(time.Second))
		start := time.Now()
		lease, err := l.Mutex("maxhold").TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock = %v", err)
		}
		<-s.arrived
		time.Sleep(time.Second - time.Since(start)) // the max hold from the first send
		if ttl, lerr := lease.TTL(), lease.Err(); ttl > 0 || !errors.Is(lerr, dlock.ErrMaxHold) {
			t.Errorf("at first send + max hold: TTL() = %v, Err() = %v; want 0 and an error wrapping ErrMaxHold", ttl, lerr)
		}
	})
}

// silentStore never answers an Acquire (unless only extends are silent) or
// an Extend: the call returns only when its ctx ends.
type silentStore struct {
	*memory.Store
	extendsOnly bool
}

func (s silentStore) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	if s.extendsOnly {
		return s.Store.Acquire(ctx, req)
	}
	<-ctx.Done()
	return store.Grant{}, ctx.Err()
}

func (s silentStore) Extend(ctx context.Context, reqs []dlock.Request) []error {
	<-ctx.Done()
	errs := make([]error, len(reqs))
	for i := range errs {
		errs[i] = ctx.Err()
	}
	return errs
}

// silentStore takes a multi-lock in one operation (name by name on the
// memory store, which is atomic enough for one caller), so that a
// MultiLease extends it with one ExtendMulti, which never answers.
func (s silentStore) AtomicMulti(names []string) bool { return true }

func (s silentStore) AcquireMulti(ctx context.Context, reqs []dlock.Request) (store.MultiGrant, error) {
	var mg store.MultiGrant
	for i, req := range reqs {
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			s.ReleaseMulti(ctx, reqs[:i])
			return store.MultiGrant{Refused: i, Refusal: g}, err
		}
		mg.Fences = append(mg.Fences, g.Fence)
	}
	mg.Acquired = true
	return mg, nil
}

func (s silentStore) ReleaseMulti(ctx context.Context, reqs []dlock.Request) []error {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = s.Release(ctx, req)
	}
	return errs
}

func (s silentStore) ExtendMulti(ctx context.Context, reqs []dlock.Request) []error {
	return s.Extend(ctx, reqs)
}

func (s silentStore) Leader(ctx context.Context, name string) (store.Leader, error) {
	<-ctx.Done()
	return store.Leader{}, ctx.Err()
}

// A call whose ctx never ends is still bounded by the op timeout
// (WithOpTimeout): TryLock, Extend, an atomic MultiLease's Extend and
// Election.Leader with context.Background() on a store that never answers
// return a StoreError (on 636d7c8 each blocked forever). TryLock takes up to three op timeouts: the attempt, the
// re-check by token, and the release behind it.
func TestCallsWithoutDeadlineAreBounded(t *testing.T) {
	const op = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		s     silentStore
		bound time.Duration
		call  func(*dlock.Locker) error
	}{
		{"TryLock", silentStore{Store: memory.New()}, 3*op + 3*op/32, func(l *dlock.Locker) error {
			_, err := l.Mutex("silent").TryLock(context.Background())
			return err
		}},
		{"Extend", silentStore{Store: memory.New(), extendsOnly: true}, op + op/32, func(l *dlock.Locker) error {
			lease, err := l.Mutex("silent").TryLock(context.Background())
			if err != nil {
				return fmt.Errorf("TryLock: %w", err)
			}
			return lease.Extend(context.Background(), 0)
		}},
		// MultiLease.Extend of an atomic Multi (one ExtendMulti) and
		// Election.Leader passed the caller's ctx as it was.
		{"MultiLease.Extend", silentStore{Store: memory.New(), extendsOnly: true}, op + op/32, func(l *dlock.Locker) error {
			ml, err := l.Multi([]string{"silent-a", "silent-b"}).TryLock(context.Background())
			if err != nil {
				return fmt.Errorf("Multi.TryLock: %w", err)
			}
			return ml.Extend(context.Background(), 0)
		}},
		{"Election.Leader", silentStore{Store: memory.New(), extendsOnly: true}, op + op/32, func(l *dlock.Locker) error {
			_, err := l.Election("silent").Leader(context.Background())
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLocker(t, tc.s, dlock.WithOpTimeout(op))
				done := make(chan error, 1)
				go func() { done <- tc.call(l) }()
				select {
				case err := <-done:
					var se *dlock.StoreError
					if !errors.As(err, &se) || !errors.Is(err, dlock.ErrUnavailable) {
						t.Errorf("%s(Background) on a silent store = %v, want a *StoreError", tc.name, err)
					}
				case <-time.After(tc.bound + time.Millisecond):
					t.Fatalf("%s(Background) on a silent store still blocked after %v", tc.name, tc.bound)
				}
			})
		})
	}
}
