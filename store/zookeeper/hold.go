package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/go-zookeeper/zk"
)

// This file holds what issue 38 added: a hold's record shown by State and
// List, a release kept by MinHold, Resume and ForceRelease.

var (
	_ store.Resumer       = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// errMoved reports that a node changed or went between its read and the
// multi-op that was to take it into this store's session.
var errMoved = errors.New("the node changed meanwhile")

// adopted is a node taken into this store's session (see move): its new
// path, its data and its bounds on this process's monotonic clock.
type adopted struct {
	path string
	d    nodeData
	b    bounds
}

// move takes the node of entry e under dir (read as d with stat st) into
// this store's session, in one multi-op: it deletes the node (only if its
// data is still the version read), creates it again as an ephemeral node
// of this session under its moved name (the same sequence number, so the
// same place among the name's nodes; see movedName) with data d, recording
// the grant time d.Since (the node's mtime until now), and sets that data
// once more, whose stat gives the ensemble's time of the move. The hold's
// MinHold and MaxHold ends, grant + MinHold and grant + MaxHold by the
// ensemble's clock, become instants of this process's monotonic clock from
// that time: the MaxHold end counted from before the multi-op was sent, the
// MinHold end from after its answer, so neither bound is loosened by the
// round trip. errMoved when the node changed or went meanwhile.
func (s *Store) move(dir string, e entry, d nodeData, st *zk.Stat) (adopted, error) {
	old := dir + "/" + e.name
	// A holding node without a fence is a queue place handed the hold
	// whose grant has not been written: it is granted now (by the fence
	// write that follows), not at its creation. A reader sharing the
	// name's fence writes none: its creation was its grant.
	granted := d.Fence != 0 || e.mode == 'r'
	if d.Since == 0 && granted {
		d.Since = st.Mtime
	}
	data, _ := json.Marshal(d)
	moved := dir + "/" + movedName(e)
	start := time.Now()
	res, err := s.conn.Multi(
		&zk.DeleteRequest{Path: old, Version: st.Version},
		&zk.CreateRequest{Path: moved, Data: data, Acl: s.acl, Flags: zk.FlagEphemeral},
		&zk.SetDataRequest{Path: moved, Data: data, Version: -1},
	)
	end := time.Now()
	if err == nil && (len(res) != 3 || res[2].Stat == nil) {
		err = errors.New("short multi-op reply")
	}
	if err != nil {
		if len(res) == 3 && (errors.Is(res[0].Error, zk.ErrNoNode) || errors.Is(res[0].Error, zk.ErrBadVersion)) {
			return adopted{}, errMoved
		}
		return adopted{}, err
	}
	s.untrack(old)
	now := time.UnixMilli(res[2].Stat.Mtime)
	since := now
	if granted {
		since = time.UnixMilli(d.Since)
	}
	a := adopted{path: moved, d: d}
	// Times in ms: a millisecond of margin each way.
	if d.MaxHold > 0 {
		a.b.max = start.Add(since.Add(d.MaxHold).Sub(now) - time.Millisecond)
	}
	if d.MinHold > 0 {
		a.b.min = end.Add(since.Add(d.MinHold).Sub(now) + time.Millisecond)
	}
	return a, nil
}

// readData reads the data and stat of the node at path: errMoved when it
// is gone.
func (s *Store) readData(path string) (nodeData, *zk.Stat, error) {
	raw, st, err := s.conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nodeData{}, nil, errMoved
	}
	if err != nil {
		return nodeData{}, nil, err
	}
	var d nodeData
	_ = json.Unmarshal(raw, &d) // not ours: no record
	return d, st, nil
}

// keepMin keeps the hold of node e under dir when its token releases it
// before its MinHold ran out (exclusive modes only): the node is marked
// released in its data (with its grant time, as its mtime changes) and
// left to this store's reaper, which deletes it at grant + MinHold (capped
// by its MaxHold end). A node of another session (granted through another
// Store) is marked the same way and left to the granting process's reaper,
// which reads the mark when the hold's TTL runs out (endOrKeep) and then
// keeps it until grant + MinHold: the hold ends at the later of its TTL's
// end and grant + MinHold. With WithTakeOver it is instead moved into this
// store's session (see move) and ends at grant + MinHold. It reports
// whether it kept the hold; err is then the Release's answer.
func (s *Store) keepMin(kind, dir string, e entry) (bool, error) {
	if !exclusive(kindMode[kind]) {
		return false, nil
	}
	path := dir + "/" + e.name
	l := s.owned(path)
	if l != nil && (l.minUntil.IsZero() || !time.Now().Before(l.minUntil)) {
		return false, nil
	}
	d, st, err := s.readData(path)
	if errors.Is(err, errMoved) {
		return true, store.ErrNotHeld
	}
	if err != nil {
		return true, storeErr("release", err)
	}
	if l == nil && d.MinHold == 0 {
		return false, nil
	}
	if d.Released { // released through another Store, or a repeat
		if l != nil {
			s.keepUntil(path, l.minUntil)
		}
		return true, nil
	}
	d.Released = true
	if l != nil || !s.takeOver {
		// Marked in the node's data: this store's reaper (or the
		// granting process's, see endOrKeep) keeps the node until
		// grant + MinHold.
		if d.Since == 0 {
			d.Since = st.Mtime
		}
		if l != nil {
			s.keepUntil(path, l.minUntil) // before the write: the reaper must not end it at its TTL
		} else {
			s.untrack(path) // a deadline this store kept for it must not end it
		}
		data, _ := json.Marshal(d)
		if _, err := s.conn.Set(path, data, st.Version); err != nil {
			if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
				return true, store.ErrNotHeld
			}
			return true, storeErr("release", err)
		}
		return true, nil
	}
	a, err := s.move(dir, e, d, st)
	if errors.Is(err, errMoved) {
		return true, store.ErrNotHeld
	}
	if err != nil {
		return true, storeErr("release", err)
	}
	if !a.b.min.After(time.Now()) { // its MinHold ran out meanwhile
		return true, ignoreNoNode(s.remove(a.path))
	}
	s.trackHold(a.path, time.Until(a.b.min), d.Fence, &a.b)
	s.keepUntil(a.path, a.b.min)
	return true, nil
}

// releasedElsewhere answers [store.ErrNotHeld] for an exclusive hold at
// path released through another process before its MinHold ran out (its
// node's data says so; see keepMin), nil otherwise. It reads the node
// only when that can be: for a hold of this store with a MinHold, or a
// hold of another session.
func (s *Store) releasedElsewhere(kind, path string) error {
	if !exclusive(kindMode[kind]) {
		return nil
	}
	if l := s.owned(path); l != nil && l.minUntil.IsZero() {
		return nil
	}
	d, _, err := s.readData(path)
	if errors.Is(err, errMoved) {
		return store.ErrNotHeld
	}
	if err != nil {
		return err
	}
	if d.Released {
		return store.ErrNotHeld
	}
	return nil
}

func ignoreNoNode(err error) error {
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return storeErr("release", err)
}

// Resume implements [store.Resumer]: it lists the name's nodes, confirms
// that req.Token's node holds in req.Mode (not released, within its TTL
// and MaxHold) and extends it to req.TTL, capped by its MaxHold end. A
// hold this store granted or took over is extended on its reaper. A node
// of another session (granted by another process, or by this one before a
// restart while its old session lives on) is first taken into this store's
// session (see [Store.move]): it then lives as long as this session, its
// TTL and bounds kept by this process. A reentrant hold of another session
// is not moved (it is one node per acquisition): its TTL is renewed as
// Extend does. ErrNotHeld when the token holds nothing in req.Mode.
func (s *Store) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	kind, err := kindOf(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	v := req
	if v.Mode == store.ModeSemaphore && v.Limit < 1 {
		v.Limit = 1 // the held limit decides
	}
	if err := validate(v, s.SessionTimeout()); err != nil {
		return store.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Grant{}, storeErr("resume", err)
	}
	if kind == "r" && req.Owner == "" {
		req.Owner = req.Token
	}
	g, err := s.resume(kind, s.dir(kind, req.Name), req)
	if err != nil && !errors.Is(err, store.ErrNotHeld) {
		return store.Grant{}, storeErr("resume", err)
	}
	return g, err
}

// resume is Resume after validation, asked again when a node moved or a
// reentrant hold's first node went meanwhile.
func (s *Store) resume(kind, dir string, req store.Request) (store.Grant, error) {
	for n := 0; ; n++ {
		g, err := s.resumeOnce(kind, dir, req)
		if !errors.Is(err, errMoved) && !errors.Is(err, errAnchorGone) {
			return g, err
		}
		if n == 3 {
			return store.Grant{}, store.ErrNotHeld
		}
	}
}

func (s *Store) resumeOnce(kind, dir string, req store.Request) (store.Grant, error) {
	es, err := s.list(dir)
	if err != nil {
		return store.Grant{}, err
	}
	i := find(es, req.Token)
	if i < 0 || es[i].heldMode() != req.Mode {
		return store.Grant{}, store.ErrNotHeld
	}
	limit := req.Limit
	if kind == "s" {
		if l := s.limitOf(dir, es[0]); l > 0 {
			limit = l
		}
	}
	path := dir + "/" + es[i].name
	if s.lapsed(path) || s.released(path) || !holds(kind, es, i, limit) {
		return store.Grant{}, store.ErrNotHeld
	}
	var own *known
	switch {
	case kind != "r" && s.owned(path) == nil && s.tracked(path):
		// A queue place of this session that was handed the hold: its
		// grant, as the waiter's Acquire would make it.
		g, err := s.grant(kind, req, dir, path, es, i, nil)
		if err == nil && !g.Acquired {
			err = store.ErrNotHeld
		}
		if err != nil {
			return store.Grant{}, err
		}
	case kind != "r" && s.owned(path) == nil:
		if path, own, err = s.resumeMoved(dir, es[i], req); err != nil {
			return store.Grant{}, err
		}
	default:
		if err := s.releasedElsewhere(kind, path); err != nil {
			return store.Grant{}, err
		}
		if !s.push(path, req.TTL) {
			return store.Grant{}, store.ErrNotHeld
		}
	}
	g := store.Grant{Acquired: true, Count: 1, TTL: req.TTL}
	if kind == "r" {
		g.Count = 0
		for _, e := range es {
			if e.kind == 'r' && e.owner == req.Owner {
				g.Count++
				s.push(dir+"/"+e.name, req.TTL)
			}
		}
	}
	if g.Fence, err = s.fenceOf(kind, req.Mode, dir, path, es, i, own); err != nil {
		if errors.Is(err, errNodeGone) {
			err = store.ErrNotHeld
		}
		return store.Grant{}, err
	}
	if l := s.owned(path); l != nil && !l.maxUntil.IsZero() {
		g.MaxHoldLeft = max(time.Until(l.maxUntil), 0)
		g.TTL = min(g.TTL, g.MaxHoldLeft)
	}
	return g, nil
}

// repeatElsewhere answers an Acquire repeated by the holder of a node of
// another session (its grant went through another process, a retry
// through another replica of the service): the hold is taken over as
// Resume takes it, and its grant returned. A released hold, or one whose
// node changed meanwhile, is refused.
func (s *Store) repeatElsewhere(kind, dir string, req store.Request, es []entry) (store.Grant, error) {
	g, err := s.resumeOnce(kind, dir, req)
	if errors.Is(err, store.ErrNotHeld) || errors.Is(err, errMoved) {
		return s.refusal(kind, dir, es, -1, req.Limit), nil
	}
	g.TTL, g.MaxHoldLeft = 0, 0
	return g, err
}

// resumeMoved moves the hold of node e (another session's) into this
// store's session for Resume and tracks it for req.TTL, capped by its
// MaxHold end. It returns the node's new path and its data.
func (s *Store) resumeMoved(dir string, e entry, req store.Request) (string, *known, error) {
	d, st, err := s.readData(dir + "/" + e.name)
	if err != nil {
		return "", nil, err
	}
	if d.Released {
		return "", nil, store.ErrNotHeld
	}
	a, err := s.move(dir, e, d, st)
	if err != nil {
		return "", nil, err
	}
	if _, ok := s.trackHold(a.path, req.TTL, a.d.Fence, &a.b); !ok {
		return "", nil, store.ErrNotHeld // past its MaxHold: the reaper ends it
	}
	return a.path, &known{d: a.d, ver: 1}, nil
}

// heldLimit is the limit a semaphore's permits are held with (0 for
// another pattern or when unknown).
func (s *Store) heldLimit(dir string, es []entry) int {
	if len(es) == 0 || es[0].kind != 's' {
		return 0
	}
	return s.limitOf(dir, es[0])
}

// owners describes each live hold among es (one for a reentrant hold, its
// first node's record; one for each reader and permit, a reader with the
// name's current fence) and returns the
// paths of every holding node. Since is the grant's time by the ensemble's
// clock: the node's mtime (the grant's write: its fence, or a reader's
// creation), or the time recorded when that no longer is (see nodeData).
func (s *Store) owners(dir string, es []entry, limit int) ([]store.Holder, []string) {
	var hs []store.Holder
	var paths []string
	reentrant := false
	for j, e := range es {
		if !holds("", es, j, limit) {
			continue
		}
		paths = append(paths, dir+"/"+e.name)
		if e.kind == 'r' {
			if reentrant {
				continue
			}
			reentrant = true
			e = es[ownerFirst(es, e.owner)]
		}
		h := s.holderOf(dir, e)
		if h.Fence == 0 && e.mode == 'r' {
			h.Fence = s.currentFence(dir) // the fence readers share
		}
		hs = append(hs, h)
	}
	return hs, paths
}

// holderOf reads the record of holding node e under dir. A node that
// holds but whose grant has not written its fence yet (a fair waiter or a
// queued writer that has just reached the head) gets it issued now, as its
// grant would (as [Store.Leader] does): a hold is shown with its fence. A
// node gone since the listing shows as unknown.
func (s *Store) holderOf(dir string, e entry) store.Holder {
	path := dir + "/" + e.name
	d, st, err := s.readData(path)
	if err == nil && d.Fence == 0 && s.cached(path) == 0 && e.mode != 'r' && e.kind != 'r' {
		if _, err = s.nodeFence(dir, path, &known{d: d, ver: st.Version}); err == nil {
			d, st, err = s.readData(path)
		}
	}
	if err != nil {
		return store.Holder{}
	}
	h := store.Holder{Owner: d.Holder, Data: d.Data, Fence: d.Fence}
	if h.Fence == 0 {
		h.Fence = s.cached(path)
	}
	since := d.Since
	if since == 0 {
		since = st.Mtime
	}
	h.Since = time.UnixMilli(since).UTC()
	return h
}

// ForceRelease implements [store.ForceReleaser]: it lists the name's
// nodes and deletes every node that holds, in one multi-op (asked again
// when one went meanwhile), whatever its session: a hold kept by MinHold
// too. Queued nodes (fair waiters, writer intents) keep their places, and
// the first of them may then hold. The name's fence child stays, so the
// next grant's fence is above every ended hold's. The deletions wake the
// name's watchers (ZooKeeper child and exists watches). The process that
// granted an ended hold finds its node gone: its Extend answers
// [store.ErrNotHeld].
func (s *Store) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	if err := store.ValidName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, storeErr("force release", err)
	}
	dir := s.dir("", name)
	for range maxFenceTries {
		es, err := s.list(dir)
		if err != nil {
			return nil, storeErr("force release", err)
		}
		hs, paths := s.owners(dir, es, s.heldLimit(dir, es))
		if len(paths) == 0 {
			return nil, nil
		}
		ops := make([]any, len(paths))
		for i, p := range paths {
			ops[i] = &zk.DeleteRequest{Path: p, Version: -1}
		}
		res, err := s.conn.Multi(ops...)
		if err == nil {
			for _, p := range paths {
				s.untrack(p)
			}
			return hs, nil
		}
		gone := false
		for _, r := range res {
			gone = gone || errors.Is(r.Error, zk.ErrNoNode)
		}
		if !gone {
			return nil, storeErr("force release", err)
		}
	}
	return nil, storeErr("force release", errors.New("the name's holds changed every time"))
}
