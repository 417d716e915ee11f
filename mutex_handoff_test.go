package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// handoffStore is a memory store that hands a released mutex to a
// registered waiter, as the Valkey store does: an Acquire with Queue by a
// token that watches for its grant registers it, and a release by the
// holder grants the lock to the first registered waiter and sends it the
// grant. It logs the calls it gets.
type handoffStore struct {
	*memory.Store
	mu       sync.Mutex
	watchers map[string]chan store.Grant // by token
	queued   []dlock.Request
	log      []string
}

func newHandoffStore() *handoffStore {
	return &handoffStore{Store: memory.New(), watchers: make(map[string]chan store.Grant)}
}

func (s *handoffStore) record(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

func (s *handoffStore) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

func (s *handoffStore) registered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queued)
}

func (s *handoffStore) WatchGrant(ctx context.Context, req dlock.Request) (<-chan store.Grant, func(), error) {
	if req.Mode != dlock.ModeMutex {
		return nil, nil, dlock.ErrNotSupported
	}
	ch := make(chan store.Grant, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record("watch")
	s.watchers[req.Token] = ch
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.watchers[req.Token] == ch {
			delete(s.watchers, req.Token)
		}
	}, nil
}

func (s *handoffStore) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record("acquire queue=%v", req.Queue)
	g, err := s.Store.Acquire(ctx, req)
	if err == nil && !g.Acquired && req.Queue && s.watchers[req.Token] != nil &&
		!slices.ContainsFunc(s.queued, func(w dlock.Request) bool { return w.Token == req.Token }) {
		s.queued = append(s.queued, req)
	}
	return g, err
}

func (s *handoffStore) Release(ctx context.Context, req dlock.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record("release")
	if i := slices.IndexFunc(s.queued, func(w dlock.Request) bool { return w.Token == req.Token }); i >= 0 {
		s.queued = slices.Delete(s.queued, i, i+1)
		return nil
	}
	if err := s.Store.Release(ctx, req); err != nil || len(s.queued) == 0 {
		return err
	}
	w := s.queued[0]
	s.queued = s.queued[1:]
	w.Queue = false
	g, err := s.Store.Acquire(ctx, w)
	if err != nil || !g.Acquired {
		return fmt.Errorf("handoff: %+v, %v", g, err)
	}
	if ch := s.watchers[w.Token]; ch != nil {
		ch <- g
	}
	return nil
}

// TestMutexLockWaitsForHandoff checks the Locker's side of the mutex
// handoff: a refused Lock registers (watching for its grant first) and
// returns holding the lock when the release hands it over, with no
// further Acquire; a Lock on a mutex contended lately registers at its
// first attempt; a waiter that gives up drops its registration.
func TestMutexLockWaitsForHandoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHandoffStore()
		ctx := t.Context()
		l := newLocker(t, s, dlock.WithTTL(time.Minute))
		holder, err := l.Mutex("m").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for round, want := range [][]string{
			// A plain attempt first, then a watch and a registering one.
			{"acquire queue=false", "watch", "acquire queue=true"},
			// Contended lately: the first attempt registers.
			{"watch", "acquire queue=true"},
		} {
			start := len(s.calls())
			type result struct {
				ls  *dlock.Lease
				err error
			}
			res := make(chan result, 1)
			go func() {
				ls, err := l.Mutex("m").Lock(ctx)
				res <- result{ls, err}
			}()
			synctest.Wait()
			if got := s.calls()[start:]; !slices.Equal(got, want) {
				t.Errorf("round %d: store calls of a refused Lock = %q, want %q", round, got, want)
			}
			if n := s.registered(); n != 1 {
				t.Fatalf("round %d: %d registered waiters, want 1", round, n)
			}
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-res
			if r.err != nil {
				t.Fatalf("round %d: Lock = %v", round, r.err)
			}
			if got := s.calls()[start+len(want):]; !slices.Equal(got, []string{"release"}) {
				t.Errorf("round %d: store calls from the release to the grant = %q, want only the release", round, got)
			}
			holder = r.ls
		}

		// A waiter that gives up leaves no registration.
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := l.Mutex("m").Lock(wctx)
			done <- err
		}()
		synctest.Wait()
		if n := s.registered(); n != 1 {
			t.Fatalf("%d registered waiters, want 1", n)
		}
		cancel()
		if err := <-done; !errors.Is(err, dlock.ErrLocked) || !errors.Is(err, context.Canceled) {
			t.Errorf("Lock after cancel = %v, want ErrLocked and context.Canceled", err)
		}
		if n := s.registered(); n != 0 {
			t.Errorf("%d registered waiters after the waiter gave up, want 0", n)
		}
		holder.Release(ctx)
	})
}

// TestMutexCallerTokenNeverRegisters: Locker.Acquire with a caller's token
// waits without registering, since a waiter whose store calls fail goes on
// under a fresh token; and TryLock never registers.
func TestMutexCallerTokenNeverRegisters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHandoffStore()
		ctx := t.Context()
		l := newLocker(t, s, dlock.WithTTL(time.Minute))
		holder, err := l.Mutex("m").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Mutex("m").TryLock(ctx); !errors.Is(err, dlock.ErrLocked) {
			t.Fatalf("TryLock = %v, want ErrLocked", err)
		}
		done := make(chan error, 1)
		go func() {
			ls, err := l.Acquire(ctx, dlock.Request{Name: "m", Token: "caller-token-0123456789abcdef", Mode: dlock.ModeMutex}, true)
			if err == nil {
				if ls.Token() != "caller-token-0123456789abcdef" {
					err = fmt.Errorf("lease token %q, want the caller's", ls.Token())
				}
				ls.Release(ctx)
			}
			done <- err
		}()
		synctest.Wait()
		if slices.Contains(s.calls(), "watch") || s.registered() != 0 {
			t.Errorf("store calls %q, %d registered; want no watch for a grant, no registration", s.calls(), s.registered())
		}
		holder.Release(ctx)
		if err := <-done; err != nil {
			t.Errorf("Acquire = %v", err)
		}
	})
}
