package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/dlock-dev/dlock/store"
)

// Watch implements [store.Store]. Releases wake watchers; expiry does not
// (holds expire lazily), so waiters rely on their timer at RetryAfter.
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	k := keyOf(name, mode)
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	set := s.watchers[k]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		s.watchers[k] = set
	}
	set[ch] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			set := s.watchers[k]
			delete(set, ch)
			if len(set) == 0 {
				delete(s.watchers, k)
			}
		})
	}
	return ch, stop, nil
}

// WatchGrant implements [store.GrantWatcher] for the fair lock: the channel
// receives the Grant when a release or expiry hands the lock to req.Token.
func (s *Store) WatchGrant(ctx context.Context, req store.Request) (<-chan store.Grant, func(), error) {
	if req.Mode != store.ModeFair {
		return nil, nil, fmt.Errorf("%w: memory store grant watch for mode %v", store.ErrNotSupported, req.Mode)
	}
	gk := grantKey{req.Name, req.Token}
	ch := make(chan store.Grant, 1)
	s.mu.Lock()
	s.grants[gk] = ch
	s.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.grants[gk] == ch {
				delete(s.grants, gk)
			}
		})
	}
	return ch, stop, nil
}

func (s *Store) wakeLocked(k key) {
	for ch := range s.watchers[k] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
