package redisproto

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// A hold's record (issue 38: store.Request's Holder, Data, MinHold and
// MaxHold) is written by the acquire scripts, atomically with a grant whose
// request carries one, and goes with the hold (scripts/hold_lib.lua):
//
//	exclusive holds (mutex, each name of a multi-lock, reentrant, fair, election)
//	           {t}:hold, a string naming the hold's token (or fence) and expiring with it
//	shared holds (readers, the writer, permits)
//	           {t}:holds, a hash token -> record, its entries dropped with their holds
//
// A mutex grant with a record also sets the waiters flag, so that every
// release of it takes the full form, which reads the record; without one
// the mutex's acquire and release read and write what they did before.

var (
	_ store.Resumer       = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// Resume implements [store.Resumer] in one script, one round trip: the
// mode's compare of Extend, the same extension capped at the record's max
// end, and the hold's fence. A token that holds nothing in req.Mode, a
// hold past its max end and one a release left to its min end get
// [store.ErrNotHeld].
func (s *Store) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	o, err := s.ops(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	if o.Resume == nil {
		return store.Grant{}, fmt.Errorf("%w: %s store cannot resume mode %v", store.ErrNotSupported, s.name, req.Mode)
	}
	if err := s.l.CheckRequest(req); err != nil {
		return store.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Grant{}, err
	}
	if s.closed.Load() {
		return store.Grant{}, s.errClosed("resume")
	}
	call := Call{Script: o.Resume, Keys: o.ExtendKeys(s.l, req.Name), Args: o.Args(s.l, req), Name: req.Name}
	rs, unconfirmed := s.write(ctx, "resume", []Call{call})
	if n, err := rs[0].Int64(); err == nil && n == 0 {
		return store.Grant{}, store.ErrNotHeld
	}
	v, err := rs[0].Int64s()
	if err != nil {
		return store.Grant{}, s.fail("resume", err)
	}
	g, err := ParseResume(v)
	if err != nil {
		return store.Grant{}, fmt.Errorf("dlock: %s resume: %w", s.name, err)
	}
	if unconfirmed != nil && unconfirmed[0] != nil {
		return store.Grant{}, unconfirmed[0]
	}
	return g, nil
}

// ParseResume decodes the reply of a resume script: {fence, ttl ms, max
// hold left ms, [count]}.
func ParseResume(v []int64) (store.Grant, error) {
	if len(v) < 3 || v[0] < 1 || v[1] < 1 {
		return store.Grant{}, fmt.Errorf("resume script replied %v", v)
	}
	g := store.Grant{Acquired: true, Fence: v[0], Count: 1, TTL: time.Duration(v[1]) * time.Millisecond,
		MaxHoldLeft: time.Duration(v[2]) * time.Millisecond}
	if len(v) > 3 && v[3] > 0 {
		g.Count = int(v[3])
	}
	return g, nil
}

// ForceRelease implements [store.ForceReleaser]: it reads the name's State,
// then runs the holding mode's force script (one round trip each), again
// while another mode took the name between the two. The fence key and the
// slot's mark stay, so the next grant's fence is above the ended holds';
// queue places stay; the holds' watchers are woken by the keys the script
// deletes (and this Store's at once), and a mutex's live registered waiter
// or a fair lock's head is handed the lock, as a release would.
func (s *Store) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	if err := s.l.CheckName(name); err != nil {
		return nil, err
	}
	for range 8 {
		st, err := s.State(ctx, name)
		if err != nil {
			return nil, err
		}
		if st.Holders == 0 {
			return nil, nil
		}
		o, err := s.ops(st.Mode)
		if err != nil || o.Force == nil {
			return nil, fmt.Errorf("%w: %s store cannot force-release mode %v", store.ErrNotSupported, s.name, st.Mode)
		}
		rs, _ := s.write(ctx, "force", []Call{{Script: o.Force, Keys: o.Keys(s.l, name), Args: forceArgs(s.l), Name: name}})
		v, err := rs[0].Values()
		if err != nil {
			return nil, s.fail("force", err)
		}
		ended, err := DecodeOwners(v)
		if err != nil {
			return nil, fmt.Errorf("dlock: %s force: %w", s.name, err)
		}
		if len(ended) > 0 {
			s.wakeAll(name)
			return ended, nil
		}
		// Another mode holds the name now, or nobody: read it again.
	}
	return nil, fmt.Errorf("dlock: %s force: the holds of %q kept changing mode", s.name, name)
}

// forceArgs is ARGV of the force scripts: the fence retention is ARGV[7],
// where clock_lib.lua reads it.
func forceArgs(l *Layout) []string { return []string{"", "", "", "", "", "", l.Retention} }

// wakeAll wakes this Store's waiters of every mode on lock name.
func (s *Store) wakeAll(name string) {
	if s.hub.Idle() {
		return
	}
	s.hub.Wake(s.l.Key(name))
	for _, o := range modes {
		s.hub.Wake(o.WatchKey(s.l, name))
	}
}

// DecodeOwners decodes owners from script replies, four values each:
// holder, since ms, data, fence (see rec_owner in scripts/hold_lib.lua).
func DecodeOwners(v []Reply) ([]store.Holder, error) {
	if len(v)%4 != 0 {
		return nil, fmt.Errorf("owners of %d values, want four each", len(v))
	}
	var out []store.Holder
	for i := 0; i < len(v); i += 4 {
		since, err1 := v[i+1].Int64()
		fence, err2 := v[i+3].Int64()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("owner %d: since %v, fence %v", i/4, err1, err2)
		}
		h := store.Holder{Owner: v[i].Str(), Data: v[i+2].Str(), Fence: fence}
		if since > 0 {
			h.Since = time.UnixMilli(since)
		}
		out = append(out, h)
	}
	return out, nil
}
