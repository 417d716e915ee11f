package dlock

import (
	"context"
	"sync"
	"time"
)

// waitHandoff waits for a mutex as a registered waiter, on a store that
// hands a released mutex straight to one of them ([store.GrantWatcher] for
// [ModeMutex]): the release that finds a live registration sets the lock
// key to that waiter's token and tells it, so the waiter wakes holding the
// lock and one release wakes one waiter. The registration is a queue entry
// of QueueTTL, refreshed every third of it, and dropped when ctx ends. The
// mutex stays unfair: a lock that falls free by expiry goes to whoever asks
// first, registered or not, so every waiter also retries at the holder's
// expiry.
//
// ok is false when the store cannot hand the mutex over; the caller then
// waits as before, by Watch. Only a Locker's own fresh tokens wait this way
// (waitGrant trusts a grant pushed for them from the start).
//
// A mutex that was refused to a waiter of this Locker lately (see
// hotNames) is waited for this way from the first attempt, which then
// registers the caller at once; otherwise the first attempt is a plain one,
// so an uncontended lock costs no grant watch.
func (l *Locker) waitHandoff(ctx context.Context, c *config, req Request) (ls *Lease, err error, ok bool) { //nolint:revive // error-return: ok says whether the handoff path decided at all, whatever err
	req.Queue = true
	req.QueueTTL = c.queueTTLOrDefault()
	since := time.Now()
	w := newWaiter(l.store, c)
	defer w.close()
	if !w.handOver(ctx, req) {
		return nil, nil, false
	}
	ls, err = l.waitGrant(ctx, c, req, since, w)
	return ls, err, true
}

// hotWindow is how long a mutex counts as contended after a waiter of the
// Locker was refused it; shorter than the Valkey store's subscription
// linger, so the grant watch of a contended mutex is usually ready.
const hotWindow = 5 * time.Second

// hotCap bounds the names remembered.
const hotCap = 1024

// hotNames remembers the mutexes that a Locker's waiters were refused
// lately. The zero value is ready to use.
type hotNames struct {
	mu sync.Mutex
	m  map[string]time.Time // name -> last refusal
}

func (h *hotNames) has(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.m[name]
	return ok && time.Since(t) < hotWindow
}

func (h *hotNames) mark(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.m == nil {
		h.m = make(map[string]time.Time)
	}
	if _, ok := h.m[name]; !ok && len(h.m) >= hotCap {
		for k, t := range h.m {
			if now.Sub(t) >= hotWindow {
				delete(h.m, k)
			}
		}
		if len(h.m) >= hotCap {
			return
		}
	}
	h.m[name] = now
}
