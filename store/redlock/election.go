package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// Elections ([store.ModeElection]) run over nodes that are [store.Elector]s.
// A candidate is elected as a mutex is granted: a majority of nodes grants
// its token, and the term is the fence settled over them. Each node issues
// a term of its own, though, and the leadership must read the same on a
// majority, so a node is granted a pending leadership (an empty value),
// and Acquire, once it holds a majority, writes the term F back to the
// nodes that issued less, still pending ([store.FenceRaiser] in
// ModeElection). Only once the grant is decided (F is settled on a
// majority and validity remains) does Acquire announce it: every node that
// granted it takes F and the value settledPrefix + the leader's value.
// From then on Acquire returns the grant, whatever the announcement
// achieves. Leader counts only announced nodes, so it never reports a term
// that Acquire did not return: not before Acquire has settled it (a
// majority of nodes may agree on a lower pending term for a moment), nor
// when Acquire settled it and then refused it for lack of validity. The
// raises also write the node's watched key, which wakes observers.

// settledPrefix marks, on a node, the value of a leadership that Acquire
// has announced: its term is settled and the grant was returned.
const settledPrefix = "="

var _ store.Elector = (*Store)(nil)

// canElect reports whether every node runs elections.
func (s *Store) canElect() error {
	for i, n := range s.nodes {
		if _, ok := n.(store.Elector); !ok {
			return fmt.Errorf("%w: redlock elections: node %d (%T) is not a store.Elector", store.ErrNotSupported, i, n)
		}
	}
	return nil
}

// leaderReply is one node's answer to Leader: settled when its term was
// announced by the candidate's Acquire, held when it has a leader at all.
type leaderReply struct {
	ld      store.Leader
	held    bool
	settled bool
	err     error
}

// leaderPoll bounds the pause between two reads of the nodes while a
// candidate holds a majority but has not settled its term yet.
const leaderPoll = 20 * time.Millisecond

// Leader implements [store.Elector]: it asks every node and reports the
// leader that a majority of nodes agree on, with its value and term as
// settled by its Acquire and, as TTL, the time for which a majority still
// holds it by the nodes' clocks (the quorum-th longest). It returns
// [store.ErrNoLeader] when no majority agrees on a leader. While a
// candidate holds a majority whose term is not announced yet (its Acquire
// is writing the term back, checking validity or announcing it), Leader
// reads again until it is, for at most twice the node timeout (500ms
// unless set), and then reports no leader. It never reports a term that
// the candidate's Acquire did not return.
// It returns a [*QuorumError] when the nodes that failed or did not answer
// within the node timeout could decide the answer, an [*store.InvalidError]
// for a bad name and an error wrapping [store.ErrNotSupported] when a node
// is not a [store.Elector].
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	if err := store.ValidName(name); err != nil {
		return store.Leader{}, err
	}
	if err := s.canElect(); err != nil {
		return store.Leader{}, err
	}
	if err := s.enter(); err != nil {
		return store.Leader{}, err
	}
	defer s.wg.Done()
	timeout := s.readTimeout()
	deadline := time.Now().Add(2 * timeout)
	pause := time.Millisecond
	for {
		ld, settling, err := s.readLeader(ctx, name, timeout)
		if !settling || time.Now().Add(pause).After(deadline) {
			return ld, err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return store.Leader{}, ctx.Err()
		}
		pause = min(2*pause, leaderPoll)
	}
}

// readTimeout bounds one node's answer to Leader.
func (s *Store) readTimeout() time.Duration {
	if s.cfg.nodeTimeout > 0 {
		return s.cfg.nodeTimeout
	}
	return watchSetup
}

// readLeader reads the nodes once. settling reports that no majority agrees
// on an announced leader but a majority holds a leadership: a campaign
// whose term is being settled or announced.
func (s *Store) readLeader(ctx context.Context, name string, timeout time.Duration) (ld store.Leader, settling bool, err error) {
	n, q := len(s.nodes), s.quorum
	ch := fan(s, ctx, timeout, s.all, func(ctx context.Context, i int) leaderReply {
		ld, err := s.nodes[i].(store.Elector).Leader(ctx, name)
		switch {
		case errors.Is(err, store.ErrNoLeader):
			return leaderReply{}
		case err != nil:
			return leaderReply{err: err}
		}
		v, ok := strings.CutPrefix(ld.Value, settledPrefix)
		ld.Value = v
		return leaderReply{ld: ld, held: true, settled: ok}
	})
	type agreed struct {
		term  int64
		value string
	}
	groups := make(map[agreed][]time.Duration)
	var errs []error
	best, held := 0, 0
	for answered := 0; answered < n; answered++ {
		r := <-ch
		switch {
		case r.val.err != nil:
			if requestError(r.val.err) {
				return store.Leader{}, false, r.val.err
			}
			errs = append(errs, nodeErr("leader", r.node, r.val.err))
		case r.val.held:
			held++
			if !r.val.settled {
				break
			}
			k := agreed{r.val.ld.Term, r.val.ld.Value}
			groups[k] = append(groups[k], r.val.ld.TTL)
			if ttls := groups[k]; len(ttls) >= q {
				// A majority agrees; no other leader can have one.
				return store.Leader{Value: k.value, Term: k.term, TTL: qthHighest(ttls, q)}, false, nil
			}
			best = max(best, len(groups[k]))
		}
		if unknown := n - answered - 1 + len(errs); best+unknown < q && held+unknown < q {
			// No leader could reach a majority whatever the nodes that
			// failed or have not answered yet hold.
			return store.Leader{}, false, store.ErrNoLeader
		}
	}
	if best+len(errs) >= q || n-len(errs) < q {
		// The nodes that failed could make or unmake a majority.
		return store.Leader{}, false, &QuorumError{Op: "leader", OK: n - len(errs), Quorum: q, Nodes: errs}
	}
	return store.Leader{}, held >= q, store.ErrNoLeader
}
