package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/go-zookeeper/zk"
)

func validate(req store.Request, timeout time.Duration) error {
	if err := store.ValidName(req.Name); err != nil {
		return err
	}
	if req.Token == "" {
		return &store.InvalidError{Field: "token", Reason: "must not be empty"}
	}
	if req.TTL <= 0 {
		return &store.InvalidError{Field: "ttl", Reason: "must be positive"}
	}
	if req.TTL > timeout {
		return &store.InvalidError{Field: "ttl", Reason: fmt.Sprintf("longer than the ZooKeeper session timeout (%v): the server could end the hold before the lease runs out", timeout)}
	}
	if req.Mode == store.ModeSemaphore && req.Limit < 1 {
		return &store.InvalidError{Field: "limit", Reason: "must be at least 1"}
	}
	return nil
}

// Acquire implements [store.Store] with the ephemeral-sequential recipe:
// the caller's node is created under the lock's znode, the children are
// listed, and the node holds when the rules of the mode say so (the first
// node for an exclusive lock). A node that does not hold is deleted again,
// unless the caller queues (fair waiter, writer intent). A grant's fence is
// issued when it holds (see [Store.nodeFence]): max(last + 1, clock floor),
// written with the holder's node in one multi-op.
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	kind, err := kindOf(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	if err := validate(req, s.SessionTimeout()); err != nil {
		return store.Grant{}, err
	}
	if err := store.ValidHold(req); err != nil {
		return store.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Grant{}, storeErr("acquire", err)
	}
	if kind == "r" && req.Owner == "" {
		req.Owner = req.Token
	}
	g, err := s.acquire(kind, req)
	for n := 0; errors.Is(err, errAnchorGone) && n < 3; n++ {
		g, err = s.acquire(kind, req) // the owner's hold went meanwhile
	}
	if err != nil && !errors.Is(err, store.ErrUpgrade) && !errors.Is(err, store.ErrInvalid) {
		return store.Grant{}, storeErr("acquire", err)
	}
	return g, err
}

// errAnchorGone reports that the hold a re-entry or downgrade was to enter
// beside went before its node was created.
var errAnchorGone = errors.New("the hold to enter beside is gone")

func (s *Store) acquire(kind string, req store.Request) (store.Grant, error) {
	dir := s.dir(kind, req.Name)
	es, err := s.list(dir)
	if err != nil {
		return store.Grant{}, err
	}
	queueable := req.Queue && (kind == "f" || req.Mode == store.ModeWrite)
	qttl := req.QueueTTL
	if qttl <= 0 {
		qttl = req.TTL
	}
	if i := find(es, req.Token); i >= 0 {
		return s.acquireAgain(kind, req, dir, es, i, qttl)
	}
	if req.Mode == store.ModeWrite && req.Owner != "" {
		for i, e := range es {
			if e.token == req.Owner && e.mode == 'r' && holds(kind, es, i, 0) {
				return store.Grant{}, store.ErrUpgrade
			}
		}
	}
	if a := anchorOf(es, req.Mode, req.Owner); a >= 0 {
		return s.acquireBeside(kind, req, dir, es, a)
	}
	// Would a node appended now hold? If not and the caller does not queue,
	// refuse without writing.
	me := entry{kind: kind[0], mode: nodePrefix(req, false)[1], owner: req.Owner, token: req.Token, seq: 1 << 62}
	if kind == "s" && len(es) > 0 && es[0].kind == 's' {
		if held := s.limitOf(dir, es[0]); held != 0 && held != req.Limit {
			return store.Grant{}, &store.LimitError{Name: req.Name, Held: held, Asked: req.Limit}
		}
	}
	if !holds(kind, append(es[:len(es):len(es)], me), len(es), req.Limit) && !queueable {
		return s.refusal(kind, dir, es, -1, req.Limit), nil
	}
	nd := recordOf(req, false)
	data, _ := json.Marshal(nd)
	path, err := s.conn.Create(dir+"/"+nodePrefix(req, false), data, zk.FlagEphemeralSequential, s.acl)
	if errors.Is(err, zk.ErrNoNode) {
		if err = s.ensure(kind, dir); err == nil {
			path, err = s.conn.Create(dir+"/"+nodePrefix(req, false), data, zk.FlagEphemeralSequential, s.acl)
		}
	}
	if err != nil {
		return store.Grant{}, err
	}
	if es, err = s.list(dir); err != nil {
		_ = s.conn.Delete(path, -1)
		return store.Grant{}, err
	}
	i := find(es, req.Token)
	if i < 0 {
		return store.Grant{}, errors.New("own node vanished")
	}
	if holds(kind, es, i, req.Limit) {
		return s.grant(kind, req, dir, path, es, i, &known{d: nd})
	}
	if queueable {
		s.track(path, qttl, 0)
		return s.refusal(kind, dir, es, i, req.Limit), nil
	}
	if err := s.conn.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return store.Grant{}, err
	}
	es = append(es[:i], es[i+1:]...)
	return s.refusal(kind, dir, es, -1, req.Limit), nil
}

// acquireAgain answers an Acquire by a token that has node i of es: a
// repeat by the holder, or a queued caller asking again.
func (s *Store) acquireAgain(kind string, req store.Request, dir string, es []entry, i int, qttl time.Duration) (store.Grant, error) {
	if req.Mode == store.ModeWrite && es[i].mode == 'r' {
		return store.Grant{}, store.ErrUpgrade // a reader's own token
	}
	path := dir + "/" + es[i].name
	if s.lapsed(path) {
		return s.refusal(kind, dir, es, -1, req.Limit), nil
	}
	if !holds(kind, es, i, req.Limit) {
		if req.Queue { // else the place runs out, as on every store
			s.track(path, qttl, 0)
		}
		return s.refusal(kind, dir, es, i, req.Limit), nil
	}
	if kind != "r" && !s.tracked(path) {
		// A hold of another session: see WithTakeOver.
		if s.takeOver {
			return s.repeatElsewhere(kind, dir, req, es)
		}
		d, _, err := s.readData(path)
		if err != nil && !errors.Is(err, errMoved) {
			return store.Grant{}, err
		}
		if err != nil || d.Released {
			return s.refusal(kind, dir, es, -1, req.Limit), nil
		}
	}
	return s.grant(kind, req, dir, path, es, i, nil)
}

// acquireBeside creates req's node beside the hold of node a (its owner's:
// a re-entry or a downgrade) in one multi-op that first checks node a
// still exists. Node a held when listed and a node holds until deleted, so
// the new node is created only while its owner holds; it then holds
// whatever is queued ahead of it (see holds). A re-entry's node carries the
// hold's fence (issued now if the hold has none yet), which outlives the
// first acquisition's node.
func (s *Store) acquireBeside(kind string, req store.Request, dir string, es []entry, a int) (store.Grant, error) {
	d := recordOf(req, true)
	if kind == "r" {
		f, err := s.nodeFence(dir, dir+"/"+es[ownerFirst(es, req.Owner)].name, nil)
		if errors.Is(err, errNodeGone) {
			return store.Grant{}, errAnchorGone
		}
		if err != nil {
			return store.Grant{}, err
		}
		d.Fence = f
	}
	data, _ := json.Marshal(d)
	res, err := s.conn.Multi(
		&zk.CheckVersionRequest{Path: dir + "/" + es[a].name, Version: -1},
		&zk.CreateRequest{Path: dir + "/" + nodePrefix(req, true), Data: data, Acl: s.acl, Flags: zk.FlagEphemeralSequential},
	)
	if err == nil && len(res) != 2 {
		err = errors.New("short multi-op reply")
	}
	for _, r := range res {
		if err == nil {
			err = r.Error
		}
	}
	if errors.Is(err, zk.ErrNoNode) {
		return store.Grant{}, errAnchorGone
	}
	if err != nil {
		return store.Grant{}, err
	}
	path := res[1].String
	anchor := es[a].token
	if es, err = s.list(dir); err != nil {
		_ = s.conn.Delete(path, -1)
		return store.Grant{}, err
	}
	if find(es, anchor) < 0 {
		// The anchor lapsed (or went) before the new node was listed: not
		// a re-entry of a live hold; the caller asks again.
		_ = s.conn.Delete(path, -1)
		return store.Grant{}, errAnchorGone
	}
	i := find(es, req.Token)
	if i < 0 {
		return store.Grant{}, errors.New("own node vanished")
	}
	return s.grant(kind, req, dir, path, es, i, &known{d: d})
}

// grant reports node i (path; own, when known, its data) as held by req,
// starting its TTL, capped by its MaxHold (see boundsOf). A node gone
// before its fence was written (its session expired, or the reaper deleted
// it) is refused: it takes no fence. So is a repeat by a token that
// released its hold before its MinHold ran out.
func (s *Store) grant(kind string, req store.Request, dir, path string, es []entry, i int, own *known) (store.Grant, error) {
	if s.released(path) {
		return s.refusal(kind, dir, es, -1, req.Limit), nil
	}
	if s.owned(path) != nil { // a repeat: released elsewhere? (read only with a MinHold)
		if err := s.releasedElsewhere(kind, path); errors.Is(err, store.ErrNotHeld) {
			return s.refusal(kind, dir, es, -1, req.Limit), nil
		} else if err != nil {
			return store.Grant{}, err
		}
	}
	start := time.Now()
	fence, err := s.fenceOf(kind, req.Mode, dir, path, es, i, own)
	if errors.Is(err, errNodeGone) {
		return s.refusal(kind, dir, append(es[:i:i], es[i+1:]...), -1, req.Limit), nil
	}
	if err != nil {
		return store.Grant{}, err
	}
	if _, ok := s.trackHold(path, req.TTL, fence, s.boundsOf(kind, req, dir, es, start)); !ok {
		return s.refusal(kind, dir, es, -1, req.Limit), nil // lapsed meanwhile
	}
	count := 1
	if kind == "r" {
		count = 0
		for _, e := range es {
			if e.kind == 'r' && e.owner == req.Owner {
				count++
			}
		}
		// One hold, one expiry: every acquisition's TTL is pushed out.
		for _, e := range es {
			if e.kind == 'r' && e.owner == req.Owner {
				s.push(dir+"/"+e.name, req.TTL)
			}
		}
	}
	return store.Grant{Acquired: true, Fence: fence, Count: count}, nil
}

// boundsOf returns the bounds of a hold granted to req now (start: before
// its grant's write was sent) on this process's monotonic clock: its
// MaxHold end from start (no later than grant + MaxHold by any clock), its
// MinHold end from now (no earlier than grant + MinHold). A re-entry's
// MaxHold end is its hold's first grant's; only exclusive modes have a
// MinHold.
func (s *Store) boundsOf(kind string, req store.Request, dir string, es []entry, start time.Time) *bounds {
	b := &bounds{}
	if kind == "r" {
		if j := ownerFirst(es, req.Owner); j >= 0 {
			if first := s.owned(dir + "/" + es[j].name); first != nil {
				b.max = first.maxUntil
				return b
			}
		}
	}
	if req.MaxHold > 0 {
		b.max = start.Add(req.MaxHold)
	}
	if req.MinHold > 0 && exclusive(req.Mode) {
		b.min = time.Now().Add(req.MinHold)
	}
	return b
}

// limitOf is the limit semaphore node e was granted with (0: unknown).
func (s *Store) limitOf(dir string, e entry) int {
	b, _, err := s.conn.Get(dir + "/" + e.name)
	if err != nil {
		return 0
	}
	var d nodeData
	if json.Unmarshal(b, &d) != nil {
		return 0
	}
	return d.Limit
}

// refusal describes a refused Acquire. RetryAfter is the time left of the
// first holder: exact for a hold of this store, else the TTL it asked for
// (an upper bound). Position is the caller's place among the waiters (i its
// index, or -1: their number).
func (s *Store) refusal(kind, dir string, es []entry, i, limit int) store.Grant {
	g := store.Grant{Held: kindMode[kind]}
	if h := firstHolder(es); h >= 0 {
		g.Held = es[h].heldMode()
	}
	for j := range es {
		if holds(kind, es, j, limit) {
			continue
		}
		if i < 0 || j < i {
			g.Position++
		}
	}
	for j, e := range es {
		if !holds(kind, es, j, limit) {
			continue
		}
		path := dir + "/" + e.name
		g.RetryAfter = time.Millisecond // a holder about to go
		if r, ok := s.remaining(path); ok {
			g.RetryAfter = r
		} else if b, _, err := s.conn.Get(path); err == nil {
			var d nodeData
			if json.Unmarshal(b, &d) == nil {
				g.RetryAfter = time.Duration(d.TTL) * time.Millisecond
			}
		}
		break
	}
	return g
}

// Extend implements [store.Store]: it lists each lock's nodes once (the
// lists are fetched concurrently, pipelined on the session) and renews the
// TTL of every request whose node still holds, capped by the hold's
// MaxHold. A node gone with an expired session, or a queue place, reports
// [store.ErrNotHeld]; so does a hold of this store whose TTL or MaxHold
// passed, or that was released before its MinHold ran out. A hold of
// another session is taken over as [Store.Resume] does.
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
	errs := make([]error, len(reqs))
	type job struct {
		dir  string
		es   []entry
		err  error
		done chan struct{}
	}
	jobs := map[string]*job{}
	for _, req := range reqs {
		kind, err := kindOf(req.Mode)
		if err != nil {
			continue
		}
		d := s.dir(kind, req.Name)
		if jobs[d] == nil {
			j := &job{dir: d, done: make(chan struct{})}
			jobs[d] = j
			go func() {
				defer close(j.done)
				j.es, j.err = s.list(j.dir)
			}()
		}
	}
	for _, j := range jobs {
		<-j.done
	}
	for i, req := range reqs {
		kind, err := kindOf(req.Mode)
		if err == nil {
			err = validate(req, s.SessionTimeout())
		}
		if err != nil {
			errs[i] = err
			continue
		}
		j := jobs[s.dir(kind, req.Name)]
		if j.err != nil {
			errs[i] = storeErr("extend", j.err)
			continue
		}
		if errs[i] = s.extendOne(kind, j.dir, j.es, req); errs[i] != nil && !errors.Is(errs[i], store.ErrNotHeld) {
			errs[i] = storeErr("extend", errs[i])
		}
	}
	return errs
}

// extendOne renews req's hold among es, the listed nodes of dir.
func (s *Store) extendOne(kind, dir string, es []entry, req store.Request) error {
	k := find(es, req.Token)
	if k < 0 {
		return store.ErrNotHeld
	}
	path := dir + "/" + es[k].name
	if s.lapsed(path) || s.released(path) || !holds(kind, es, k, req.Limit) {
		return store.ErrNotHeld
	}
	if kind != "r" && s.owned(path) == nil && s.takeOver {
		// Another session's node: this store takes it over with its
		// bounds, as Resume does (WithTakeOver).
		_, err := s.resume(kind, dir, req)
		return err
	}
	if err := s.releasedElsewhere(kind, path); err != nil {
		return err
	}
	if !s.push(path, req.TTL) {
		return store.ErrNotHeld // lapsed meanwhile
	}
	if kind == "r" {
		for _, e := range es {
			if e.kind == 'r' && e.owner == es[k].owner {
				s.push(dir+"/"+e.name, req.TTL)
			}
		}
	}
	return nil
}

// Release implements [store.Store]: it deletes the token's node. The next
// node's watcher (the fair queue's head, or a waiter's Watch) wakes and
// holds by the recipe's rule. An exclusive hold released before its
// MinHold ran out is kept instead (see the package doc): Release answers
// nil, and the reaper deletes the node at grant + MinHold.
func (s *Store) Release(ctx context.Context, req store.Request) error {
	kind, err := kindOf(req.Mode)
	if err != nil {
		return err
	}
	dir := s.dir(kind, req.Name)
	es, err := s.list(dir)
	if err != nil {
		return storeErr("release", err)
	}
	i := find(es, req.Token)
	if i < 0 {
		return store.ErrNotHeld
	}
	path := dir + "/" + es[i].name
	if s.lapsed(path) {
		return store.ErrNotHeld
	}
	if s.released(path) {
		return nil // a repeat of a release that MinHold keeps
	}
	if kept, err := s.keepMin(kind, dir, es[i]); kept {
		return err
	}
	s.untrack(path)
	if err := s.remove(path); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return store.ErrNotHeld
		}
		return storeErr("release", err)
	}
	return nil
}
