package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// modes lists the keys' modes in the order State looks at them.
var modes = []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeFair, store.ModeSemaphore, store.ModeElection}

// State implements [store.Inspector]. When several patterns of name have
// state, it describes the first in mode order.
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	if err := ctx.Err(); err != nil {
		return store.State{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, m := range modes {
		if lk := s.live(key{m, name}, now); lk != nil {
			return s.stateLocked(name, lk, now), nil
		}
	}
	return store.State{Name: name, Fence: s.fences[name]}, nil
}

func (s *Store) stateLocked(name string, lk *lock, now time.Time) store.State {
	st := store.State{
		Name:    name,
		Mode:    lk.mode,
		Holders: len(lk.holders),
		TTL:     lk.remaining(now),
		Fence:   s.fences[name],
		Queue:   len(lk.queue),
		Limit:   lk.limit,
		Owners:  lk.owners(),
	}
	switch {
	case lk.mode == store.ModeReentrant && len(lk.holders) > 0:
		st.Holders = 1 // one owner, however many acquisitions
	case lk.mode == store.ModeRead && lk.writer() != nil:
		st.Mode = store.ModeWrite
	}
	return st
}

// List implements [store.Inspector]: every lock with a holder or a waiter,
// by name and mode.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	keys := make([]key, 0, len(s.locks))
	for k := range s.locks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.mode, b.mode))
	})
	var out []store.State
	for _, k := range keys {
		if lk := s.live(k, now); lk != nil {
			out = append(out, s.stateLocked(k.name, lk, now))
		}
	}
	return out, nil
}

// Ping implements [store.Pinger]; the memory store is always reachable.
func (s *Store) Ping(ctx context.Context) error { return ctx.Err() }

// SupportsLockDelay implements [store.LockDelayer]: holds end at their TTL
// by the process's clock.
func (s *Store) SupportsLockDelay() bool { return true }
