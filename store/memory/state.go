package memory

import (
	"slices"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// live returns the lock at k with expired holders and queue entries removed,
// a fair lock handed to its head waiter if it was free, or nil when nothing
// is left. Caller holds s.mu.
func (s *Store) live(k key, now time.Time) *lock {
	lk := s.locks[k]
	if lk == nil {
		return nil
	}
	lk.holders = slices.DeleteFunc(lk.holders, func(h *holder) bool { return !now.Before(h.expires) })
	lk.queue = slices.DeleteFunc(lk.queue, func(w *waiter) bool { return !now.Before(w.expires) })
	return s.settle(k, lk, now)
}

// settle hands a free fair lock to its head waiter and drops a lock with
// nothing left. Caller holds s.mu.
func (s *Store) settle(k key, lk *lock, now time.Time) *lock {
	if k.mode == store.ModeFair && len(lk.holders) == 0 && len(lk.queue) > 0 && !s.heldByOther(k, now) {
		w := lk.queue[0]
		lk.queue = lk.queue[1:]
		f := s.issue(k.name, now)
		// Held for the waiter until its queue deadline at most (the claim
		// window): alive, it claims its TTL by its next Acquire before its
		// place would have run out; dead, it keeps the others waiting no
		// longer than its place would have.
		until := now.Add(w.ttl)
		if w.expires.Before(until) {
			until = w.expires
		}
		if !until.After(now) {
			until = now.Add(time.Millisecond) // a place that ran out this instant: passed over
		}
		h := &holder{token: w.token, fence: f, record: newRecord(k.mode, w.holder, w.data, w.minHold, w.maxHold, now)}
		h.unclaimed = w.minHold // see claim
		h.extendTo(until)
		lk.holders = append(lk.holders, h)
		g := store.Grant{Acquired: true, Fence: f, Count: 1}
		if ch := s.grants[grantKey{k.name, w.token}]; ch != nil {
			select {
			case ch <- g:
			default:
			}
		} else {
			s.wakeLocked(k)
		}
	}
	if len(lk.holders) == 0 && len(lk.queue) == 0 {
		delete(s.locks, k)
		return nil
	}
	return lk
}

// heldMode is the mode of the lock's holders: ModeWrite for a read-write
// lock while its writer holds it.
func (lk *lock) heldMode() store.Mode {
	if lk.mode == store.ModeRead && lk.writer() != nil {
		return store.ModeWrite
	}
	return lk.mode
}

// otherHold reports the hold of a pattern other than k's on k.name, if
// any: its mode and remaining time. Caller holds s.mu.
func (s *Store) otherHold(k key, now time.Time) (store.Mode, time.Duration, bool) {
	for _, m := range modes {
		if m == k.mode {
			continue
		}
		if lk := s.live(key{m, k.name}, now); lk != nil && len(lk.holders) > 0 {
			return lk.heldMode(), lk.remaining(now), true
		}
	}
	return 0, 0, false
}

// freed wakes the waiters of every pattern of name once it may have become
// free, after serving a fair lock's queue (whose head is then the holder).
// Caller holds s.mu.
func (s *Store) freed(name string, now time.Time) {
	s.live(key{store.ModeFair, name}, now)
	for _, m := range modes {
		s.wakeLocked(key{m, name})
	}
}

func (s *Store) heldByOther(k key, now time.Time) bool {
	_, _, held := s.otherHold(k, now)
	return held
}

// find returns token's hold, or nil (a hold kept by its MinHold after its
// release has no token: it is nobody's).
func (lk *lock) find(token string) *holder {
	if token == "" {
		return nil
	}
	for _, h := range lk.holders {
		if h.token == token {
			return h
		}
	}
	return nil
}

func (lk *lock) writer() *holder {
	for _, h := range lk.holders {
		if h.write {
			return h
		}
	}
	return nil
}

func (lk *lock) queued(token string) int {
	return slices.IndexFunc(lk.queue, func(w *waiter) bool { return w.token == token })
}

// enqueue adds token to the queue or refreshes its entry, and returns its
// position.
func (lk *lock) enqueue(req store.Request, now time.Time) int {
	if i := lk.queued(req.Token); i >= 0 {
		lk.queue[i].expires = now.Add(req.QueueTTL)
		lk.queue[i].ttl = req.TTL
		return i
	}
	lk.ticket++
	lk.queue = append(lk.queue, &waiter{token: req.Token, ticket: lk.ticket, expires: now.Add(req.QueueTTL), ttl: req.TTL,
		holder: req.Holder, data: req.Data, minHold: req.MinHold, maxHold: req.MaxHold})
	return len(lk.queue) - 1
}

func (lk *lock) dequeue(token string) bool {
	if i := lk.queued(token); i >= 0 {
		lk.queue = slices.Delete(lk.queue, i, i+1)
		return true
	}
	return false
}

// remaining is the longest remaining hold.
func (lk *lock) remaining(now time.Time) time.Duration {
	var d time.Duration
	for _, h := range lk.holders {
		d = max(d, h.expires.Sub(now))
	}
	return d
}

// soonest is the shortest remaining hold.
func (lk *lock) soonest(now time.Time) time.Duration {
	d := time.Duration(-1)
	for _, h := range lk.holders {
		if r := h.expires.Sub(now); d < 0 || r < d {
			d = r
		}
	}
	return max(d, 0)
}

// extendAll pushes the expiry of every holder out to at least t, capped
// by the hold's MaxHold (a reentrant hold has one expiry and one record).
func (lk *lock) extendAll(t time.Time) {
	for _, h := range lk.holders {
		if c := h.capped(t); h.expires.Before(c) {
			h.expires = c
		}
	}
}
