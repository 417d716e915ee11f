package etcd

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-dev/dlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Acquire implements [dlock.Store]. It reads the lock's keys, decides by
// the rules of the mode, and writes in a transaction whose comparisons make
// the decision hold at commit (optimistic concurrency: a conflict rereads;
// after 16 conflicts in a row the answer is a refusal). A new hold is a key
// attached to its own etcd lease of the TTL rounded up to whole seconds (at
// least etcd's minimum lease TTL), which etcd's leader expires on its own
// clock.
func (s *Store) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, error) {
	k, err := kindOf(req.Mode)
	if err != nil {
		return dlock.Grant{}, err
	}
	if err := validate(req); err != nil {
		return dlock.Grant{}, err
	}
	if req.Mode == dlock.ModeReentrant && req.Owner == "" {
		req.Owner = req.Token
	}
	var last dlock.Grant
	for range maxAttempts {
		g, err := s.tryAcquire(ctx, k, req, &last)
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			if errors.Is(err, dlock.ErrUpgrade) || errors.Is(err, dlock.ErrInvalid) {
				return dlock.Grant{}, err
			}
			return dlock.Grant{}, storeErr("acquire", err)
		}
		return g, nil
	}
	return last, nil // lost every race: someone else got it
}

func (s *Store) tryAcquire(ctx context.Context, k kind, req dlock.Request, last *dlock.Grant) (dlock.Grant, error) {
	vw, err := s.read(ctx, k, req.Name)
	if err != nil {
		return dlock.Grant{}, err
	}
	key := s.key(k, req)
	if s.lapsed(key) {
		return dlock.Grant{}, errRetry
	}
	*last = s.refusal(k, vw, -1, req.Mode)
	if i, me := vw.find(req.Token); me != nil {
		switch {
		case !vw.holds(k, i):
			// A queue place: report the position, keeping the place alive
			// for another QueueTTL when asked to queue (Queue false leaves
			// it to run out, as on every store).
			if err := s.keepPlace(ctx, req, me, key); err != nil {
				return dlock.Grant{}, err
			}
			g := s.refusal(k, vw, i, req.Mode)
			if held, left, ok := s.otherHold(vw); ok {
				g.Held, g.RetryAfter = held, left
			}
			return g, nil
		case !me.v.Held:
			// At the head of the queue: claim it, unless another kind
			// holds the name.
			if held, left, ok := s.otherHold(vw); ok {
				g := s.refusal(k, vw, i, req.Mode)
				g.Held, g.RetryAfter = held, left
				if err := s.keepPlace(ctx, req, me, key); err != nil {
					return dlock.Grant{}, err
				}
				return g, nil
			}
			fence, err := s.claim(ctx, req.Name, me, req.TTL, key, true, s.othersUnchanged(k, req.Name, vw))
			if err != nil {
				return dlock.Grant{}, err
			}
			return dlock.Grant{Acquired: true, Fence: fence, Count: 1}, nil
		}
		if err := s.keepAlive(ctx, req.Name, me, req.TTL, key); err != nil {
			return dlock.Grant{}, err
		}
		if k == kindReentrant {
			if err := s.pushOutReentry(ctx, req, vw, me); err != nil {
				return dlock.Grant{}, err
			}
		}
		return dlock.Grant{Acquired: true, Fence: me.fence(), Count: s.count(k, vw, me)}, nil
	}

	if held, left, ok := s.otherHold(vw); ok {
		// A name is one lock: refused, keeping a queued caller's place.
		if req.Queue && (k == kindFair || req.Mode == dlock.ModeWrite) {
			g, err := s.enqueue(ctx, k, req, vw, key)
			g.Held, g.RetryAfter = held, left
			return g, err
		}
		g := *last
		g.Held, g.RetryAfter = held, left
		return g, nil
	}
	if k == kindSemaphore && len(vw.entries) > 0 && vw.entries[0].v.Limit != req.Limit {
		return dlock.Grant{}, &dlock.LimitError{Name: req.Name, Held: vw.entries[0].v.Limit, Asked: req.Limit}
	}

	pfx := s.lockPrefix(k, req.Name)
	me := &entry{token: req.Token, v: val{Mode: req.Mode, Owner: req.Owner, TTL: ms(req.TTL), Held: true, Value: req.Value}}
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, s.othersUnchanged(k, req.Name, vw)...)
	empty := clientv3.Compare(clientv3.CreateRevision(pfx).WithPrefix(), "=", 0)
	unchanged := clientv3.Compare(clientv3.ModRevision(pfx).WithPrefix(), "<", vw.rev+1)
	var fence int64 // known before the write: a reader's or a re-entry's
	var extra []clientv3.Op
	switch {
	case k == kindMutex || k == kindFair || k == kindElection || req.Mode == dlock.ModeWrite:
		if req.Mode == dlock.ModeWrite && req.Owner != "" {
			for _, e := range vw.entries {
				if e.token == req.Owner && e.v.Mode == dlock.ModeRead && vw.holds(k, slicesIndex(vw, e)) {
					return dlock.Grant{}, dlock.ErrUpgrade
				}
			}
		}
		if len(vw.entries) > 0 {
			if req.Queue && (k == kindFair || req.Mode == dlock.ModeWrite) {
				return s.enqueue(ctx, k, req, vw, key)
			}
			return *last, nil
		}
		cmps = append(cmps, empty)
	case k == kindReentrant:
		if len(vw.entries) == 0 {
			cmps = append(cmps, empty)
			break
		}
		if vw.entries[0].v.Owner != req.Owner {
			return *last, nil
		}
		fence = vw.entries[0].fence()
		me.v.Fence = fence
		cmps = append(cmps, unchanged)
	case k == kindSemaphore:
		if len(vw.entries) >= req.Limit {
			return *last, nil
		}
		slot := -1
		for i := range req.Limit {
			if !vw.slots[i] {
				slot = i
				break
			}
		}
		if slot < 0 {
			return *last, nil
		}
		me.v.Limit, me.v.Slot = req.Limit, slot+1
		sk := s.slotKey(req.Name, slot)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(sk), "=", 0))
		extra = append(extra, clientv3.OpPut(sk, req.Token)) // leased below
	default: // reader
		beside := false
		for _, e := range vw.entries {
			if e.v.Mode == dlock.ModeWrite {
				if req.Owner == "" || e.token != req.Owner || !vw.holds(k, slicesIndex(vw, e)) {
					return *last, nil
				}
				beside = true
			}
		}
		if beside {
			cmps = append(cmps, unchanged)
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(pfx+writerSub).WithPrefix(), "=", 0))
		}
		if vw.fence != nil {
			// The current fence, checked to be still current at commit
			// (a writer that came and went since the read changed it).
			fence = vw.fence.ModRevision
			me.v.Fence = fence // a retry returns it, not the key's revision
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.fenceKey(req.Name)), "=", fence))
		}
	}
	lease, err := s.cli.Grant(ctx, seconds(req.TTL))
	if err != nil {
		return dlock.Grant{}, err
	}
	ops := []clientv3.Op{clientv3.OpPut(key, me.v.encode(), clientv3.WithLease(lease.ID))}
	for _, op := range extra {
		ops = append(ops, clientv3.OpPut(string(op.KeyBytes()), string(op.ValueBytes()), clientv3.WithLease(lease.ID)))
	}
	if fence == 0 {
		fk := s.fenceKey(req.Name)
		ops = append(ops, clientv3.OpPut(fk, ""))
		if req.Mode == dlock.ModeRead {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(fk), "=", 0))
		}
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(lease.ID)
		if err == nil {
			err = errRetry
		}
		return dlock.Grant{}, err
	}
	s.track(key, lease.ID, req.TTL)
	if fence == 0 {
		fence = resp.Header.Revision
	}
	count := 1
	if k == kindReentrant {
		count = len(vw.entries) + 1
	}
	return dlock.Grant{Acquired: true, Fence: fence, Count: count}, nil
}

// keepPlace renews the queue place me of a queued request for its queue
// TTL (the TTL when none is given); a request that does not ask to queue
// leaves the place as it is.
func (s *Store) keepPlace(ctx context.Context, req dlock.Request, me *entry, key string) error {
	if !req.Queue {
		return nil
	}
	qttl := req.QueueTTL
	if qttl <= 0 {
		qttl = req.TTL
	}
	return s.keepAlive(ctx, req.Name, me, qttl, key)
}

func slicesIndex(vw *view, e *entry) int {
	for i, x := range vw.entries {
		if x == e {
			return i
		}
	}
	return -1
}

// count is the hold count of a grant: the owner's acquisitions for a
// reentrant lock, else 1.
func (s *Store) count(k kind, vw *view, me *entry) int {
	if k != kindReentrant {
		return 1
	}
	n := 0
	for _, e := range vw.entries {
		if e.v.Owner == me.v.Owner {
			n++
		}
	}
	return n
}

// claim turns a queue key that reached the head into a hold of ttl: the
// key moves to a new lease of ttl (its queue lease was as short as the
// queue TTL), and the claiming transaction's revision is the fence,
// recorded on the fence key. It fails with errRetry when the key changed
// since it was read (expired, or claimed by someone else), or when this
// store judged the place lapsed. A hold claimed for a waiter of this store
// (mine, or a handoff to a place it tracks) is tracked for ttl.
func (s *Store) claim(ctx context.Context, name string, me *entry, ttl time.Duration, key string, mine bool, others []clientv3.Cmp) (int64, error) {
	old := clientv3.LeaseID(me.kv.Lease)
	if s.isDead(old) {
		return 0, errRetry // the place lapsed: its revocation is on its way
	}
	mine = mine || s.tracks(key)
	lease, err := s.cli.Grant(ctx, seconds(ttl))
	if err != nil {
		return 0, err
	}
	nv := me.v
	nv.Held, nv.TTL, nv.Fence = true, ms(ttl), 0
	resp, err := s.cli.Txn(ctx).If(append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", me.kv.CreateRevision),
		clientv3.Compare(clientv3.ModRevision(key), "=", me.kv.ModRevision), // nobody claimed it since
	}, others...)...).Then(
		clientv3.OpPut(key, nv.encode(), clientv3.WithLease(lease.ID)),
		clientv3.OpPut(s.fenceKey(name), ""),
	).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(lease.ID)
		if err == nil {
			err = errRetry
		}
		return 0, err
	}
	if mine || s.isDead(old) { // lapsed meanwhile: the hold is still ours to expire
		s.track(key, lease.ID, ttl)
	}
	s.revoke(old)
	return resp.Header.Revision, nil
}

// enqueue adds the caller's queue key (fair waiter or writer intent) on a
// lease of the queue TTL: a waiter that dies leaves the queue when it runs
// out. A claim moves the key to a lease of the hold's TTL.
func (s *Store) enqueue(ctx context.Context, k kind, req dlock.Request, vw *view, key string) (dlock.Grant, error) {
	qttl := req.QueueTTL
	if qttl <= 0 {
		qttl = req.TTL
	}
	lease, err := s.cli.Grant(ctx, seconds(qttl))
	if err != nil {
		return dlock.Grant{}, err
	}
	v := val{Mode: req.Mode, Owner: req.Owner, TTL: ms(qttl), Hold: ms(req.TTL)}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, v.encode(), clientv3.WithLease(lease.ID))).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(lease.ID)
		if err == nil {
			err = errRetry
		}
		return dlock.Grant{}, err
	}
	s.track(key, lease.ID, qttl)
	return s.refusal(k, vw, -1, req.Mode), nil
}

// queued is the number of queue places among the first n keys of vw
// (keys that were not granted the lock, the head's included).
func queued(k kind, vw *view, n int) int {
	q := 0
	for i := range n {
		if !vw.claimed(k, i) {
			q++
		}
	}
	return q
}

// refusal describes a refused Acquire: RetryAfter is the longest TTL the
// holders asked for (the shortest for a semaphore), an upper bound of their
// remaining time (etcd leases do not tell it below a second); Position is the
// caller's place in the queue (i its index, or -1: the queue's length).
// Held is the holders' mode, or mode (the request's) when only queue places
// keep the caller out.
func (s *Store) refusal(k kind, vw *view, i int, mode dlock.Mode) dlock.Grant {
	g := dlock.Grant{Held: vw.heldMode(k, mode)}
	first := true
	for j, e := range vw.entries {
		if !vw.holds(k, j) {
			continue
		}
		d := time.Duration(e.v.TTL) * time.Millisecond
		if r, ok := s.remaining(string(e.kv.Key)); ok {
			d = r
		}
		if k == kindSemaphore {
			if first || d < g.RetryAfter {
				g.RetryAfter = d
			}
		} else {
			g.RetryAfter = max(g.RetryAfter, d)
		}
		first = false
	}
	if i < 0 {
		i = len(vw.entries)
	}
	g.Position = queued(k, vw, i)
	return g
}
