package memory

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
)

func invalid(field, reason string) error {
	return &store.InvalidError{Field: field, Reason: reason}
}

func check(req store.Request) error {
	if req.Mode > store.ModeElection {
		return fmt.Errorf("%w: memory store mode %v", store.ErrNotSupported, req.Mode)
	}
	if req.Name == "" {
		return invalid("name", "must not be empty")
	}
	if req.Token == "" {
		return invalid("token", "must not be empty")
	}
	if req.TTL <= 0 {
		return invalid("ttl", "must be positive")
	}
	if req.Mode == store.ModeSemaphore && req.Limit < 1 {
		return invalid("limit", "must be at least 1")
	}
	if req.Queue && req.QueueTTL <= 0 {
		return invalid("queueTTL", "must be positive")
	}
	return nil
}

// Acquire implements [store.Store].
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	if err := ctx.Err(); err != nil {
		return store.Grant{}, err
	}
	if err := check(req); err != nil {
		return store.Grant{}, err
	}
	if err := store.ValidHold(req); err != nil {
		return store.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := store.FenceFloor(ctx); ok {
		s.proposed = f
		defer func() { s.proposed = 0 }()
	}
	now := time.Now()
	k := keyOf(req.Name, req.Mode)
	lk := s.live(k, now)
	if lk == nil || lk.find(req.Token) == nil {
		if held, left, ok := s.otherHold(k, now); ok {
			// A name is one lock: refused, keeping a queued caller's place.
			g := store.Grant{RetryAfter: left, Held: held}
			if req.Queue && (req.Mode == store.ModeFair || req.Mode == store.ModeWrite) {
				if lk == nil {
					lk = &lock{mode: k.mode}
					s.locks[k] = lk
				}
				g.Position = lk.enqueue(req, now)
			}
			return g, nil
		}
	}
	switch req.Mode {
	case store.ModeReentrant:
		return s.acquireReentrant(k, lk, req, now), nil
	case store.ModeRead:
		return s.acquireRead(k, lk, req, now), nil
	case store.ModeWrite:
		return s.acquireWrite(k, lk, req, now)
	case store.ModeFair:
		return s.acquireFair(k, lk, req, now), nil
	case store.ModeSemaphore:
		return s.acquireSemaphore(k, lk, req, now)
	}
	// The mutex, and the election (a mutex that keeps the leader's value).
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.extendTo(now.Add(req.TTL))
			return store.Grant{Acquired: true, Fence: h.fence, Count: 1}, nil
		}
		return store.Grant{RetryAfter: lk.remaining(now), Held: k.mode}, nil
	}
	f := s.issue(req.Name, now)
	h := newHolder(req, now, f)
	if k.mode == store.ModeElection {
		h.value = req.Value
		s.wakeLocked(k) // observers see the new leader
	}
	s.locks[k] = &lock{mode: k.mode, holders: []*holder{h}}
	return store.Grant{Acquired: true, Fence: f, Count: 1}, nil
}

// Leader implements [store.Elector].
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	if err := ctx.Err(); err != nil {
		return store.Leader{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	lk := s.live(key{store.ModeElection, name}, now)
	if lk == nil || len(lk.holders) == 0 {
		return store.Leader{}, store.ErrNoLeader
	}
	h := lk.holders[0]
	return store.Leader{Value: h.value, Term: h.fence, TTL: h.expires.Sub(now)}, nil
}

// acquireReentrant grants the owner another acquisition under its own
// token; the hold keeps its first fence and one expiry.
func (s *Store) acquireReentrant(k key, lk *lock, req store.Request, now time.Time) store.Grant {
	owner := cmp.Or(req.Owner, req.Token)
	if lk == nil {
		f := s.issue(req.Name, now)
		s.locks[k] = &lock{mode: k.mode, owner: owner, holders: []*holder{newHolder(req, now, f)}}
		return store.Grant{Acquired: true, Fence: f, Count: 1}
	}
	if lk.find(req.Token) == nil {
		if lk.owner != owner {
			return store.Grant{RetryAfter: lk.remaining(now), Held: store.ModeReentrant}
		}
		first := lk.holders[0] // the hold's expiry, fence and record
		lk.holders = append(lk.holders, &holder{token: req.Token, expires: first.expires, fence: first.fence, record: first.record})
	}
	lk.extendAll(now.Add(req.TTL))
	return store.Grant{Acquired: true, Fence: lk.holders[0].fence, Count: len(lk.holders)}
}

// acquireRead grants a reader its own hold at the current fence unless a
// writer holds the lock or waits for it. A reader whose Owner is the token
// of the holding writer is let in beside it (a downgrade).
func (s *Store) acquireRead(k key, lk *lock, req store.Request, now time.Time) store.Grant {
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.extendTo(now.Add(req.TTL))
			return store.Grant{Acquired: true, Fence: h.fence, Count: 1}
		}
		w := lk.writer()
		beside := w != nil && req.Owner != "" && w.token == req.Owner
		if !beside && (w != nil || len(lk.queue) > 0) {
			ra := lk.remaining(now)
			if ra == 0 && len(lk.queue) > 0 {
				ra = lk.queue[0].expires.Sub(now)
			}
			return store.Grant{RetryAfter: ra, Held: lk.heldMode()}
		}
	} else {
		lk = &lock{mode: k.mode}
		s.locks[k] = lk
	}
	f := s.fences[req.Name]
	if f == 0 {
		f = s.issue(req.Name, now)
	}
	lk.holders = append(lk.holders, newHolder(req, now, f))
	return store.Grant{Acquired: true, Fence: f, Count: 1}
}

// acquireWrite grants the writer a new fence when nobody holds the lock and
// no earlier writer waits; otherwise a queued writer keeps (or takes) its
// place. A writer whose Owner is the token of a reader holding the lock is
// refused with ErrUpgrade.
func (s *Store) acquireWrite(k key, lk *lock, req store.Request, now time.Time) (store.Grant, error) {
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			if !h.write {
				return store.Grant{}, store.ErrUpgrade // a reader's own token
			}
			h.extendTo(now.Add(req.TTL))
			return store.Grant{Acquired: true, Fence: h.fence, Count: 1}, nil
		}
		if req.Owner != "" {
			if h := lk.find(req.Owner); h != nil && !h.write {
				return store.Grant{}, store.ErrUpgrade
			}
		}
		ahead := len(lk.queue) > 0 && lk.queue[0].token != req.Token
		if len(lk.holders) > 0 || ahead {
			held := lk.heldMode()
			if len(lk.holders) == 0 {
				held = store.ModeWrite // refused by a writer queued ahead: the request's own mode
			}
			g := store.Grant{RetryAfter: lk.remaining(now), Position: len(lk.queue), Held: held}
			if req.Queue {
				g.Position = lk.enqueue(req, now)
			} else if i := lk.queued(req.Token); i >= 0 {
				g.Position = i
			}
			return g, nil
		}
		lk.dequeue(req.Token)
	} else {
		lk = &lock{mode: k.mode}
		s.locks[k] = lk
	}
	f := s.issue(req.Name, now)
	lk.holders = append(lk.holders, newHolder(req, now, f))
	return store.Grant{Acquired: true, Fence: f, Count: 1}, nil
}

// acquireFair grants the lock to the caller when it is free and nobody is
// queued (live has already handed a free lock to the head); otherwise a
// queued caller keeps (or takes) its place in ticket order.
func (s *Store) acquireFair(k key, lk *lock, req store.Request, now time.Time) store.Grant {
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.claim(now)
			h.extendTo(now.Add(req.TTL))
			return store.Grant{Acquired: true, Fence: h.fence, Count: 1}
		}
		g := store.Grant{RetryAfter: lk.remaining(now), Position: len(lk.queue), Held: store.ModeFair}
		if req.Queue {
			g.Position = lk.enqueue(req, now)
		} else if i := lk.queued(req.Token); i >= 0 {
			g.Position = i
		}
		return g
	}
	f := s.issue(req.Name, now)
	s.locks[k] = &lock{mode: k.mode, holders: []*holder{newHolder(req, now, f)}}
	return store.Grant{Acquired: true, Fence: f, Count: 1}
}

// acquireSemaphore grants one of req.Limit permits, each with a new fence.
// A limit other than the held permits' is a *store.LimitError.
func (s *Store) acquireSemaphore(k key, lk *lock, req store.Request, now time.Time) (store.Grant, error) {
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.extendTo(now.Add(req.TTL))
			return store.Grant{Acquired: true, Fence: h.fence, Count: 1}, nil
		}
		if len(lk.holders) > 0 && lk.limit != req.Limit {
			return store.Grant{}, &store.LimitError{Name: req.Name, Held: lk.limit, Asked: req.Limit}
		}
		if len(lk.holders) >= req.Limit {
			return store.Grant{RetryAfter: lk.soonest(now), Held: store.ModeSemaphore}, nil
		}
	} else {
		lk = &lock{mode: k.mode}
		s.locks[k] = lk
	}
	lk.limit = req.Limit
	f := s.issue(req.Name, now)
	lk.holders = append(lk.holders, newHolder(req, now, f))
	return store.Grant{Acquired: true, Fence: f, Count: 1}, nil
}
