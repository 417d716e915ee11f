package valkey

import (
	"context"
	"fmt"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// cacheTTL is how long valkey-go keeps a tracked read in its local cache; a
// later read within it costs no round trip.
const cacheTTL = time.Minute

// armKeys is the Store's redisproto.ArmFunc: client-side-cached GETs
// (CLIENT CACHING YES + GET) on valkey-go's shared connections, whose
// invalidations reach the hub through the client's hook.
func (s *Store) armKeys(ctx context.Context, keys []string) []redisproto.ArmResult {
	c := s.client
	cmds := make([]vk.CacheableTTL, len(keys))
	for i, k := range keys {
		cmds[i] = vk.CT(c.B().Get().Key(k).Cache(), cacheTTL)
	}
	out := make([]redisproto.ArmResult, len(keys))
	for i, r := range c.DoMultiCache(ctx, cmds...) {
		err := r.Error()
		switch {
		case vk.IsValkeyNil(err):
			out[i].Absent = true
		case err != nil:
			out[i].Err = err
		}
	}
	return out
}

// invalidated is the client's invalidation hook; keys nil means every key (a
// connection was lost or the server flushed).
func (s *Store) invalidated(msgs []vk.ValkeyMessage) {
	var keys []string
	if msgs != nil {
		keys = make([]string, 0, len(msgs))
		for _, m := range msgs {
			if k, err := m.ToString(); err == nil {
				keys = append(keys, k)
			}
		}
	}
	s.hub.Invalidate(keys)
}

// Watch implements [store.Store]. The channel receives when the lock may have
// become free: released through this Store, or (Stores made by Dial or Open)
// its key written, deleted or expired on the server. A holder's renewal
// also wakes waiters, who then find the lock still held. Expiry is noticed
// when the server expires the key, which Redis does within about 100ms
// of the deadline for a few keys. For [store.ModeElection] the channel
// also receives when a leader is elected (the election's gate key is
// written), and each time the server tracks the gate anew (after Watch and
// after each change), so that an observer who reads the leader after each
// wake-up misses no change. ctx is not used: Watch does not block.
// It returns an error wrapping [store.ErrNotSupported] for a mode this store
// does not run, and for ModeElection on a Store without server pushes
// (made by [New]), on which a new leader would go unseen: callers then poll
// (dlock.Election.Observe every maximum backoff).
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	o, err := s.ops(mode)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkName(name); err != nil {
		return nil, nil, err
	}
	if mode == store.ModeElection && !s.hub.Running() {
		return nil, nil, fmt.Errorf("%w: valkey election watch without server pushes (a Store made by New)", store.ErrNotSupported)
	}
	ch := make(chan struct{}, 1)
	key, main := o.WatchKey(s.l, name), s.key(name)
	if mode == store.ModeElection {
		// An observer waits for a new leader, not for a free name: it is
		// also woken whenever the server tracks the gate anew.
		s.hub.AddObserver(key, ch)
	} else {
		s.hub.Add(key, ch, s.trackAcquire && o.ReadsWatchKey)
	}
	if key != main {
		// A name is one lock: whatever pattern holds it, its main key
		// changes when the name frees.
		s.hub.Add(main, ch, false)
	}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.hub.Remove(key, ch)
			if key != main {
				s.hub.Remove(main, ch)
			}
		})
	}, nil
}
