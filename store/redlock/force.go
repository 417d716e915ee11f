package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
)

var _ store.ForceReleaser = (*Store)(nil)

type forceReply struct {
	ended []store.Holder
	err   error
}

// ForceRelease implements [store.ForceReleaser]: it ends every hold of
// name on every node at once (each node's ForceRelease: any mode, any
// token, a hold kept by a MinHold too; queue places stay), each node's
// request after this Store's earlier operations on the name reached it
// (waiting for them at most the node timeout). The requests to the nodes
// that have not answered when it returns run to their end in the
// background, as a Release's do. The nodes keep their fence counters, so the next grant's
// fence is above every ended hold's: its majority shares a node with each
// ended holder's settled majority, whose counter was at least that
// holder's fence (see the package doc).
//
// Once a majority of the nodes ended the holds, nobody holds the name as
// Redlock sees it; ForceRelease then waits for the other nodes' answers for
// at most one more node timeout, and returns the holds the nodes that
// answered ended, combined as [Store.State] combines the nodes' holds (a
// hold that only a minority had, such as an acquisition being undone, is
// not among them, as State does not show it), with the grant time and
// fence that State showed for them just before (ForceRelease asks it
// first: one more read of every node). It returns a [*QuorumError]
// when too many nodes failed for a majority to end them (or ctx ended
// first), an [*store.InvalidError] for a bad name, and an error wrapping
// [store.ErrNotSupported] when a node is not a [store.ForceReleaser].
func (s *Store) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	if err := store.ValidName(name); err != nil {
		return nil, err
	}
	frs := make([]store.ForceReleaser, len(s.nodes))
	for i, n := range s.nodes {
		fr, ok := n.(store.ForceReleaser)
		if !ok {
			return nil, fmt.Errorf("%w: redlock force-release: node %d (%T) is not a store.ForceReleaser", store.ErrNotSupported, i, n)
		}
		frs[i] = fr
	}
	// The holds as State shows them, to report the ended holds alike (see
	// shownAs); a failure here only leaves them as the nodes report them.
	shown, serr := s.State(ctx, name)
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.wg.Done()
	s.forgetName(name)
	fl := s.flightsOf(name)
	timeout := s.nodeTimeout(time.Second)
	f := fanOut(s, context.WithoutCancel(ctx), 2*timeout, s.all, func(ctx context.Context, i int) forceReply {
		if !fl.waitAtMost(i, timeout) {
			s.cfg.logger.Debug("dlock: redlock force-release does not wait any longer for an earlier request", "name", name, "node", i)
		}
		hs, err := frs[i].ForceRelease(ctx, name)
		return forceReply{hs, err}
	})
	lists, err := s.forceAnswers(ctx, f, name, timeout)
	if err != nil {
		return nil, err
	}
	ended := combineOwners(lists, s.quorum)
	if serr == nil {
		shownAs(ended, shown.Owners)
	}
	return ended, nil
}

// shownAs replaces each hold of ended by the hold of shown (State's Owners
// read just before the force-release) with the same holder and data, if
// any: State caps an exclusive hold's fence by the nodes' counters, which
// the nodes' answers to ForceRelease do not carry (a node that granted the
// hold late may have issued a higher fence than the one it settled on).
// A hold granted after State answered keeps the nodes' values.
func shownAs(ended, shown []store.Holder) {
	used := make([]bool, len(shown))
	for i, h := range ended {
		for j, sh := range shown {
			if !used[j] && sh.Owner == h.Owner && sh.Data == h.Data {
				used[j] = true
				ended[i] = sh
				break
			}
		}
	}
}

// forceAnswers reads the nodes' answers to a force-release of name until
// every node answered, or a majority ended the holds and one more node
// timeout passed, and tracks the nodes that have not answered. It returns
// the holds each node that answered ended, or a node's request error or a
// [*QuorumError] when no majority ended them.
func (s *Store) forceAnswers(ctx context.Context, f *fanout[forceReply], name string, timeout time.Duration) ([][]store.Holder, error) {
	n, q := len(s.nodes), s.quorum
	var lists [][]store.Holder
	var errs []error
	answered := make([]bool, n)
	defer trackRest(f, name, answered)
	straggle := time.NewTimer(timeout)
	straggle.Stop()
	defer straggle.Stop()
	for range n {
		var r result[forceReply]
		select {
		case r = <-f.ch:
		case <-straggle.C:
			return lists, nil
		case <-ctx.Done():
			for i, a := range answered {
				if !a {
					errs = append(errs, nodeErr("force-release", i, ctx.Err()))
				}
			}
			return nil, &QuorumError{Op: "force-release", OK: len(lists), Quorum: q, Nodes: errs}
		}
		answered[r.node] = true
		switch {
		case r.val.err == nil:
			if lists = append(lists, r.val.ended); len(lists) == q {
				straggle.Reset(timeout)
			}
		case requestError(r.val.err):
			return nil, r.val.err
		default:
			errs = append(errs, nodeErr("force-release", r.node, r.val.err))
		}
	}
	if len(lists) >= q {
		return lists, nil
	}
	return nil, &QuorumError{Op: "force-release", OK: len(lists), Quorum: q, Nodes: errs}
}
