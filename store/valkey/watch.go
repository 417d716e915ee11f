package valkey

import (
	"context"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
)

// The hub wakes the waiters of one Store. It keeps, per watched key, the
// channels of its waiters, and (when the Store's client has its
// invalidation hook) keeps the server tracking every watched key:
//
//   - a tracked read of the key (a client-side-cached GET, which sends
//     CLIENT CACHING YES + GET) makes the server push an invalidation the
//     next time the key is written, deleted or expires, by anyone;
//   - an invalidation wakes every waiter of the key and re-arms it with
//     another tracked read, since tracking is one-shot;
//   - a tracked read that finds the key absent wakes the waiters too: the
//     lock was free at that moment, whatever happened before the read.
//
// So between any release and the next tracked read either the release's
// invalidation or the read itself wakes the waiters: no wake-up is lost,
// and one read per change serves every waiter of the process. Reads run on
// one goroutine, batched. Without tracking, only Releases made through the
// Store wake its waiters.
type hub struct {
	s *Store

	mu      sync.Mutex
	keys    map[string]map[chan struct{}]struct{}
	pending map[string]struct{} // keys to arm
	running bool

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

const (
	// armTimeout bounds one batch of tracked reads.
	armTimeout = 5 * time.Second
	// armRetry is the pause before arming again keys whose read failed.
	armRetry = 250 * time.Millisecond
	// cacheTTL is how long valkey-go keeps a tracked read in its local
	// cache; a later read within it costs no round trip.
	cacheTTL = time.Minute
)

func newHub(s *Store) *hub {
	ctx, cancel := context.WithCancel(context.Background())
	return &hub{
		s:       s,
		keys:    make(map[string]map[chan struct{}]struct{}),
		pending: make(map[string]struct{}),
		kick:    make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
}

// start starts the arming goroutine; stop waits for it.
func (h *hub) start() {
	h.mu.Lock()
	h.running = true
	h.mu.Unlock()
	go h.run()
}

func (h *hub) stop() {
	h.mu.Lock()
	running := h.running
	h.running = false
	h.mu.Unlock()
	h.cancel()
	if running {
		<-h.done
	}
}

// Watch implements [dlock.Store]. The channel receives when the lock may have
// become free: released through this Store, or (Stores made by Dial or Open)
// its key written, deleted or expired on the server. A holder's renewal
// also wakes waiters, who then find the lock still held. Expiry is noticed
// when the server expires the key, which Redis does within about 100ms
// of the deadline for a few keys. ctx is not used: Watch does not block.
// It returns an error wrapping [dlock.ErrNotSupported] for a mode this store
// does not run.
func (s *Store) Watch(ctx context.Context, name string, mode dlock.Mode) (<-chan struct{}, func(), error) {
	o, err := s.ops(mode)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkName(name); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	key := o.watchKey(s, name)
	s.hub.add(key, ch)
	var once sync.Once
	return ch, func() { once.Do(func() { s.hub.remove(key, ch) }) }, nil
}

func (h *hub) add(key string, ch chan struct{}) {
	h.mu.Lock()
	set := h.keys[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.keys[key] = set
	}
	set[ch] = struct{}{}
	arm := h.running && len(set) == 1
	if arm {
		h.pending[key] = struct{}{}
	}
	h.mu.Unlock()
	if arm {
		h.poke()
	}
}

func (h *hub) remove(key string, ch chan struct{}) {
	h.mu.Lock()
	if set := h.keys[key]; set != nil {
		delete(set, ch)
		if len(set) == 0 {
			delete(h.keys, key)
		}
	}
	h.mu.Unlock()
}

func (h *hub) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// notifyLocked wakes every waiter of key without blocking. h.mu is held.
func (h *hub) notifyLocked(key string) {
	for ch := range h.keys[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// wake wakes the waiters of key (a release made through this Store).
func (h *hub) wake(key string) {
	h.mu.Lock()
	h.notifyLocked(key)
	h.mu.Unlock()
}

// invalidate is the client's invalidation hook. It runs on valkey-go's
// reading goroutine and must not block or call the client. keys nil means
// every key (a connection was lost or the server flushed).
func (h *hub) invalidate(keys []vk.ValkeyMessage) {
	h.mu.Lock()
	if keys == nil {
		for k := range h.keys {
			h.notifyLocked(k)
			h.pending[k] = struct{}{}
		}
	} else {
		for _, m := range keys {
			k, err := m.ToString()
			if err != nil || h.keys[k] == nil {
				continue
			}
			h.notifyLocked(k)
			h.pending[k] = struct{}{}
		}
	}
	arm := h.running && len(h.pending) > 0
	h.mu.Unlock()
	if arm {
		h.poke()
	}
}

// run arms tracking for pending keys until stop.
func (h *hub) run() {
	defer close(h.done)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.kick:
		case <-retry.C:
		}
		if failed := h.arm(); failed {
			retry.Reset(armRetry)
		}
	}
}

// arm makes one batch of tracked reads of the pending keys that still have
// waiters, and wakes the waiters of keys found absent. Keys whose read
// failed stay pending (their waiters keep to their timers and backoff
// meanwhile); arm reports whether there were any.
func (h *hub) arm() (failed bool) {
	h.mu.Lock()
	keys := make([]string, 0, len(h.pending))
	for k := range h.pending {
		if h.keys[k] != nil {
			keys = append(keys, k)
		}
		delete(h.pending, k)
	}
	h.mu.Unlock()
	if len(keys) == 0 {
		return false
	}
	c := h.s.client
	cmds := make([]vk.CacheableTTL, len(keys))
	for i, k := range keys {
		cmds[i] = vk.CT(c.B().Get().Key(k).Cache(), cacheTTL)
	}
	ctx, cancel := context.WithTimeout(h.ctx, armTimeout)
	defer cancel()
	res := c.DoMultiCache(ctx, cmds...)
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, r := range res {
		err := r.Error()
		switch {
		case vk.IsValkeyNil(err):
			h.notifyLocked(keys[i])
		case err != nil:
			if h.ctx.Err() != nil {
				return false
			}
			h.s.cfg.logger.Debug("dlock: tracking a lock key failed", "key", keys[i], "err", err)
			h.pending[keys[i]] = struct{}{}
			failed = true
		}
	}
	return failed
}
