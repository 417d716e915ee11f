package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
)

var _ store.Resumer = (*Store)(nil)

type resumeReply struct {
	g   store.Grant
	err error
}

// resumption is one Resume's answers from the nodes.
type resumption struct {
	state          []uint8 // granted: the node confirmed and extended
	grants         []store.Grant
	nOK, nNotHeld  int
	errs           []error
	fatal          error
	confirmedNodes []int
}

// Resume implements [store.Resumer]: it sends req to every node's Resume
// at once, each node's request after this Store's earlier operations on the
// lock reached it, and waits for every node (or its node timeout). The
// token holds the lock again once a majority confirmed that it holds it in
// req.Mode and extended the hold (to req.TTL capped by the hold's MaxHold,
// by each node's clock). Then:
//
//   - the fence is settled as Acquire settles it: the highest fence the
//     confirming nodes report (those that report no more than the fence
//     this Store returned for the token, if it knows of one and they are a
//     majority), written back to those that report less, and used once a
//     majority holds a counter at least that high. So the fence orders the
//     holds as an Acquire's does (see the package doc); it is the fence the
//     token was granted unless a node that granted it late issued a higher
//     one, or the nodes that report the fence the grant settled on are not
//     among the confirming majority (a node may report the fence it issued,
//     not the one raised to, and a fence lower than the one the holder
//     used is then refused by a fenced resource: safe, not live);
//   - Grant.TTL is the hold a majority was extended to (the quorum-th
//     longest of the nodes' TTLs), MaxHoldLeft likewise, and, as for
//     Acquire and Extend, validity counts from before the first request was
//     sent: when TTL − elapsed − drift leaves none, Resume returns a
//     [*store.StoreError] wrapping the validity error and the token keeps
//     whatever the nodes hold until their TTLs end.
//
// It returns [store.ErrNotHeld] when more than N−quorum nodes report that
// the token does not hold the lock (in req.Mode); the nodes that still had
// it are then released, since it is not held as Redlock sees it. It returns
// a [*QuorumError] when the nodes that failed could decide it, and an error
// wrapping [store.ErrNotSupported] for the modes Acquire does not support
// or when a node is not a [store.Resumer]. An election's Resume writes the
// leader's value this Store remembers for the token, or else req.Value, to
// the nodes it raises, so it should carry the value the campaign had.
func (s *Store) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	if err := s.resumeRequest(ctx, req); err != nil {
		return store.Grant{}, err
	}
	if err := s.enter(); err != nil {
		return store.Grant{}, err
	}
	defer s.wg.Done()
	start := time.Now()
	timeout := s.nodeTimeout(req.TTL)
	r := s.resumeNodes(ctx, req, timeout)
	n, q := len(s.nodes), s.quorum
	switch {
	case r.fatal != nil:
		return store.Grant{}, r.fatal
	case r.nOK >= q:
		return s.resumed(ctx, req, start, timeout, r)
	case r.nNotHeld > n-q:
		s.releaseNodes(ctx, req, timeout, r.confirmedNodes)
		return store.Grant{}, store.ErrNotHeld
	}
	return store.Grant{}, &QuorumError{Op: "resume", OK: r.nOK, Quorum: q, Nodes: r.errs}
}

// resumeRequest checks that Resume may send req at all.
func (s *Store) resumeRequest(ctx context.Context, req store.Request) error {
	if err := store.ValidName(req.Name); err != nil {
		return err
	}
	if err := checkMode(req.Mode); err != nil {
		return err
	}
	if req.Token == "" {
		return &store.InvalidError{Field: "token", Reason: "must not be empty"}
	}
	if req.TTL <= 0 {
		return &store.InvalidError{Field: "ttl", Reason: "must be positive"}
	}
	for i, n := range s.nodes {
		if _, ok := n.(store.Resumer); !ok {
			return fmt.Errorf("%w: redlock resume: node %d (%T) is not a store.Resumer", store.ErrNotSupported, i, n)
		}
	}
	if req.Mode == store.ModeElection {
		if err := s.canElect(); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// resumeNodes sends req to every node's Resume and reads every answer.
func (s *Store) resumeNodes(ctx context.Context, req store.Request, timeout time.Duration) *resumption {
	n := len(s.nodes)
	fl := s.flightsOf(req.Name)
	ch := fan(s, ctx, timeout, s.all, func(ctx context.Context, i int) resumeReply {
		if err := fl.wait(ctx, i); err != nil {
			return resumeReply{err: err}
		}
		g, err := s.nodes[i].(store.Resumer).Resume(ctx, req)
		return resumeReply{g, err}
	})
	r := &resumption{state: make([]uint8, n), grants: make([]store.Grant, n)}
	for range n {
		a := <-ch
		switch {
		case a.val.err == nil && a.val.g.Acquired:
			r.state[a.node] = granted
			r.grants[a.node] = a.val.g
			r.nOK++
			r.confirmedNodes = append(r.confirmedNodes, a.node)
		case a.val.err == nil || errors.Is(a.val.err, store.ErrNotHeld):
			r.state[a.node] = refused
			r.nNotHeld++
		case requestError(a.val.err):
			r.state[a.node] = refused
			if r.fatal == nil {
				r.fatal = a.val.err
			}
		default:
			r.state[a.node] = failed
			r.errs = append(r.errs, nodeErr("resume", a.node, a.val.err))
		}
	}
	return r
}

// resumed finishes a Resume that a majority confirmed: it settles the
// fence, checks the validity and remembers the grant.
func (s *Store) resumed(ctx context.Context, req store.Request, start time.Time, timeout time.Duration, r *resumption) (store.Grant, error) {
	prev, value := s.prevHold(req)
	if prev == 0 {
		value = req.Value
	}
	use := s.settleNodes(prev, r.state, r.grants)
	nodeReq := req
	if req.Mode == store.ModeElection {
		nodeReq.Value = settledPrefix + value
	}
	fence, err := s.settle(ctx, nodeReq, timeout, use, r.grants)
	if err != nil {
		return store.Grant{}, err
	}
	var ttls, left []time.Duration
	for i, u := range use {
		if u {
			ttls = append(ttls, r.grants[i].TTL)
			left = append(left, r.grants[i].MaxHoldLeft)
		}
	}
	g := store.Grant{Acquired: true, Fence: fence, Count: 1, TTL: qthHighest(ttls, s.quorum), MaxHoldLeft: qthHighest(left, s.quorum)}
	if g.TTL-time.Since(start)-s.Drift(g.TTL) <= 0 {
		return store.Grant{}, &store.StoreError{Op: "resume", Node: -1, Err: errValidity}
	}
	rec := req
	rec.TTL, rec.MaxHold = g.TTL, g.MaxHoldLeft
	s.remember(rec, fence, value)
	return g, nil
}

// releaseNodes releases req on nodes and waits for the releases (each
// bounded by timeout), whatever ctx does.
func (s *Store) releaseNodes(ctx context.Context, req store.Request, timeout time.Duration, nodes []int) {
	rctx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for _, i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(rctx, timeout)
			defer cancel()
			if err := s.nodes[i].Release(c, req); err != nil && !errors.Is(err, store.ErrNotHeld) {
				s.cfg.logger.Debug("dlock: redlock release after failed resume", "name", req.Name, "node", i, "err", err)
			}
		}()
	}
	wg.Wait()
}
