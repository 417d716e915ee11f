package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keepAlive renews the lease of e's key so that it lasts at least ttl from
// now, capped for a hold by what is left of its MaxHold, and returns the
// TTL it renewed for. When that TTL is longer than the lease was granted
// for, or a cap makes it shorter, the key moves to a new lease of it (etcd
// leases keep their TTL), so that etcd too ends the hold by the cap.
// errRetry: the lease or key is gone, or the hold ran out at its MaxHold
// (its lease is then revoked: the hold has ended).
func (s *Store) keepAlive(ctx context.Context, name string, e *entry, ttl time.Duration, key string) (time.Duration, error) {
	lease := clientv3.LeaseID(e.kv.Lease)
	if s.isDead(lease) {
		return 0, errRetry // lapsed: its revocation is on its way
	}
	capped := false
	if e.v.Held {
		b, ok := e.v.bound(ttl, time.Now())
		if !ok {
			s.untrack(key)
			s.revoke(lease)
			return 0, errRetry
		}
		capped, ttl = b < ttl, b
	}
	granted := seconds(time.Duration(e.v.TTL) * time.Millisecond)
	if seconds(ttl) == granted || !capped && seconds(ttl) < granted {
		_, err := s.cli.KeepAliveOnce(ctx, lease)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return 0, errRetry
		}
		if err == nil && !s.renew(key, lease, ttl) {
			return 0, errRetry // lapsed meanwhile: the revocation follows the keep-alive
		}
		return ttl, err
	}
	nv := e.v
	nv.TTL = ms(ttl)
	same := clientv3.Compare(clientv3.CreateRevision(key), "=", e.kv.CreateRevision)
	return ttl, s.moveLease(ctx, name, e, nv, ttl, key, same)
}

// moveLease writes nv, e's new value, on a new lease of ttl, in a
// transaction that commits only if cmp holds, then revokes e's old lease;
// the key is tracked for ttl. errRetry: cmp failed.
func (s *Store) moveLease(ctx context.Context, name string, e *entry, nv val, ttl time.Duration, key string, cmp clientv3.Cmp) error {
	nl, err := s.cli.Grant(ctx, seconds(ttl))
	if err != nil {
		return err
	}
	if nv.Held {
		nv.Fence = e.fence()
	}
	ops := []clientv3.Op{clientv3.OpPut(key, nv.encode(), clientv3.WithLease(nl.ID))}
	if nv.Slot > 0 {
		ops = append(ops, clientv3.OpPut(s.slotKey(name, nv.Slot-1), e.token, clientv3.WithLease(nl.ID)))
	}
	resp, err := s.cli.Txn(ctx).If(cmp).Then(ops...).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(nl.ID)
		if err == nil {
			err = errRetry
		}
		return err
	}
	old := clientv3.LeaseID(e.kv.Lease)
	e.v = nv
	e.kv.Lease = int64(nl.ID)
	s.track(key, nl.ID, ttl)
	s.revoke(old)
	return nil
}

// track records that key, on lease, is held (or queued) through this store
// until ttl from now.
func (s *Store) track(key string, lease clientv3.LeaseID, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.local[key] = &local{lease: lease, deadline: time.Now().Add(ttl)}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// renew is track for a keep-alive of lease: false when the lease lapsed
// and this store is revoking it, so the keep-alive is void.
func (s *Store) renew(key string, lease clientv3.LeaseID, ttl time.Duration) bool {
	s.mu.Lock()
	_, dead := s.dead[lease]
	s.mu.Unlock()
	if dead {
		return false
	}
	s.track(key, lease, ttl)
	return true
}

// tracks reports whether this store tracks key (a hold or queue place it
// granted).
func (s *Store) tracks(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local[key] != nil
}

func (s *Store) isDead(lease clientv3.LeaseID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, dead := s.dead[lease]
	return dead
}

func (s *Store) untrack(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.local, key)
}

// lapsed reports whether key is a hold of this store whose TTL passed
// without renewal; such a hold is revoked at once.
func (s *Store) lapsed(key string) bool {
	s.mu.Lock()
	l := s.local[key]
	gone := l != nil && !time.Now().Before(l.deadline)
	if gone {
		s.lapseLocked(key)
	}
	s.mu.Unlock()
	if gone {
		s.revoke(l.lease)
	}
	return gone
}

// lapseLocked stops tracking key, whose TTL passed, and remembers its
// lease as dead until it is revoked and a while after. It returns the
// lease to revoke. s.mu is held.
func (s *Store) lapseLocked(key string) clientv3.LeaseID {
	l := s.local[key]
	delete(s.local, key)
	s.dead[l.lease] = time.Now()
	return l.lease
}

// lapsedEntry is lapsed for a key as read: when the key has moved to
// another lease since this store tracked it (a release handed the fair lock
// to it: the claim gave it a lease of its hold's TTL), the tracking is
// renewed for that lease and the hold's TTL instead, so the key is neither
// taken for lapsed while it holds nor left behind by revoking the old lease.
func (s *Store) lapsedEntry(e *entry) bool {
	key := string(e.kv.Key)
	s.mu.Lock()
	if l := s.local[key]; l != nil && e.kv.Lease != 0 && l.lease != clientv3.LeaseID(e.kv.Lease) {
		l.lease = clientv3.LeaseID(e.kv.Lease)
		l.deadline = time.Now().Add(time.Duration(e.v.TTL) * time.Millisecond)
	}
	s.mu.Unlock()
	return s.lapsed(key)
}

// remaining is the time left of a hold granted through this store, known
// to the millisecond; ok is false for holds of other stores.
func (s *Store) remaining(key string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.local[key]; l != nil {
		return max(time.Until(l.deadline), time.Millisecond), true
	}
	return 0, false
}

// reap revokes the leases of holds and queue places granted through this
// store whose TTL passed without renewal, so that a TTL is kept to the
// millisecond while this process lives (etcd itself only expires a lease
// of whole seconds, checked every half second: that is what happens when the
// process is gone).
func (s *Store) reap() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		next := now.Add(time.Hour)
		var due []clientv3.LeaseID
		for k, l := range s.local {
			if !now.Before(l.deadline) {
				due = append(due, s.lapseLocked(k))
			} else if l.deadline.Before(next) {
				next = l.deadline
			}
		}
		for id, at := range s.dead {
			if now.Sub(at) > deadFor {
				delete(s.dead, id)
			} else if at.Add(deadFor).Before(next) {
				next = at.Add(deadFor)
			}
		}
		s.mu.Unlock()
		for _, id := range due {
			s.revoke(id)
		}
		timer.Reset(time.Until(next))
		select {
		case <-s.stop:
			return
		case <-s.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
	}
}

// deadFor is how long a revoked lease is remembered: longer than any
// keep-alive in flight when it was revoked.
const deadFor = time.Minute

// revoke drops a lease (and its keys) after an operation no longer needs
// it, bounded by a short timeout.
func (s *Store) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = s.cli.Revoke(ctx, id)
}

// Extend implements [store.Store]: one read of every request's key, then a
// keep-alive of each hold's lease (concurrently). A key that is gone, or is
// only a queue place, reports [store.ErrNotHeld]; so does a lease that
// expired (etcd judged it by its leader's clock).
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
	errs := make([]error, len(reqs))
	ops := make([]clientv3.Op, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	keys := make([]string, len(reqs))
	for i, req := range reqs {
		k, err := kindOf(req.Mode)
		if err == nil {
			err = validate(req)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		keys[i] = s.key(k, req)
		if s.lapsed(keys[i]) {
			errs[i] = store.ErrNotHeld
			continue
		}
		ops = append(ops, clientv3.OpGet(keys[i]))
		idx = append(idx, i)
	}
	if len(ops) == 0 {
		return errs
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		for _, i := range idx {
			errs[i] = storeErr("extend", err)
		}
		return errs
	}
	var wg sync.WaitGroup
	for j, i := range idx {
		kvs := resp.Responses[j].GetResponseRange().Kvs
		if len(kvs) == 0 {
			errs[i] = store.ErrNotHeld
			continue
		}
		e := &entry{kv: kvs[0]}
		if json.Unmarshal(kvs[0].Value, &e.v) != nil || !e.v.Held || e.v.Rel {
			errs[i] = store.ErrNotHeld
			continue
		}
		wg.Go(func() {
			_, err := s.keepAlive(ctx, reqs[i].Name, e, reqs[i].TTL, keys[i])
			if err == nil && reqs[i].Mode == store.ModeReentrant {
				err = s.extendReentry(ctx, reqs[i], e)
			}
			switch {
			case errors.Is(err, errRetry):
				errs[i] = store.ErrNotHeld
			case err != nil:
				errs[i] = storeErr("extend", err)
			}
		})
	}
	wg.Wait()
	return errs
}

// extendReentry pushes out the other acquisitions of the reentrant hold
// that me belongs to: one hold, one expiry, as on every store.
func (s *Store) extendReentry(ctx context.Context, req store.Request, me *entry) error {
	vw, err := s.read(ctx, kindReentrant, req.Name)
	if err != nil {
		return err
	}
	return s.pushOutReentry(ctx, req, vw, me)
}

// pushOutReentry renews the lease of every other acquisition of me's owner
// to last at least req.TTL from now; an acquisition that had longer left
// keeps it (a retry or an Extend with a shorter TTL shortens its own
// acquisition only).
func (s *Store) pushOutReentry(ctx context.Context, req store.Request, vw *view, me *entry) error {
	pfx := s.lockPrefix(kindReentrant, req.Name)
	for _, e := range vw.entries {
		if e.token == me.token || e.v.Owner != me.v.Owner {
			continue
		}
		key := pfx + holdSub + e.token
		ttl := req.TTL
		if left, ok := s.remaining(key); ok {
			ttl = max(ttl, left)
		}
		if _, err := s.keepAlive(ctx, req.Name, e, ttl, key); err != nil && !errors.Is(err, errRetry) {
			return err
		}
	}
	return nil
}

// Release implements [store.Store]: it reads the key's lease and revokes it,
// which deletes the key (and a semaphore's slot) in the same step, so a key
// never outlives its lease's keep-alives. Releasing a fair lock then hands
// it to the head of its queue: the head's key is claimed for it (a new fence
// and a lease of the TTL it asked for), and its [Store.WatchGrant] wakes.
// A writer intent needs no handoff: the next writer claims on its own.
//
// A hold granted with a MinHold and released before grant + MinHold is kept
// instead: its key, marked released (its token holds nothing from then on),
// moves to a lease that ends at grant + MinHold, and Release answers nil.
// etcd ends it there (to its lease's whole second; this process's reaper
// to the millisecond while it lives); the fence key is not touched.
func (s *Store) Release(ctx context.Context, req store.Request) error {
	k, err := kindOf(req.Mode)
	if err != nil {
		return err
	}
	key := s.key(k, req)
	if s.lapsed(key) {
		return store.ErrNotHeld
	}
	s.untrack(key)
	for range maxAttempts {
		if err := s.tryRelease(ctx, k, req, key); !errors.Is(err, errRetry) {
			return err
		}
	}
	return storeErr("release", errors.New("etcd: the hold kept changing"))
}

// tryRelease is one attempt of Release on one read of the key; errRetry
// when the key changed before a MinHold could be kept.
func (s *Store) tryRelease(ctx context.Context, k kind, req store.Request, key string) error {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return storeErr("release", err)
	}
	if len(resp.Kvs) == 0 {
		return store.ErrNotHeld
	}
	kv := resp.Kvs[0]
	if s.isDead(clientv3.LeaseID(kv.Lease)) {
		return store.ErrNotHeld // lapsed: its revocation is on its way
	}
	e := &entry{token: req.Token, kv: kv}
	if json.Unmarshal(kv.Value, &e.v) == nil {
		if e.v.Rel {
			return store.ErrNotHeld // released already, kept by its MinHold
		}
		if left := e.v.minLeft(time.Now()); e.v.Held && left > 0 {
			return s.keepToMinHold(ctx, req.Name, e, left, key)
		}
	}
	if kv.Lease == 0 {
		_, err = s.cli.Delete(ctx, key)
	} else {
		_, err = s.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease))
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return store.ErrNotHeld // expired meanwhile
		}
	}
	if err != nil {
		return storeErr("release", err)
	}
	if k == kindFair {
		s.handOff(ctx, req.Name)
	}
	return nil
}

// keepToMinHold is a Release of e before its MinHold ran out: the key,
// marked released, moves to a lease that ends left from now (grant +
// MinHold), checked at commit to be the hold as read.
func (s *Store) keepToMinHold(ctx context.Context, name string, e *entry, left time.Duration, key string) error {
	nv := e.v
	nv.Rel, nv.TTL = true, ms(left)
	same := clientv3.Compare(clientv3.ModRevision(key), "=", e.kv.ModRevision)
	if err := s.moveLease(ctx, name, e, nv, left, key, same); err != nil {
		if errors.Is(err, errRetry) {
			return err
		}
		return storeErr("release", err)
	}
	return nil
}

// handOff claims a free fair lock for the head of its queue. Failures are
// left to the head waiter, which claims for itself on its next Acquire.
func (s *Store) handOff(ctx context.Context, name string) {
	for range 3 {
		vw, err := s.read(ctx, kindFair, name)
		if err != nil || len(vw.entries) == 0 || vw.entries[0].v.Held {
			return
		}
		if _, _, held := s.otherHold(vw); held {
			return
		}
		head := vw.entries[0]
		key := s.lockPrefix(kindFair, name) + holdSub + head.token
		// The TTL the waiter asked to hold for, but no longer than its queue
		// TTL (the claim window): alive, the waiter claims its TTL by its
		// next Acquire (its grant watch does it at once) before its place
		// would have run out; dead, or a place nobody refreshes, it keeps the
		// others waiting no longer than its place would have.
		hold := head.v.Hold
		if hold == 0 || head.v.TTL > 0 && hold > head.v.TTL {
			hold = head.v.TTL
		}
		_, err = s.claim(ctx, name, head, vw.fence, time.Duration(hold)*time.Millisecond, key, false, s.othersUnchanged(kindFair, name, vw))
		if !errors.Is(err, errRetry) {
			return
		}
	}
}
