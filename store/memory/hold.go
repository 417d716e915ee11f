package memory

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// A hold's record (issue 38): every grant keeps its request's Holder and
// Data, its own time (Since, always: the record is part of the holder
// written anyway) and the ends of its MinHold and MaxHold; they go with
// the holder.

// keepsMinHold reports whether a MinHold keeps a hold of mode m: the
// exclusive modes of store.Request.MinHold. Other modes ignore it.
func keepsMinHold(m store.Mode) bool {
	return m == store.ModeMutex || m == store.ModeFair || m == store.ModeElection
}

// newRecord is the record of a hold of mode m granted now to a request
// with these record fields.
func newRecord(m store.Mode, owner, data string, minHold, maxHold time.Duration, now time.Time) record {
	r := record{owner: owner, data: data, since: now}
	if minHold > 0 && keepsMinHold(m) {
		r.minUntil = now.Add(minHold)
	}
	if maxHold > 0 {
		r.maxUntil = now.Add(maxHold)
	}
	return r
}

// newHolder is a new hold of req granted now with fence f, its expiry at
// now + req.TTL capped by its MaxHold.
func newHolder(req store.Request, now time.Time, f int64) *holder {
	h := &holder{token: req.Token, fence: f, write: req.Mode == store.ModeWrite,
		record: newRecord(req.Mode, req.Holder, req.Data, req.MinHold, req.MaxHold, now)}
	h.expires = h.capped(now.Add(req.TTL))
	return h
}

// capped returns t, or the end of the hold's MaxHold when that is earlier.
func (r *record) capped(t time.Time) time.Time {
	if !r.maxUntil.IsZero() && r.maxUntil.Before(t) {
		return r.maxUntil
	}
	return t
}

// extendTo sets the hold's expiry to t, capped by its MaxHold.
func (h *holder) extendTo(t time.Time) { h.expires = h.capped(t) }

// keptByMinHold reports whether a Release of h now leaves it held: its
// MinHold has not run out. It then makes the hold end when the MinHold
// does (the fence and record are unchanged) and takes it from its token
// (which no request carries: see check), so that the token's late
// requests, a delayed Extend, Acquire or Resume, move that end no more.
func (h *holder) keptByMinHold(now time.Time) bool {
	if h.minUntil.IsZero() || !now.Before(h.minUntil) {
		return false
	}
	h.expires = h.minUntil
	h.token = ""
	return true
}

// claim is the Acquire by which a fair lock's waiter learns that it was
// handed the lock: its MinHold, counted from the handoff, is counted from
// now if that ends later (within its MaxHold), so that the job it guards
// starts no more often than once per MinHold however late the waiter
// learned of its grant.
func (h *holder) claim(now time.Time) {
	if h.unclaimed == 0 {
		return
	}
	h.minUntil = h.capped(later(h.minUntil, now.Add(h.unclaimed)))
	h.unclaimed = 0
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// shown is the hold as store.State shows it: never its token.
func (h *holder) shown() store.Holder {
	return store.Holder{Owner: h.owner, Data: h.data, Since: h.since.Truncate(time.Millisecond), Fence: h.fence}
}

// owners describes the lock's holds: one for a reentrant hold (its
// acquisitions share a record), one per holder otherwise.
func (lk *lock) owners() []store.Holder {
	if len(lk.holders) == 0 {
		return nil
	}
	if lk.mode == store.ModeReentrant {
		return []store.Holder{lk.holders[0].shown()}
	}
	out := make([]store.Holder, len(lk.holders))
	for i, h := range lk.holders {
		out[i] = h.shown()
	}
	return out
}

// Resume implements [store.Resumer]: while req.Token holds req.Name in
// req.Mode (a reader is not a writer), it extends the hold to req.TTL,
// capped by the hold's MaxHold, and returns its fence, count, TTL and
// what is left of its MaxHold. Otherwise it returns [store.ErrNotHeld] and
// changes nothing. The hold keeps its record.
func (s *Store) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	if err := ctx.Err(); err != nil {
		return store.Grant{}, err
	}
	if err := checkResume(req); err != nil {
		return store.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	k := keyOf(req.Name, req.Mode)
	lk := s.live(k, now)
	if lk == nil {
		return store.Grant{}, store.ErrNotHeld
	}
	h := lk.find(req.Token)
	if h == nil || h.write != (req.Mode == store.ModeWrite) {
		return store.Grant{}, store.ErrNotHeld
	}
	h.claim(now) // a fair waiter may learn of its handoff so
	g := store.Grant{Acquired: true, Fence: h.fence, Count: 1}
	if req.Mode == store.ModeReentrant {
		lk.extendAll(now.Add(req.TTL))
		g.Count = len(lk.holders)
	} else {
		h.extendTo(now.Add(req.TTL))
	}
	g.TTL = h.expires.Sub(now)
	if !h.maxUntil.IsZero() {
		g.MaxHoldLeft = h.maxUntil.Sub(now)
	}
	return g, nil
}

// checkResume checks what Resume needs of req: a supported mode, a valid
// name, a token and a TTL.
func checkResume(req store.Request) error {
	if err := store.ValidName(req.Name); err != nil {
		return err
	}
	return check(store.Request{Name: req.Name, Token: req.Token, TTL: req.TTL, Mode: req.Mode, Limit: max(req.Limit, 1)})
}

// ForceRelease implements [store.ForceReleaser]: it ends every hold of
// name in every mode, whatever its token, even one kept by its MinHold,
// and returns them as State showed them. Queue places stay (a fair lock is
// handed to its head waiter), the fence counter stays, and the waiters of
// every pattern of name are woken.
func (s *Store) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := store.ValidName(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var ended []store.Holder
	var locks []key
	for _, m := range modes {
		k := key{m, name}
		if lk := s.live(k, now); lk != nil && len(lk.holders) > 0 {
			ended = append(ended, lk.owners()...)
			lk.holders = nil
			locks = append(locks, k)
		}
	}
	if len(ended) == 0 {
		return nil, nil
	}
	for _, k := range locks {
		if lk := s.locks[k]; lk != nil {
			s.settle(k, lk, now)
		}
	}
	s.freed(name, now)
	return ended, nil
}
