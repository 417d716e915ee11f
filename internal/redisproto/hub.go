package redisproto

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// A Hub wakes the waiters of one store. It keeps, per watched key, the
// channels of its waiters, and (when the Store's client has its
// invalidation hook) keeps the server tracking every watched key:
//
//   - a tracked read of the key makes the server push an invalidation the
//     next time the key is written, deleted or expires, by anyone;
//   - an invalidation wakes every waiter of the key; since tracking is
//     one-shot, the key is then tracked again;
//   - a tracked read that finds the key absent wakes the waiters too: the
//     lock was free at that moment, whatever happened before the read.
//
// Two kinds of tracked reads keep a key tracked. The waiters' own acquire
// attempts are tracked reads when the mode's acquire script reads the watch
// key (the mutex does): Acquire prefixes CLIENT CACHING YES to the script
// while the key has waiters, at no extra round trip, and the refusal itself
// arms the push. Otherwise, and as a fallback, the hub's goroutine makes a
// client-side-cached GET (CLIENT CACHING YES + GET): at once when a key gets
// its first waiter, and after an invalidation only if no tracked acquire
// has re-armed the key within rearmDelay (woken waiters normally retry at
// once).
//
// So between any release and the next tracked read either the release's
// invalidation or the read itself wakes the waiters: no wake-up is lost,
// and one push per change serves every waiter of the process. Without
// tracking, only Releases made through the Store wake its waiters.
type Hub struct {
	arm ArmFunc
	log *slog.Logger

	mu   sync.Mutex
	keys map[string]*watched
	// nkeys is len(keys), written under mu, read without it (Idle).
	nkeys   atomic.Int32
	pending map[string]time.Time // keys to arm, and when
	running bool

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// watched is one key with waiters.
type watched struct {
	chans map[chan struct{}]struct{}
	// selfArmed: the waiters' acquire attempts are tracked reads.
	selfArmed bool
	// stale: an invalidation came and no tracked read has followed yet.
	stale bool
	// gen counts the invalidations of the key. A tracked read clears stale
	// only if none came while it was on its way: the server may have run
	// the read, then pushed an invalidation for a write after it (which
	// ends that tracking) before the read's answer was handled.
	gen uint64
	// observers: channels also woken by every answered tracked read
	// (AddObserver).
	observers map[chan struct{}]struct{}
}

const (
	// armTimeout bounds one batch of tracked reads.
	armTimeout = 5 * time.Second
	// armRetry is the pause before arming again keys whose read failed.
	armRetry = 250 * time.Millisecond
	// rearmDelay is how long after an invalidation the hub leaves re-arming
	// a self-armed key to its woken waiters' acquire attempts.
	rearmDelay = 50 * time.Millisecond
)

func NewHub(arm ArmFunc, log *slog.Logger) *Hub {
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{
		arm:     arm,
		log:     log,
		keys:    make(map[string]*watched),
		pending: make(map[string]time.Time),
		kick:    make(chan struct{}, 1),
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}
}

// start starts the arming goroutine; stop waits for it.
func (h *Hub) Start() {
	h.mu.Lock()
	h.running = true
	h.mu.Unlock()
	go h.run()
}

func (h *Hub) Stop() {
	h.mu.Lock()
	running := h.running
	h.running = false
	h.mu.Unlock()
	h.cancel()
	if running {
		<-h.done
	}
}

// Running reports whether the hub keeps the server tracking watched keys
// (the Store's client has its invalidation hook).
func (h *Hub) Running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running
}

func (h *Hub) Add(key string, ch chan struct{}, selfArmed bool) {
	h.mu.Lock()
	w := h.keys[key]
	if w == nil {
		w = &watched{chans: make(map[chan struct{}]struct{}), selfArmed: selfArmed}
		h.keys[key] = w
		h.nkeys.Store(int32(len(h.keys)))
	}
	w.chans[ch] = struct{}{}
	arm := h.running && len(w.chans) == 1
	if arm {
		h.pending[key] = time.Time{} // now
	}
	h.mu.Unlock()
	if arm {
		h.poke()
	}
}

// AddObserver is Add for a waiter that wants every change of key, not
// only those that may free a lock (an election observer waits for a new
// leader): ch also receives each time a tracked read of key is answered,
// whatever it found, the first time just after this call. Between an
// invalidation and the read that tracks the key again the server pushes
// nothing; a caller that reads the lock after each wake-up so misses no
// change. Without tracking it is Add.
func (h *Hub) AddObserver(key string, ch chan struct{}) {
	h.Add(key, ch, false)
	h.mu.Lock()
	arm := h.running
	if w := h.keys[key]; arm && w != nil {
		if w.observers == nil {
			w.observers = make(map[chan struct{}]struct{})
		}
		w.observers[ch] = struct{}{}
		h.pending[key] = time.Time{} // now
	}
	h.mu.Unlock()
	if arm {
		h.poke()
	}
}

func (h *Hub) Remove(key string, ch chan struct{}) {
	h.mu.Lock()
	if w := h.keys[key]; w != nil {
		delete(w.chans, ch)
		delete(w.observers, ch)
		if len(w.chans) == 0 {
			delete(h.keys, key)
			h.nkeys.Store(int32(len(h.keys)))
		}
	}
	h.mu.Unlock()
}

// Idle reports whether no key has waiters: a Store then need not name the
// key it would ask Tracked or Wake about. A waiter added after the check
// is as one added after Wake.
func (h *Hub) Idle() bool { return h.nkeys.Load() == 0 }

// Tracked reports whether key has waiters whose acquire attempts should be
// tracked reads, and the key's generation to pass to Armed when the read
// is answered.
func (h *Hub) Tracked(key string) (gen uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.keys[key]
	if !h.running || w == nil || !w.selfArmed {
		return 0, false
	}
	return w.gen, true
}

// Armed records that a tracked read of key, sent at generation gen (see
// Tracked), was answered: the server tracks it again, so no re-arming read
// is needed, unless an invalidation came since the read was sent.
func (h *Hub) Armed(key string, gen uint64) {
	h.mu.Lock()
	if w := h.keys[key]; w != nil && w.gen == gen {
		w.stale = false
	}
	h.mu.Unlock()
}

func (h *Hub) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// notifyLocked wakes every waiter of key without blocking. h.mu is held.
func (h *Hub) notifyLocked(key string) {
	if w := h.keys[key]; w != nil {
		for ch := range w.chans {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// wake wakes the waiters of key (a release made through this Store).
func (h *Hub) Wake(key string) {
	h.mu.Lock()
	h.notifyLocked(key)
	h.mu.Unlock()
}

// Invalidate is the client's invalidation hook: the server pushed that keys
// changed. It must not block or call the client. keys nil means
// every key (a connection was lost or the server flushed).
func (h *Hub) Invalidate(keys []string) {
	h.mu.Lock()
	now := time.Now()
	mark := func(k string, w *watched) {
		h.notifyLocked(k)
		w.gen++
		due := now
		if w.selfArmed {
			w.stale = true
			due = now.Add(rearmDelay)
		}
		if _, ok := h.pending[k]; !ok {
			h.pending[k] = due
		}
	}
	if keys == nil {
		for k, w := range h.keys {
			mark(k, w)
		}
	} else {
		for _, k := range keys {
			if w := h.keys[k]; w != nil {
				mark(k, w)
			}
		}
	}
	arm := h.running && len(h.pending) > 0
	h.mu.Unlock()
	if arm {
		h.poke()
	}
}

// run arms tracking for pending keys until stop.
func (h *Hub) run() {
	defer close(h.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.kick:
		case <-timer.C:
		}
		if next := h.armPending(); !next.IsZero() {
			timer.Reset(time.Until(next))
		}
	}
}

// arm makes one batch of tracked reads of the pending keys that are due and
// still need one, and wakes the waiters of keys found absent. Keys whose read
// failed stay pending (their waiters keep to their timers and backoff
// meanwhile). It returns when it must run again (zero: when kicked).
func (h *Hub) armPending() (next time.Time) {
	now := time.Now()
	h.mu.Lock()
	keys := make([]string, 0, len(h.pending))
	var gens []uint64 // of keys, when their reads are sent
	for k, due := range h.pending {
		w := h.keys[k]
		switch {
		case w == nil:
			delete(h.pending, k)
		case due.After(now):
			if next.IsZero() || due.Before(next) {
				next = due
			}
		case !due.IsZero() && w.selfArmed && !w.stale:
			delete(h.pending, k) // a waiter's tracked acquire re-armed it
		default:
			delete(h.pending, k)
			keys = append(keys, k)
			gens = append(gens, w.gen)
		}
	}
	h.mu.Unlock()
	if len(keys) == 0 {
		return next
	}
	ctx, cancel := context.WithTimeout(h.ctx, armTimeout)
	defer cancel()
	res := h.arm(ctx, keys)
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, r := range res {
		err := r.Err
		k := keys[i]
		switch {
		case err == nil:
			if w := h.keys[k]; w != nil {
				if w.gen == gens[i] {
					w.stale = false
				}
				for ch := range w.observers {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			}
			if r.Absent {
				h.notifyLocked(k)
			}
		default:
			if h.ctx.Err() != nil {
				return time.Time{}
			}
			h.log.Debug("dlock: tracking a lock key failed", "key", k, "err", err)
			retry := time.Now().Add(armRetry)
			h.pending[k] = retry
			if next.IsZero() || retry.Before(next) {
				next = retry
			}
		}
	}
	return next
}

// ArmFunc makes a tracked read of each key (CLIENT CACHING YES and a read,
// on a connection with CLIENT TRACKING ON ... OPTIN whose invalidations
// reach Hub.Invalidate), one result per key.
type ArmFunc func(ctx context.Context, keys []string) []ArmResult

// ArmResult is the outcome of one tracked read: Absent when the key did not
// exist (the lock was free then), Err when the read failed.
type ArmResult struct {
	Absent bool
	Err    error
}
