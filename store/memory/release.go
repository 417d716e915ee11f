package memory

import (
	"context"
	"slices"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// Extend implements [store.Store]. A reentrant hold's expiry is pushed out,
// never in. Queue entries are refreshed by Acquire, not Extend.
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
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
		lk := s.live(keyOf(req.Name, req.Mode), now)
		var h *holder
		if lk != nil {
			h = lk.find(req.Token)
		}
		switch {
		case h == nil:
			errs[i] = store.ErrNotHeld
		case req.Mode == store.ModeReentrant:
			lk.extendAll(now.Add(req.TTL))
		default:
			h.extendTo(now.Add(req.TTL))
		}
	}
	return errs
}

// Release implements [store.Store]. Releasing a fair lock hands it to the
// live head waiter, which alone is woken. Releasing a queued token drops
// its place.
func (s *Store) Release(ctx context.Context, req store.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	k := keyOf(req.Name, req.Mode)
	lk := s.live(k, now)
	if lk == nil {
		return store.ErrNotHeld
	}
	if i := slices.IndexFunc(lk.holders, func(h *holder) bool { return h.token == req.Token && h.token != "" }); i >= 0 {
		if lk.holders[i].keptByMinHold(now) {
			return nil // held until its MinHold ends, by its expiry
		}
		// Wake waiters when someone may now get in: the lock is free, a
		// writer left readers behind after a downgrade, or a permit freed.
		wake := lk.holders[i].write || k.mode == store.ModeSemaphore
		lk.holders = slices.Delete(lk.holders, i, i+1)
		free := len(lk.holders) == 0
		if s.settle(k, lk, now) != nil && k.mode == store.ModeFair && len(lk.holders) > 0 {
			return nil // handed over: settle woke the new holder alone
		}
		switch {
		case free:
			s.freed(req.Name, now)
		case wake:
			s.wakeLocked(k)
		}
		return nil
	}
	if lk.dequeue(req.Token) {
		if k.mode == store.ModeRead {
			s.wakeLocked(k) // a withdrawn writer intent may let readers in
		}
		s.settle(k, lk, now)
		return nil
	}
	return store.ErrNotHeld
}
