// Package memory is an in-process [dlock.Store]: the same semantics as the
// Valkey store without a network. It backs `dlock serve` when no Redis is
// given and serves as a fake in users' unit tests. Locks are local to the
// process; fences stay monotonic across restarts of the process through the
// same hybrid clock floor the Valkey store uses (see [Store]).
package memory

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

var (
	_ dlock.Store     = (*Store)(nil)
	_ dlock.Inspector = (*Store)(nil)
	_ dlock.Pinger    = (*Store)(nil)
)

// Store is an in-memory lock store. The zero value is not usable; call New.
// Expired holds are dropped lazily, on the next operation on their lock.
type Store struct {
	mu       sync.Mutex
	locks    map[string]*lock
	fences   map[string]int64
	watchers map[string]map[chan struct{}]struct{}
	closed   bool
}

type holder struct {
	token   string
	expires time.Time
	fence   int64
}

type lock struct {
	mode    dlock.Mode
	holders []*holder
}

// New returns an empty store.
func New() *Store {
	return &Store{
		locks:    make(map[string]*lock),
		fences:   make(map[string]int64),
		watchers: make(map[string]map[chan struct{}]struct{}),
	}
}

// nextFence issues the fence after last: max(last+1, wall-clock µs floor), so
// that a restarted process still issues fences above earlier ones.
func nextFence(last int64, now time.Time) int64 {
	return max(last+1, now.UnixMilli()*1000)
}

// live returns the lock on name with expired holders removed, or nil.
// Caller holds s.mu.
func (s *Store) live(name string, now time.Time) *lock {
	lk := s.locks[name]
	if lk == nil {
		return nil
	}
	kept := lk.holders[:0]
	for _, h := range lk.holders {
		if now.Before(h.expires) {
			kept = append(kept, h)
		}
	}
	lk.holders = kept
	if len(kept) == 0 {
		delete(s.locks, name)
		return nil
	}
	return lk
}

func (lk *lock) find(token string) *holder {
	for _, h := range lk.holders {
		if h.token == token {
			return h
		}
	}
	return nil
}

func (lk *lock) remaining(now time.Time) time.Duration {
	var d time.Duration
	for _, h := range lk.holders {
		d = max(d, h.expires.Sub(now))
	}
	return d
}

func checkMode(m dlock.Mode) error {
	if m != dlock.ModeMutex {
		return fmt.Errorf("%w: memory store mode %v", dlock.ErrNotSupported, m)
	}
	return nil
}

// Acquire implements [dlock.Store].
func (s *Store) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, error) {
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, err
	}
	if err := checkMode(req.Mode); err != nil {
		return dlock.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	lk := s.live(req.Name, now)
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.expires = now.Add(req.TTL)
			return dlock.Grant{Acquired: true, Fence: h.fence, Count: 1}, nil
		}
		return dlock.Grant{RetryAfter: lk.remaining(now)}, nil
	}
	f := nextFence(s.fences[req.Name], time.Now())
	s.fences[req.Name] = f
	s.locks[req.Name] = &lock{mode: req.Mode, holders: []*holder{{token: req.Token, expires: now.Add(req.TTL), fence: f}}}
	return dlock.Grant{Acquired: true, Fence: f, Count: 1}, nil
}

// Extend implements [dlock.Store].
func (s *Store) Extend(ctx context.Context, reqs []dlock.Request) []error {
	errs := make([]error, len(reqs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for i, req := range reqs {
		lk := s.live(req.Name, now)
		var h *holder
		if lk != nil {
			h = lk.find(req.Token)
		}
		if h == nil {
			errs[i] = dlock.ErrNotHeld
			continue
		}
		h.expires = now.Add(req.TTL)
	}
	return errs
}

// Release implements [dlock.Store].
func (s *Store) Release(ctx context.Context, req dlock.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lk := s.live(req.Name, time.Now())
	if lk == nil || lk.find(req.Token) == nil {
		return dlock.ErrNotHeld
	}
	kept := lk.holders[:0]
	for _, h := range lk.holders {
		if h.token != req.Token {
			kept = append(kept, h)
		}
	}
	lk.holders = kept
	if len(kept) == 0 {
		delete(s.locks, req.Name)
	}
	s.wakeLocked(req.Name)
	return nil
}

// Watch implements [dlock.Store]. Releases wake watchers; expiry does not
// (holds expire lazily), so waiters rely on their timer at RetryAfter.
func (s *Store) Watch(ctx context.Context, name string, mode dlock.Mode) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	set := s.watchers[name]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		s.watchers[name] = set
	}
	set[ch] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.mu.Lock()
			delete(set, ch)
			if len(set) == 0 && s.watchers[name] != nil && len(s.watchers[name]) == 0 {
				delete(s.watchers, name)
			}
			s.mu.Unlock()
		})
	}
	return ch, stop, nil
}

func (s *Store) wakeLocked(name string) {
	for ch := range s.watchers[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// State implements [dlock.Inspector].
func (s *Store) State(ctx context.Context, name string) (dlock.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stateLocked(name, time.Now()), nil
}

func (s *Store) stateLocked(name string, now time.Time) dlock.State {
	st := dlock.State{Name: name, Fence: s.fences[name]}
	if lk := s.live(name, now); lk != nil {
		st.Mode = lk.mode
		st.Holders = len(lk.holders)
		st.TTL = lk.remaining(now)
	}
	return st
}

// List implements [dlock.Inspector]: every lock with a holder, by name.
func (s *Store) List(ctx context.Context) ([]dlock.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	names := make([]string, 0, len(s.locks))
	for name := range s.locks {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []dlock.State
	for _, name := range names {
		if st := s.stateLocked(name, now); st.Holders > 0 {
			out = append(out, st)
		}
	}
	return out, nil
}

// Ping implements [dlock.Pinger]; the memory store is always reachable.
func (s *Store) Ping(ctx context.Context) error { return ctx.Err() }
