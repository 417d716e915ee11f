package etcd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A hold's record (issue 38) lives in the value of its key, written by the
// grant's transaction and deleted with the key: who holds, the caller's
// data, the grant time (Since) and the hold's bounds (MinHold, MaxHold).
// etcd has no clock a client can read, so Since is the granting process's
// wall clock (the clock of the fence's floor, [wallFloor]), in Unix
// milliseconds; every bound is measured from it by the wall clock of the
// process that applies it. Processes whose clocks differ by d apply a
// MaxHold up to d apart; etcd's leases, capped at each grant and extend,
// end a hold by its bound to their whole second whatever the clocks.

var (
	_ store.Resumer       = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// minHolds reports whether a hold of kind k is kept by a MinHold: exclusive holds only (mutex, fair, election; a multi-lock's
// names are mutex holds).
func minHolds(k kind) bool {
	return k == kindMutex || k == kindFair || k == kindElection
}

// record copies req's hold record into v (Since is set by the grant).
func (v *val) record(k kind, req store.Request) {
	v.Who, v.Data = req.Holder, req.Data
	v.Max = ms(req.MaxHold)
	if minHolds(k) {
		v.Min = ms(req.MinHold)
	}
}

// maxLeft is what is left at now of a granted hold's MaxHold; ok is false
// when the hold has none.
func (v val) maxLeft(now time.Time) (left time.Duration, ok bool) {
	if v.Max == 0 || v.Since == 0 {
		return 0, false
	}
	return time.UnixMilli(v.Since + v.Max).Sub(now), true
}

// bound is ttl capped by what is left at now of the hold's MaxHold; ok is
// false once the hold ran out there.
func (v val) bound(ttl time.Duration, now time.Time) (time.Duration, bool) {
	left, has := v.maxLeft(now)
	switch {
	case !has:
		return ttl, true
	case left <= 0:
		return 0, false
	}
	return min(ttl, left), true
}

// minLeft is what is left at now of a granted hold's MinHold (0 or less
// when none is).
func (v val) minLeft(now time.Time) time.Duration {
	if v.Min == 0 || v.Since == 0 {
		return 0
	}
	return time.UnixMilli(v.Since + v.Min).Sub(now)
}

// left is what e has left at now as far as this store knows: its time to
// the millisecond when this store granted or renewed it, else the TTL it
// asked for; no more than what is left of its MaxHold or, released, its
// MinHold.
func (s *Store) left(e *entry, now time.Time) time.Duration {
	d := time.Duration(e.v.TTL) * time.Millisecond
	if r, ok := s.remaining(string(e.kv.Key)); ok {
		d = r
	}
	if m, ok := e.v.maxLeft(now); ok && e.v.Held {
		d = max(min(d, m), time.Millisecond)
	}
	if e.v.Rel {
		d = max(min(d, e.v.minLeft(now)), time.Millisecond)
	}
	return d
}

// holder is the hold as [store.State.Owners] shows it.
func (v val) holder(fence int64) store.Holder {
	h := store.Holder{Owner: v.Who, Data: v.Data, Fence: fence}
	if v.Since > 0 {
		h.Since = time.UnixMilli(v.Since)
	}
	return h
}

// owners describes the holds among vw's keys: one per claimed key, one for
// a reentrant owner's keys.
func owners(k kind, vw *view) []store.Holder {
	var out []store.Holder
	for i, e := range vw.entries {
		if !vw.claimed(k, i) {
			continue
		}
		out = append(out, e.v.holder(e.fence()))
		if k == kindReentrant {
			break
		}
	}
	return out
}

// Resume implements [store.Resumer]. One read finds req.Token's key; a
// transaction that commits only if the key is unchanged since (still a
// hold of the token in req.Mode, not released) moves it to a new lease of
// req.TTL capped by the hold's MaxHold, and the old lease is revoked. A
// reentrant hold's other acquisitions are renewed as Extend renews them.
// It returns [store.ErrNotHeld] when the token holds nothing in req.Mode
// (a queue place, a hold released and kept by its MinHold, a hold past its
// MaxHold, whose lease it revokes); nothing else changes then.
func (s *Store) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	k, err := kindOf(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	if err := validate(req); err != nil {
		return store.Grant{}, err
	}
	key := s.key(k, req)
	for range maxAttempts {
		g, err := s.tryResume(ctx, k, req, key)
		switch {
		case errors.Is(err, errRetry):
			continue
		case err == nil, errors.Is(err, store.ErrNotHeld):
			return g, err
		}
		return store.Grant{}, storeErr("resume", err)
	}
	return store.Grant{}, storeErr("resume", errors.New("etcd: the hold kept changing"))
}

// tryResume is one attempt of Resume on one read of the lock.
func (s *Store) tryResume(ctx context.Context, k kind, req store.Request, key string) (store.Grant, error) {
	if s.lapsed(key) {
		return store.Grant{}, store.ErrNotHeld
	}
	vw, err := s.read(ctx, k, req.Name)
	if err != nil {
		return store.Grant{}, err
	}
	i, me := vw.find(req.Token)
	if me == nil || !vw.claimed(k, i) || me.v.Rel || me.v.Mode != req.Mode || s.isDead(clientv3.LeaseID(me.kv.Lease)) {
		return store.Grant{}, store.ErrNotHeld
	}
	now := time.Now()
	ttl, ok := me.v.bound(req.TTL, now)
	if !ok {
		s.untrack(key)
		s.revoke(clientv3.LeaseID(me.kv.Lease)) // ran out at its MaxHold
		return store.Grant{}, store.ErrNotHeld
	}
	nv := me.v
	nv.TTL = ms(ttl)
	same := clientv3.Compare(clientv3.ModRevision(key), "=", me.kv.ModRevision)
	if err := s.moveLease(ctx, req.Name, me, nv, ttl, key, same); err != nil {
		return store.Grant{}, err
	}
	if k == kindReentrant {
		r := req
		r.TTL = ttl
		if err := s.pushOutReentry(ctx, r, vw, me); err != nil {
			return store.Grant{}, err
		}
	}
	g := store.Grant{Acquired: true, Fence: me.fence(), Count: s.count(k, vw, me), TTL: ttl}
	if left, ok := me.v.maxLeft(now); ok {
		g.MaxHoldLeft = left
	}
	return g, nil
}

// ForceRelease implements [store.ForceReleaser]: one read of every kind's
// keys of name, then the lease of every hold is revoked (concurrently),
// which deletes its key (and a semaphore permit's slot key) with it and
// wakes the name's watchers, as a Release does; the name is read again
// until none of those holds is left (a hold that moved to a new lease
// meanwhile is revoked there). Queue places stay and the fence key is not
// touched, so the next grant's fence is above every ended hold's. A fair
// lock is then handed to the head of its queue, as Release does. It
// returns the holds of the first read, as [Store.State] shows them.
func (s *Store) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	if err := store.ValidName(name); err != nil {
		return nil, err
	}
	vw, err := s.read(ctx, kindMutex, name)
	if err != nil {
		return nil, storeErr("force release", err)
	}
	var ended []store.Holder
	targets := map[string]int64{} // key: create revision, of the holds to end
	fair := false
	for _, k := range kinds {
		kv := vw.of(k)
		ended = append(ended, owners(k, kv)...)
		for i, e := range kv.entries {
			if kv.claimed(k, i) {
				targets[string(e.kv.Key)] = e.kv.CreateRevision
				fair = fair || k == kindFair
			}
		}
	}
	for attempt := 0; ; attempt++ {
		live := vw.targets(targets)
		if len(live) == 0 {
			break
		}
		if attempt == maxAttempts {
			return nil, storeErr("force release", errors.New("etcd: the holds kept changing"))
		}
		if err := s.endHolds(ctx, live); err != nil {
			return nil, storeErr("force release", err)
		}
		if vw, err = s.read(ctx, kindMutex, name); err != nil {
			return nil, storeErr("force release", err)
		}
	}
	if fair {
		s.handOff(ctx, name)
	}
	return ended, nil
}

// of is the view of the name's kind k: vw itself for its own kind.
func (vw *view) of(k kind) *view {
	if ov := vw.others[k]; ov != nil {
		return ov
	}
	return vw
}

// targets are the keys of every kind in vw that are still the holds of
// targets (the key with the same create revision).
func (vw *view) targets(targets map[string]int64) []*entry {
	var live []*entry
	for _, k := range kinds {
		for _, e := range vw.of(k).entries {
			if rev, ok := targets[string(e.kv.Key)]; ok && rev == e.kv.CreateRevision {
				live = append(live, e)
			}
		}
	}
	return live
}

// endHolds revokes the lease of every entry (concurrently), deleting its
// keys; a key without a lease (an older build's) is deleted. A lease that
// is gone already (expired, or the key moved) is no error.
func (s *Store) endHolds(ctx context.Context, es []*entry) error {
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		s.untrack(string(e.kv.Key))
		wg.Go(func() {
			if e.kv.Lease == 0 {
				_, errs[i] = s.cli.Delete(ctx, string(e.kv.Key))
				return
			}
			if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(e.kv.Lease)); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
