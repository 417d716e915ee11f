package etcd

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-dev/dlock/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Acquire implements [store.Store]. It reads the lock's keys, decides by
// the rules of the mode, and writes in a transaction whose comparisons make
// the decision hold at commit (optimistic concurrency: a conflict rereads;
// after 16 conflicts in a row the answer is a refusal). A new hold is a key
// attached to its own etcd lease of the TTL rounded up to whole seconds (at
// least etcd's minimum lease TTL), which etcd's leader expires on its own
// clock.
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	k, err := kindOf(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	if err := validate(req); err != nil {
		return store.Grant{}, err
	}
	if err := store.ValidHold(req); err != nil {
		return store.Grant{}, err
	}
	if req.Mode == store.ModeReentrant && req.Owner == "" {
		req.Owner = req.Token
	}
	var last store.Grant
	for range maxAttempts {
		g, err := s.tryAcquire(ctx, k, req, &last)
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			if errors.Is(err, store.ErrUpgrade) || errors.Is(err, store.ErrInvalid) {
				return store.Grant{}, err
			}
			return store.Grant{}, storeErr("acquire", err)
		}
		return g, nil
	}
	return last, nil // lost every race: someone else got it
}

// tryAcquire makes one attempt at req on one read of the lock and returns
// the grant or refusal, or errRetry when the lock changed before the write
// could commit. It sets last to the refusal that read implies: Acquire's
// answer once every attempt lost its race.
func (s *Store) tryAcquire(ctx context.Context, k kind, req store.Request, last *store.Grant) (store.Grant, error) {
	vw, err := s.read(ctx, k, req.Name)
	if err != nil {
		return store.Grant{}, err
	}
	key := s.key(k, req)
	if s.lapsed(key) {
		return store.Grant{}, errRetry
	}
	*last = s.refusal(k, vw, -1, req.Mode)
	if i, me := vw.find(req.Token); me != nil {
		if req.Mode == store.ModeWrite && me.v.Mode == store.ModeRead {
			return store.Grant{}, store.ErrUpgrade // a reader's own token
		}
		return s.rejoin(ctx, k, req, vw, i, key)
	}
	if held, left, ok := s.otherHold(vw); ok {
		g := *last
		g.Held, g.RetryAfter = held, left
		return s.refuseForOther(ctx, k, req, vw, key, g)
	}
	if k == kindSemaphore && len(vw.entries) > 0 && vw.entries[0].v.Limit != req.Limit {
		return store.Grant{}, &store.LimitError{Name: req.Name, Held: vw.entries[0].v.Limit, Asked: req.Limit}
	}
	if exclusive(k, req.Mode) && len(vw.entries) > 0 {
		return s.joinOrRefuse(ctx, k, req, vw, key, *last)
	}
	h, ok := s.admit(k, req, vw, key)
	if !ok {
		return *last, nil
	}
	return s.commitHold(ctx, k, req, vw, key, h)
}

// exclusive reports whether a request of mode m on a lock of kind k is
// granted only while the lock has no keys: a mutex, a fair lock, an
// election, a writer.
func exclusive(k kind, m store.Mode) bool {
	return k == kindMutex || k == kindFair || k == kindElection || m == store.ModeWrite
}

// queues reports whether req, refused, takes a queue place: a fair waiter
// or a writer that asks to queue.
func queues(k kind, req store.Request) bool {
	return req.Queue && (k == kindFair || req.Mode == store.ModeWrite)
}

// rejoin decides a request whose token already has key i on the lock: a
// queue place behind the head waits, the head of the queue claims the
// lock, and a hold is renewed.
func (s *Store) rejoin(ctx context.Context, k kind, req store.Request, vw *view, i int, key string) (store.Grant, error) {
	switch {
	case vw.entries[i].v.Rel:
		// Released before its MinHold: the token holds nothing, the
		// name stays taken until the hold's lease ends.
		return s.refusal(k, vw, -1, req.Mode), nil
	case !vw.holds(k, i):
		return s.waitInPlace(ctx, k, req, vw, i, key)
	case !vw.entries[i].v.Held:
		return s.claimHead(ctx, k, req, vw, i, key)
	}
	return s.reacquire(ctx, k, req, vw, vw.entries[i], key)
}

// waitInPlace refuses a caller whose key i is a queue place behind the
// head, with its position (and another kind's hold when one keeps the
// name), keeping the place alive for another QueueTTL when it asks to
// queue (Queue false leaves it to run out, as on every store).
func (s *Store) waitInPlace(ctx context.Context, k kind, req store.Request, vw *view, i int, key string) (store.Grant, error) {
	if err := s.keepPlace(ctx, req, vw.entries[i], key); err != nil {
		return store.Grant{}, err
	}
	g := s.refusal(k, vw, i, req.Mode)
	if held, left, ok := s.otherHold(vw); ok {
		g.Held, g.RetryAfter = held, left
	}
	return g, nil
}

// claimHead claims the lock for a caller whose queue place i reached the
// head and returns the grant; while another kind holds the name it refuses
// the caller instead, keeping its place.
func (s *Store) claimHead(ctx context.Context, k kind, req store.Request, vw *view, i int, key string) (store.Grant, error) {
	me := vw.entries[i]
	if held, left, ok := s.otherHold(vw); ok {
		g := s.refusal(k, vw, i, req.Mode)
		g.Held, g.RetryAfter = held, left
		if err := s.keepPlace(ctx, req, me, key); err != nil {
			return store.Grant{}, err
		}
		return g, nil
	}
	fence, err := s.claim(ctx, req.Name, me, vw.fence, req.TTL, key, true, s.othersUnchanged(k, req.Name, vw))
	if err != nil {
		return store.Grant{}, err
	}
	return store.Grant{Acquired: true, Fence: fence, Count: 1}, nil
}

// reacquire renews the hold me that the caller already has (a retried
// Acquire) for req.TTL, with every other acquisition of a reentrant owner,
// and returns its grant: the hold's own fence and the owner's hold count.
func (s *Store) reacquire(ctx context.Context, k kind, req store.Request, vw *view, me *entry, key string) (store.Grant, error) {
	if _, err := s.keepAlive(ctx, req.Name, me, req.TTL, key); err != nil {
		return store.Grant{}, err
	}
	if k == kindReentrant {
		if err := s.pushOutReentry(ctx, req, vw, me); err != nil {
			return store.Grant{}, err
		}
	}
	return store.Grant{Acquired: true, Fence: me.fence(), Count: s.count(k, vw, me)}, nil
}

// refuseForOther answers a request with no key on a name that another kind
// holds (a name is one lock) with refusal, which reports that hold; a fair
// waiter or writer that asks to queue takes its queue place first.
func (s *Store) refuseForOther(ctx context.Context, k kind, req store.Request, vw *view, key string, refusal store.Grant) (store.Grant, error) {
	if !queues(k, req) {
		return refusal, nil
	}
	g, err := s.enqueue(ctx, k, req, vw, key)
	g.Held, g.RetryAfter = refusal.Held, refusal.RetryAfter
	return g, err
}

// joinOrRefuse decides an exclusive request with no key on a lock that has
// keys: [store.ErrUpgrade] when the caller's owner holds it as a reader, a
// queue place when a fair waiter or writer asks to queue, else refusal.
func (s *Store) joinOrRefuse(ctx context.Context, k kind, req store.Request, vw *view, key string, refusal store.Grant) (store.Grant, error) {
	if req.Mode == store.ModeWrite && req.Owner != "" {
		for i, e := range vw.entries {
			if e.token == req.Owner && e.v.Mode == store.ModeRead && vw.holds(k, i) {
				return store.Grant{}, store.ErrUpgrade
			}
		}
	}
	if queues(k, req) {
		return s.enqueue(ctx, k, req, vw, key)
	}
	return refusal, nil
}

// newHold is the transaction that grants a request a new key: the key's
// value, the comparisons that keep the decision true at commit, a
// semaphore permit's slot key ("" for other kinds), the fence when it
// is known before the write (0: a new fence is issued), and the TTL of its
// lease (the request's, capped by the hold's MaxHold).
type newHold struct {
	v     val
	cmps  []clientv3.Cmp
	slot  string
	fence int64
	ttl   time.Duration
}

// admit decides whether a request with no key may take the lock beside the
// keys in vw (an exclusive request gets here only when there are none) and
// returns the transaction that grants it; false means the lock refuses.
func (s *Store) admit(k kind, req store.Request, vw *view, key string) (newHold, bool) {
	h := newHold{
		v:    val{Mode: req.Mode, Owner: req.Owner, Held: true, Value: req.Value},
		cmps: append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, s.othersUnchanged(k, req.Name, vw)...),
	}
	h.v.record(k, req)
	h.v.Since = time.Now().UnixMilli()
	h.ttl, _ = h.v.bound(req.TTL, time.UnixMilli(h.v.Since))
	h.v.TTL = ms(h.ttl)
	switch {
	case exclusive(k, req.Mode):
		h.cmps = append(h.cmps, emptyCmp(s.lockPrefix(k, req.Name)))
		return h, true
	case k == kindReentrant:
		return admitReentry(s.lockPrefix(k, req.Name), req, vw, h)
	case k == kindSemaphore:
		return s.admitPermit(req, vw, h)
	}
	return s.admitReader(req, vw, h)
}

// emptyCmp holds while no key exists under the lock prefix pfx.
func emptyCmp(pfx string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(pfx).WithPrefix(), "=", 0)
}

// unchangedCmp holds while no key under the lock prefix pfx was written
// since vw was read.
func unchangedCmp(pfx string, vw *view) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(pfx).WithPrefix(), "<", vw.rev+1)
}

// admitReentry lets a reentrant request in on a free lock, or beside the
// keys of its own owner's hold (sharing that hold's fence); another owner's
// hold refuses it.
func admitReentry(pfx string, req store.Request, vw *view, h newHold) (newHold, bool) {
	if len(vw.entries) == 0 {
		h.cmps = append(h.cmps, emptyCmp(pfx))
		return h, true
	}
	first := vw.entries[0]
	if first.v.Owner != req.Owner {
		return newHold{}, false
	}
	// One hold: the re-entry keeps the first grant's record and bound.
	h.v.Who, h.v.Data, h.v.Since, h.v.Max = first.v.Who, first.v.Data, first.v.Since, first.v.Max
	ttl, ok := h.v.bound(req.TTL, time.Now())
	if !ok {
		return newHold{}, false // the hold ran out at its MaxHold
	}
	h.ttl, h.v.TTL = ttl, ms(ttl)
	h.fence = first.fence()
	h.v.Fence = h.fence
	h.cmps = append(h.cmps, unchangedCmp(pfx, vw))
	return h, true
}

// admitPermit gives a semaphore request the first free slot while fewer
// than Limit permits are held; a full semaphore refuses it.
func (s *Store) admitPermit(req store.Request, vw *view, h newHold) (newHold, bool) {
	if len(vw.entries) >= req.Limit {
		return newHold{}, false
	}
	slot := -1
	for i := range req.Limit {
		if !vw.slots[i] {
			slot = i
			break
		}
	}
	if slot < 0 {
		return newHold{}, false
	}
	h.v.Limit, h.v.Slot = req.Limit, slot+1
	h.slot = s.slotKey(req.Name, slot)
	h.cmps = append(h.cmps, clientv3.Compare(clientv3.CreateRevision(h.slot), "=", 0))
	return h, true
}

// admitReader lets a reader in while no writer key is on the read-write
// lock, or beside the writer whose token is the reader's owner while it
// holds; any other writer key (a hold or an intent) refuses it. The reader
// gets the lock's current fence, checked to be still current at commit.
func (s *Store) admitReader(req store.Request, vw *view, h newHold) (newHold, bool) {
	pfx := s.lockPrefix(kindRW, req.Name)
	beside := false
	for i, e := range vw.entries {
		if e.v.Mode == store.ModeWrite {
			if req.Owner == "" || e.token != req.Owner || !vw.holds(kindRW, i) {
				return newHold{}, false
			}
			beside = true
		}
	}
	if beside {
		h.cmps = append(h.cmps, unchangedCmp(pfx, vw))
	} else {
		h.cmps = append(h.cmps, emptyCmp(pfx+writerSub))
	}
	if vw.fence != nil {
		// The current fence, checked to be still current at commit
		// (a writer that came and went since the read changed it).
		h.fence = lastFence(vw.fence)
		h.v.Fence = h.fence // a retry returns it
		h.cmps = append(h.cmps, s.fenceUnchanged(req.Name, vw.fence))
	}
	return h, true
}

// commitHold writes h, req's new key, on an etcd lease of its own and
// returns the grant, or errRetry when a comparison failed (the lock changed
// since vw was read). A grant whose fence was not known before the write
// gets a new one ([Store.nextFence]), recorded in its key and on the name's fence
// key, and commits only if no other grant issued a fence since vw was read.
func (s *Store) commitHold(ctx context.Context, k kind, req store.Request, vw *view, key string, h newHold) (store.Grant, error) {
	lease, err := s.cli.Grant(ctx, seconds(h.ttl))
	if err != nil {
		return store.Grant{}, err
	}
	cmps := h.cmps
	var fenceOps []clientv3.Op
	if h.fence == 0 {
		h.fence = s.nextFence(vw.fence)
		h.v.Fence = h.fence
		cmps = append(cmps, s.fenceUnchanged(req.Name, vw.fence))
		fenceOps = append(fenceOps, s.fencePut(req.Name, h.fence))
	}
	ops := []clientv3.Op{clientv3.OpPut(key, h.v.encode(), clientv3.WithLease(lease.ID))}
	if h.slot != "" {
		ops = append(ops, clientv3.OpPut(h.slot, req.Token, clientv3.WithLease(lease.ID)))
	}
	ops = append(ops, fenceOps...)
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(lease.ID)
		if err == nil {
			err = errRetry
		}
		return store.Grant{}, err
	}
	s.track(key, lease.ID, h.ttl)
	count := 1
	if k == kindReentrant {
		count = len(vw.entries) + 1
	}
	return store.Grant{Acquired: true, Fence: h.fence, Count: count}, nil
}

// keepPlace renews the queue place me of a queued request for its queue
// TTL (the TTL when none is given); a request that does not ask to queue
// leaves the place as it is.
func (s *Store) keepPlace(ctx context.Context, req store.Request, me *entry, key string) error {
	if !req.Queue {
		return nil
	}
	qttl := req.QueueTTL
	if qttl <= 0 {
		qttl = req.TTL
	}
	_, err := s.keepAlive(ctx, req.Name, me, qttl, key)
	return err
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
// queue TTL) and gets a new fence ([Store.nextFence] after fk, the name's fence
// key as read with me), recorded in the key and on the fence key. It fails
// with errRetry when the key or the fence key changed since they were read
// (expired, claimed by someone else, another grant), or when this
// store judged the place lapsed. A hold claimed for a waiter of this store
// (mine, or a handoff to a place it tracks) is tracked for ttl.
func (s *Store) claim(ctx context.Context, name string, me *entry, fk *mvccpb.KeyValue, ttl time.Duration, key string, mine bool, others []clientv3.Cmp) (int64, error) {
	old := clientv3.LeaseID(me.kv.Lease)
	if s.isDead(old) {
		return 0, errRetry // the place lapsed: its revocation is on its way
	}
	mine = mine || s.tracks(key)
	nv := me.v
	nv.Since = time.Now().UnixMilli() // the grant: the queue key kept the rest of the record
	if nv.Max > 0 {
		ttl = min(ttl, time.Duration(nv.Max)*time.Millisecond)
	}
	lease, err := s.cli.Grant(ctx, seconds(ttl))
	if err != nil {
		return 0, err
	}
	fence := s.nextFence(fk)
	nv.Held, nv.TTL, nv.Fence = true, ms(ttl), fence
	resp, err := s.cli.Txn(ctx).If(append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", me.kv.CreateRevision),
		clientv3.Compare(clientv3.ModRevision(key), "=", me.kv.ModRevision), // nobody claimed it since
		s.fenceUnchanged(name, fk),
	}, others...)...).Then(
		clientv3.OpPut(key, nv.encode(), clientv3.WithLease(lease.ID)),
		s.fencePut(name, fence),
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
	return fence, nil
}

// enqueue adds the caller's queue key (fair waiter or writer intent) on a
// lease of the queue TTL: a waiter that dies leaves the queue when it runs
// out. A claim moves the key to a lease of the hold's TTL.
func (s *Store) enqueue(ctx context.Context, k kind, req store.Request, vw *view, key string) (store.Grant, error) {
	qttl := req.QueueTTL
	if qttl <= 0 {
		qttl = req.TTL
	}
	lease, err := s.cli.Grant(ctx, seconds(qttl))
	if err != nil {
		return store.Grant{}, err
	}
	v := val{Mode: req.Mode, Owner: req.Owner, TTL: ms(qttl), Hold: ms(req.TTL)}
	v.record(k, req) // kept for the claim
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, v.encode(), clientv3.WithLease(lease.ID))).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(lease.ID)
		if err == nil {
			err = errRetry
		}
		return store.Grant{}, err
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
func (s *Store) refusal(k kind, vw *view, i int, mode store.Mode) store.Grant {
	g := store.Grant{Held: vw.heldMode(k, mode)}
	first := true
	now := time.Now()
	for j, e := range vw.entries {
		if !vw.holds(k, j) {
			continue
		}
		d := s.left(e, now)
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
