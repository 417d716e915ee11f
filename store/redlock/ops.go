package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// proposedFloorLead is how far ahead of this clock, in fence units (µs),
// the fence floor proposed to the nodes of a mutex grant is.
const proposedFloorLead = 20_000

// errValidity reports a majority granted too late to leave any validity.
var errValidity = errors.New("redlock: majority granted after the lease ran out")

// Per-node outcome of an Acquire.
const (
	pending uint8 = iota
	granted
	refused
	failed
)

func checkMode(m store.Mode) error {
	switch m {
	case store.ModeMutex, store.ModeRead, store.ModeWrite, store.ModeElection:
		return nil
	}
	return fmt.Errorf("%w: redlock cannot keep mode %v consistent over a quorum", store.ErrNotSupported, m)
}

// requestError reports a node's refusal of the request itself, which no
// other node will answer differently.
func requestError(err error) bool {
	return errors.Is(err, store.ErrNotSupported) || errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrUpgrade)
}

type acquireReply struct {
	g   store.Grant
	err error
}

// acquisition is one Acquire in progress: the request as made and as sent
// to the nodes, what the nodes answered so far, and the fan-out that
// delivers the rest.
type acquisition struct {
	req     store.Request // as the caller made it (a mutex's Queue cleared)
	nodeReq store.Request // as sent to the nodes (an election's value pending)
	value   string        // to remember with the grant; an election's to announce
	prev    int64         // the fence of the token's current grant, or 0
	start   time.Time     // before the first request: validity counts from it
	timeout time.Duration // the node timeout
	f       *fanout[acquireReply]

	state                       []uint8
	grants                      []store.Grant
	nGranted, nRefused, nFailed int
	answered                    int
	errs                        []error // one *store.StoreError per failed node
	fatal                       error   // the first request error (see requestError)
}

// Acquire implements [store.Store]. It sends req to every node at once and
// returns as soon as the outcome is decided:
//
//   - a grant, once a majority granted, the fence was written back to a
//     majority (see the package doc) and validity remains;
//   - a refusal (Grant.Acquired false) when the lock is held by another
//     token on enough nodes to deny a majority, or on some nodes while the
//     nodes that answered could still make a majority once it is free.
//     RetryAfter is the time after which a majority of nodes may be free,
//     by their clocks;
//   - a [*QuorumError] (wrapping [store.ErrNoQuorum]) when too many nodes
//     failed or did not answer within the node timeout to make a majority
//     (N−quorum+1 or more), whatever the others answered, with each node's
//     failure as a [*store.StoreError] naming its index;
//   - a [*store.StoreError] when a majority granted but no validity was
//     left;
//   - an error wrapping [store.ErrNotSupported] for the fair, semaphore and
//     reentrant modes (and elections over nodes that are not
//     [store.Elector]s), or whatever request error (invalid name, ...) the
//     nodes return.
//
// A grant of the write side of a read-write lock, an election, a repeated
// Acquire by the token that holds, and a read grant with a Holder or Data,
// wait for every node to answer (or its node timeout) before settling the
// fence, so that readers, the repeat and [Store.Leader] find it (see
// settleNodes and election.go), and a recorded reader's fence is the
// highest any of its nodes issued, as State's Owners show it.
// An election's leadership becomes visible to [Store.Leader] only once
// validity is known to remain: Acquire then marks it settled on the nodes
// (see announce) and returns the grant whatever that marking does, so
// Leader never reports a term that Acquire did not return.
//
// In every case but a grant, Acquire first releases req.Token on each node
// that granted it or might have (a failed or late node), and waits for
// those releases, so it leaves no key of its own behind.
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	req, err := s.acquireRequest(ctx, req)
	if err != nil {
		return store.Grant{}, err
	}
	if err := s.enter(); err != nil {
		return store.Grant{}, err
	}
	defer s.wg.Done()

	a := s.startAcquire(ctx, req)
	s.collect(a)
	if a.fatal == nil && a.nGranted >= s.quorum {
		return s.grant(ctx, a)
	}
	return s.refuse(ctx, a)
}

// acquireRequest decides whether Acquire may send req at all: it returns
// req as the nodes should see it (a mutex never registered as a waiter),
// or an error for a mode redlock cannot keep, an election over nodes that
// are not electors, or a ctx that has already ended.
func (s *Store) acquireRequest(ctx context.Context, req store.Request) (store.Request, error) {
	if err := checkMode(req.Mode); err != nil {
		return req, err
	}
	if err := store.ValidHold(req); err != nil {
		return req, err
	}
	if req.Mode == store.ModeMutex {
		// A node that handed the mutex to a registered waiter would give
		// it a grant on that node alone, not a quorum: never register.
		req.Queue = false
	}
	if req.Mode == store.ModeElection {
		if err := s.canElect(); err != nil {
			return req, err
		}
	}
	if err := ctx.Err(); err != nil {
		return req, err
	}
	return req, nil
}

// startAcquire sends req to every node at once (the fan-out), each node's
// request after this Store's earlier operations on the lock reached that
// node, and returns the acquisition in progress, with no answer read yet.
// It decides what the nodes are sent: an election's value stays pending
// there, and a mutex carries one fence floor proposed to every node.
func (s *Store) startAcquire(ctx context.Context, req store.Request) *acquisition {
	n := len(s.nodes)
	a := &acquisition{req: req, start: time.Now()}
	a.timeout = s.nodeTimeout(req.TTL)
	fl := s.flightsOf(req.Name)
	a.prev, a.value = s.prevHold(req)
	// An election's nodes are granted, and have the term written back
	// with, a pending value; announce marks it settled once the grant is
	// decided (see election.go).
	nodeReq := req
	if req.Mode == store.ModeElection {
		if a.prev == 0 {
			a.value = req.Value
		}
		nodeReq.Value = ""
	}
	a.nodeReq = nodeReq
	// One floor for every node: every grant takes the node's clock floor,
	// so nodes that saw the same grants issue the same fence only from a
	// floor proposed to all of them, and the grant writes nothing back. 20
	// ms ahead of this clock, to be above the nodes' clocks when they run
	// the script (see store.WithFenceFloor; stores that do not honour it
	// ignore it).
	nodeCtx := store.WithFenceFloor(ctx, time.Now().UnixMilli()*1000+proposedFloorLead)
	a.f = fanOut(s, nodeCtx, a.timeout, s.all, func(ctx context.Context, i int) acquireReply {
		if err := fl.wait(ctx, i); err != nil {
			return acquireReply{err: err}
		}
		g, err := s.nodes[i].Acquire(ctx, nodeReq)
		return acquireReply{g, err}
	})
	a.state = make([]uint8, n)
	a.grants = make([]store.Grant, n)
	return a
}

// collect reads the nodes' answers, counting grants, refusals and failures
// (the quorum count), until a grant is possible (a majority granted) or
// ruled out by the refusals or the failures alone, or every node answered.
// A write grant, a read grant with a record, an election and a repeat by
// the holder read on to the last node (or its node timeout).
func (s *Store) collect(a *acquisition) {
	n, q := len(s.nodes), s.quorum
	// A write grant, an election, and a repeated Acquire by the holder,
	// wait for every node (see settleNodes): readers take the highest
	// counter of their nodes and must find the writer's fence there, a
	// leader's term is settled on every node that granted it (and Leader
	// reads it there), and a repeat must find the nodes that gave the
	// first fence. A read grant with a record (Holder or Data) waits too,
	// so that its fence is the highest of every node that granted it: the
	// nodes record each reader's fence as they issued it (they may differ:
	// a node that missed grants issues from its own slot mark), and
	// State's Owners show the highest, whichever nodes answered first. A
	// read without one keeps its fast path (the cost rule of
	// store.Request's record): its Owner "" may show a higher fence.
	recorded := a.req.Holder != "" || a.req.Data != ""
	all := a.req.Mode == store.ModeWrite || a.req.Mode == store.ModeElection || (a.req.Mode == store.ModeRead && recorded) || a.prev > 0
	// Once refusals and failures together deny a majority, no grant is
	// possible, but what to report is not decided until the refusals alone
	// deny a majority (the lock is held: a refusal) or the failures do (no
	// quorum, whatever the holders do): read on until one of them does or
	// every node answered (see refuse).
	for a.answered < n && (a.nGranted < q || all) && a.nRefused <= n-q && a.nFailed <= n-q {
		r := <-a.f.ch
		a.answered++
		switch {
		case r.val.err != nil:
			a.state[r.node] = failed
			a.nFailed++
			a.errs = append(a.errs, nodeErr("acquire", r.node, r.val.err))
			if requestError(r.val.err) {
				// The node refused the request itself and took nothing:
				// undo must not release the token (a reader's, say).
				a.state[r.node] = refused
				if a.fatal == nil {
					a.fatal = r.val.err
				}
			}
		case r.val.g.Acquired:
			a.state[r.node] = granted
			a.grants[r.node] = r.val.g
			a.nGranted++
		default:
			a.state[r.node] = refused
			a.grants[r.node] = r.val.g
			a.nRefused++
		}
	}
}

// grant finishes an acquisition that a majority granted: it settles the
// fence over the granted nodes (the fence write-back), checks that validity
// remains, and only then, the grant being decided, announces an election's
// leader, remembers the grant and tracks the nodes still answering. It
// returns the grant, or, having undone the acquisition, the settlement's
// error or a [*store.StoreError] wrapping errValidity.
func (s *Store) grant(ctx context.Context, a *acquisition) (store.Grant, error) {
	use := s.settleNodes(a.prev, a.state, a.grants)
	fence, err := s.settle(ctx, a.nodeReq, a.timeout, use, a.grants)
	if err == nil {
		err = s.checkValidity(a)
	}
	if err != nil {
		s.undo(ctx, a, len(s.nodes)-a.answered)
		return store.Grant{}, err
	}
	// The grant is decided: nothing undoes it from here.
	if a.req.Mode == store.ModeElection {
		s.announce(ctx, a.req, settledPrefix+a.value, a.timeout, use, fence)
	}
	late := make([]bool, len(a.state))
	for i, st := range a.state {
		late[i] = st == pending
	}
	s.remember(a.req, fence, a.value)
	a.f.track([]string{a.req.Name}, late)
	return store.Grant{Acquired: true, Fence: fence, Count: 1}, nil
}

// checkValidity returns nil while the grant still has validity
// (TTL − elapsed since the first request − drift), and otherwise a
// [*store.StoreError] wrapping errValidity.
func (s *Store) checkValidity(a *acquisition) error {
	if validity := s.validity(a.req, a.start); validity > 0 {
		return nil
	}
	return &store.StoreError{Op: "acquire", Node: -1, Err: errValidity}
}

// refuse finishes an acquisition that no majority granted: it undoes it on
// the nodes and returns the first request error a node returned, a
// [*QuorumError] when too many nodes failed to make a majority, or else a
// refusal, its RetryAfter and Held read from the refusing nodes (see
// refusal).
func (s *Store) refuse(ctx context.Context, a *acquisition) (store.Grant, error) {
	n, q := len(s.nodes), s.quorum
	var g store.Grant
	if a.fatal == nil && a.nFailed <= n-q {
		g = s.refusal(a)
	}
	s.undo(ctx, a, n-a.answered)
	switch {
	case a.fatal != nil:
		return store.Grant{}, a.fatal
	case a.nFailed > n-q:
		// Too few nodes answered to make a majority even if every holder
		// released: no quorum, even when the nodes that answered refused.
		s.cfg.logger.Debug("dlock: redlock acquire without quorum", "name", a.req.Name, "failed", a.nFailed)
		return store.Grant{}, &QuorumError{Op: "acquire", OK: a.answered - a.nFailed, Quorum: q, Nodes: a.errs}
	}
	return g, nil
}

// refusal returns the refusal of an acquisition that the lock's holders
// deny: RetryAfter from the nodes read so far, and Held, the mode that
// most refusing nodes report, reading on until a majority of the nodes
// report one mode or every node answered.
func (s *Store) refusal(a *acquisition) store.Grant {
	n, q := len(s.nodes), s.quorum
	// Which pattern holds the name is what a majority of the nodes say: a
	// minority may keep a hold the majority ended (a renewal that reached
	// it after a shorter re-acquire), so read on while the refusals so far
	// do not agree by a majority. undo waits for every node anyway.
	var g store.Grant
	g.RetryAfter = retryAfter(a.state, a.grants, q)
	for a.answered < n && !heldByMajority(a.state, a.grants, q) {
		r := <-a.f.ch
		a.answered++
		switch {
		case r.val.err != nil && !requestError(r.val.err):
			a.state[r.node] = failed
		case r.val.g.Acquired:
			a.state[r.node] = granted
		default: // refused, or the request refused (nothing taken)
			a.state[r.node] = refused
			a.grants[r.node] = r.val.g
		}
	}
	g.Held = heldMode(a.state, a.grants)
	return g
}

// heldMode is the mode that most refusing nodes report holding the name.
func heldMode(state []uint8, grants []store.Grant) store.Mode {
	best, _ := heldCount(state, grants)
	return best
}

// heldByMajority reports whether q refusing nodes report one mode.
func heldByMajority(state []uint8, grants []store.Grant, q int) bool {
	_, n := heldCount(state, grants)
	return n >= q
}

// heldCount returns the mode most refusing nodes report and how many do.
func heldCount(state []uint8, grants []store.Grant) (store.Mode, int) {
	var count [8]int
	best := store.Mode(0)
	for i, st := range state {
		if m := grants[i].Held; st == refused && int(m) < len(count) {
			if count[m]++; count[m] > count[best] {
				best = m
			}
		}
	}
	return best, count[best]
}

// settleNodes returns the granted nodes to settle the fence over: every
// granted node, except on a repeated Acquire by the holder, where it is the
// granted nodes that report a fence no higher than the one the holder was
// given, if they are still a majority. Then settle returns that fence
// again, and nodes that granted the token late (with a higher fence) do not
// change it. A node whose hold lapsed and was granted to someone else
// since reports a higher fence, so it is left out, and with it any chance
// of handing out a fence that a later grant has overtaken.
func (s *Store) settleNodes(prev int64, state []uint8, grants []store.Grant) []bool {
	use := make([]bool, len(state))
	if prev > 0 {
		k := 0
		for i, st := range state {
			use[i] = st == granted && grants[i].Fence <= prev
			if use[i] {
				k++
			}
		}
		if k >= s.quorum {
			return use
		}
	}
	for i, st := range state {
		use[i] = st == granted
	}
	return use
}

// retryAfter is the time after which a majority of the nodes that answered
// may be free: the q-th smallest of their remaining holds, counting 0 for a
// node that granted (it has been released since).
func retryAfter(state []uint8, grants []store.Grant, q int) time.Duration {
	var ds []time.Duration
	for i, st := range state {
		switch st {
		case granted:
			ds = append(ds, 0)
		case refused:
			ds = append(ds, grants[i].RetryAfter)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(q, len(ds))-1]
}

// settle picks the fence of a grant held on a majority (the nodes in use):
// the highest fence those nodes issued, F. Unless a majority issued F itself, it writes F back
// to the nodes that issued less, and succeeds once a majority of the nodes
// it holds have a counter of F. Readers take F and write nothing back
// (readers share the current fence). An election's nodes that issued less
// take F as their term, their value still pending (req.Value is empty):
// [Store.Leader] does not report it yet (see announce).
func (s *Store) settle(ctx context.Context, req store.Request, timeout time.Duration, use []bool, grants []store.Grant) (int64, error) {
	var v int64
	for i, u := range use {
		if u {
			v = max(v, grants[i].Fence)
		}
	}
	if req.Mode == store.ModeRead {
		return v, nil
	}
	q := s.quorum
	var eq int
	var raise []int
	for i, u := range use {
		switch {
		case !u:
		case grants[i].Fence == v:
			eq++
		default:
			raise = append(raise, i)
		}
	}
	if eq >= q {
		return v, nil
	}
	ch := fan(s, ctx, timeout, raise, func(ctx context.Context, i int) error {
		return s.raisers[i].RaiseFence(ctx, req, v)
	})
	ok := eq
	var errs []error
	for range raise {
		r := <-ch
		if r.val == nil {
			if ok++; ok >= q {
				return v, nil
			}
			continue
		}
		if requestError(r.val) {
			return 0, r.val // e.g. a node that cannot raise this mode's fence
		}
		errs = append(errs, nodeErr("fence", r.node, r.val))
		if eq+len(raise)-len(errs) < q {
			break
		}
	}
	return 0, &QuorumError{Op: "fence", OK: ok, Quorum: q, Nodes: errs}
}

// announce makes an election's grant, of term fence, visible to
// [Store.Leader]: it writes the term and the settled value (settledPrefix
// and the leader's value) to every node in use, and returns once a majority
// took them or every node answered. Acquire calls it only once the grant
// is decided, and returns the grant whatever announce achieved: a term
// that Leader reports is always one that Acquire returned. A leader
// announced on fewer than a majority of nodes (they failed since they
// granted it) holds the lock all the same, but Leader does not report it.
func (s *Store) announce(ctx context.Context, req store.Request, value string, timeout time.Duration, use []bool, fence int64) {
	req.Value = value
	var nodes []int
	for i, u := range use {
		if u {
			nodes = append(nodes, i)
		}
	}
	ch := fan(s, ctx, timeout, nodes, func(ctx context.Context, i int) error {
		return s.raisers[i].RaiseFence(ctx, req, fence)
	})
	ok := 0
	for range nodes {
		r := <-ch
		if r.val == nil {
			if ok++; ok >= s.quorum {
				return
			}
			continue
		}
		s.cfg.logger.Debug("dlock: redlock could not announce a leader on a node", "name", req.Name, "node", r.node, "err", r.val)
	}
	s.cfg.logger.Debug("dlock: redlock announced a leader on fewer than a majority of nodes", "name", req.Name, "nodes", ok)
}

// undo releases the acquisition's token on every node that granted it or
// might have (failed), and on each node still working on the acquire once
// it answers, and waits for those releases (see undoNode). It runs even
// when ctx has ended.
func (s *Store) undo(ctx context.Context, a *acquisition, pending int) {
	rctx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	release := func(i int, grantedHere bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(rctx, a.timeout)
			defer cancel()
			if err := s.undoNode(c, a, i, grantedHere); err != nil && !errors.Is(err, store.ErrNotHeld) {
				s.cfg.logger.Debug("dlock: redlock release after failed acquire", "name", a.req.Name, "node", i, "err", err)
			}
		}()
	}
	for i, st := range a.state {
		if st == granted || st == failed {
			release(i, st == granted)
		}
	}
	for ; pending > 0; pending-- {
		r := <-a.f.ch
		if (r.val.err != nil && !requestError(r.val.err)) || r.val.g.Acquired {
			release(r.node, r.val.err == nil)
		}
	}
	wg.Wait()
}

// Extend implements [store.Store]: each request is extended on every node
// at once, in one pipelined call per node. A request's error is nil once a
// majority extended it, [store.ErrNotHeld] once more than N−quorum nodes
// report that the token no longer holds it (the lease is lost), and
// otherwise a [*QuorumError] (the extension is unconfirmed; the lease stays
// valid until its current validity ends).
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
	if len(reqs) == 0 {
		return make([]error, 0)
	}
	if err := s.enter(); err != nil {
		return repeatErr(len(reqs), err)
	}
	defer s.wg.Done()
	n := len(s.nodes)
	f := s.startExtend(ctx, reqs)
	e := newExtension(reqs, n)
	answered := 0
	for ; answered < n && e.undecided > 0; answered++ {
		s.countExtend(e, <-f.ch)
	}
	// Later operations on these names wait for the nodes still renewing
	// them, so that a renewal cannot land after them (a re-acquire with a
	// shorter TTL would leave those nodes holding the longer one).
	if answered < n {
		names := make([]string, 0, len(reqs))
		for _, r := range reqs {
			names = append(names, r.Name)
		}
		f.track(names, e.late)
	}
	return e.out
}

// repeatErr returns n copies of err, one per request.
func repeatErr(n int, err error) []error {
	errs := make([]error, n)
	for j := range errs {
		errs[j] = err
	}
	return errs
}

// startExtend sends reqs to every node at once (the fan-out), in one call
// per node made after this Store's earlier operations on every name of
// reqs reached that node, under the node timeout of the shortest TTL, and
// returns the fan-out, with no answer read yet.
func (s *Store) startExtend(ctx context.Context, reqs []store.Request) *fanout[[]error] {
	ttl := reqs[0].TTL
	for _, r := range reqs {
		ttl = min(ttl, r.TTL)
	}
	var fls flights
	for _, r := range reqs {
		fls = append(fls, s.flightsOf(r.Name)...)
	}
	return fanOut(s, ctx, s.nodeTimeout(ttl), s.all, func(ctx context.Context, i int) []error {
		if err := fls.wait(ctx, i); err != nil {
			return repeatErr(len(reqs), err)
		}
		return s.nodes[i].Extend(ctx, reqs)
	})
}

// extension is one Extend in progress: per request, how the nodes that
// answered so far replied and whether its outcome is decided (out).
type extension struct {
	reqs      []store.Request
	out       []error
	ok        []int     // nodes that extended the request
	notHeld   []int     // nodes that report the token does not hold it
	errs      [][]error // nodes that failed, as *store.StoreError
	decided   []bool
	undecided int
	late      []bool // nodes that have not answered
}

func newExtension(reqs []store.Request, n int) *extension {
	e := &extension{
		reqs:      reqs,
		out:       make([]error, len(reqs)),
		ok:        make([]int, len(reqs)),
		notHeld:   make([]int, len(reqs)),
		errs:      make([][]error, len(reqs)),
		decided:   make([]bool, len(reqs)),
		undecided: len(reqs),
		late:      make([]bool, n),
	}
	for i := range e.late {
		e.late[i] = true
	}
	return e
}

// countExtend counts one node's answer r towards every request still
// undecided (the quorum count) and decides each one that answer decides,
// pushing back the record of each grant a majority extended.
func (s *Store) countExtend(e *extension, r result[[]error]) {
	e.late[r.node] = false
	for j := range e.reqs {
		if e.decided[j] {
			continue
		}
		var err error
		if j < len(r.val) {
			err = r.val[j]
		} else {
			err = errors.New("redlock: node returned too few results")
		}
		switch {
		case err == nil:
			e.ok[j]++
		case errors.Is(err, store.ErrNotHeld):
			e.notHeld[j]++
		default:
			e.errs[j] = append(e.errs[j], nodeErr("extend", r.node, err))
		}
		done, verdict := e.outcome(j, len(s.nodes), s.quorum)
		if !done {
			continue
		}
		e.out[j] = verdict
		if verdict == nil {
			s.extended(e.reqs[j])
		}
		e.decided[j] = true
		e.undecided--
	}
}

// outcome reports whether the answers counted so far decide request j
// over n nodes with quorum q, and its error if so: nil once a majority
// extended it, [store.ErrNotHeld] once more than n−q nodes report the token
// does not hold it, a [*QuorumError] once refusals and failures together
// leave no majority.
func (e *extension) outcome(j, n, q int) (bool, error) {
	switch {
	case e.ok[j] >= q:
		return true, nil
	case e.notHeld[j] > n-q:
		return true, store.ErrNotHeld
	case e.notHeld[j]+len(e.errs[j]) > n-q:
		return true, &QuorumError{Op: "extend", OK: e.ok[j], Quorum: q, Nodes: e.errs[j]}
	}
	return false, nil
}

// Release implements [store.Store]: it releases req on every node at once.
// It returns nil as soon as a majority released the token;
// [store.ErrNotHeld] once more than N−quorum nodes report that the token
// holds nothing there (it did not hold the lock any more; it is gone from
// the nodes that still had it); otherwise a [*QuorumError] (the nodes that
// did not answer free the lock when its TTL runs out).
//
// The release to each node is not cut short by ctx: ctx only bounds how
// long Release waits for its outcome (when ctx ends first, it returns a
// [*QuorumError] wrapping ctx's error). Each node's release runs to its
// end in the background, after the earlier operations of this Store on
// that node and lock (waiting for them at most the node timeout), and is
// itself bounded by the node timeout; [Store.Close] waits for it, and later operations on
// the lock through this Store reach that node after it. A caller that
// cancels its context as soon as Release returns (as a request handler
// does) so does not leave its token holding the nodes that had not
// answered yet.
func (s *Store) Release(ctx context.Context, req store.Request) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.wg.Done()
	n, q := len(s.nodes), s.quorum
	s.forget(req)
	fl := s.flightsOf(req.Name)
	timeout := s.nodeTimeout(req.TTL)
	f := fanOut(s, context.WithoutCancel(ctx), 2*timeout, s.all, func(ctx context.Context, i int) error {
		// ctx ends 2×timeout from now: waiting for the earlier operations
		// may take one node timeout and leaves the release at least one.
		if !fl.waitAtMost(i, timeout) {
			// An earlier request to this node is still unanswered. Release
			// anyway: one that reached the node is answered in order on
			// its connection, and a hold left behind expires with its TTL.
			s.cfg.logger.Debug("dlock: redlock release does not wait any longer for an earlier request", "name", req.Name, "node", i)
		}
		return s.nodes[i].Release(ctx, req)
	})
	ch := f.ch
	var released, notHeld int
	var errs []error
	answered := make([]bool, n)
	for range n {
		var r result[error]
		select {
		case r = <-ch:
		case <-ctx.Done():
			for i, a := range answered {
				if !a {
					errs = append(errs, nodeErr("release", i, ctx.Err()))
				}
			}
			trackRest(f, req.Name, answered)
			return &QuorumError{Op: "release", OK: released, Quorum: q, Nodes: errs}
		}
		answered[r.node] = true
		switch {
		case r.val == nil:
			released++
		case errors.Is(r.val, store.ErrNotHeld):
			notHeld++
		default:
			errs = append(errs, nodeErr("release", r.node, r.val))
		}
		var err error
		switch {
		case released >= q:
		case notHeld > n-q:
			err = store.ErrNotHeld
		default:
			continue
		}
		trackRest(f, req.Name, answered)
		return err
	}
	return &QuorumError{Op: "release", OK: released, Quorum: q, Nodes: errs}
}

// trackRest tracks the nodes of a release (or force-release) of name that
// have not answered yet.
func trackRest[T any](f *fanout[T], name string, answered []bool) {
	for i, a := range answered {
		answered[i] = !a
	}
	f.track([]string{name}, answered)
}

// Ping implements [store.Pinger]: nil when a majority of the nodes answer
// (nodes that are not [store.Pinger]s count as answering), else a
// [*QuorumError].
func (s *Store) Ping(ctx context.Context) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.wg.Done()
	n, q := len(s.nodes), s.quorum
	ch := fan(s, ctx, s.nodeTimeout(time.Second), s.all, func(ctx context.Context, i int) error {
		if p, ok := s.nodes[i].(store.Pinger); ok {
			return p.Ping(ctx)
		}
		return ctx.Err()
	})
	var ok int
	var errs []error
	for range n {
		r := <-ch
		if r.val == nil {
			if ok++; ok >= q {
				return nil
			}
			continue
		}
		errs = append(errs, nodeErr("ping", r.node, r.val))
		if len(errs) > n-q {
			break
		}
	}
	return &QuorumError{Op: "ping", OK: ok, Quorum: q, Nodes: errs}
}
