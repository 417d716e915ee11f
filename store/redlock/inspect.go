package redlock

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"time"

	"github.com/dlock-dev/dlock/store"
)

var _ store.Inspector = (*Store)(nil)

// inspectTimeout bounds one node's answer to State or List (List scans the
// node's keyspace); the caller's ctx may end it sooner.
const inspectTimeout = 5 * time.Second

type stateReply struct {
	st  store.State
	err error
}

type listReply struct {
	states []store.State
	err    error
}

// State implements [store.Inspector]. It asks every node at once and
// combines the answers of the nodes that gave one, as Redlock sees the
// lock: it has as many holders as a majority of nodes report (the
// quorum-th highest count, or more when Owners tells apart holds on
// different majorities), for as long as a majority still holds it (the
// quorum-th longest remaining hold); Mode is the mode most holding nodes
// report. Owners are the holds a majority of nodes record alike (see the
// package doc, "A hold's record and bounds"), one Owner "" for each hold
// the nodes do not agree on by holder and data. Fence is the highest fence
// a majority of nodes has issued or accepted (the quorum-th highest
// counter): the holder's fence while it holds, and below every fence a
// later grant gets. Queue and Limit are the highest any node reports. A hold on a minority of nodes (a partial
// acquisition that is being undone, or a node that has not expired it yet)
// does not count. It returns a [*QuorumError] when fewer than a majority
// answer, and an error wrapping [store.ErrNotSupported] when a majority of
// nodes are stores that cannot describe their locks.
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	if err := store.ValidName(name); err != nil {
		return store.State{}, err
	}
	if err := s.enter(); err != nil {
		return store.State{}, err
	}
	defer s.wg.Done()
	ch := fan(s, ctx, inspectTimeout, s.all, func(ctx context.Context, i int) stateReply {
		in, ok := s.nodes[i].(store.Inspector)
		if !ok {
			return stateReply{err: fmt.Errorf("%w: node %d cannot describe its locks", store.ErrNotSupported, i)}
		}
		st, err := in.State(ctx, name)
		return stateReply{st, err}
	})
	var states []store.State
	var errs []error
	for r := range gather(s, ch, func() int { return len(states) }) {
		if r.val.err != nil {
			errs = append(errs, nodeErr("state", r.node, r.val.err))
			continue
		}
		states = append(states, r.val.st)
	}
	if err := s.inspectErr("state", len(states), errs); err != nil {
		return store.State{}, err
	}
	return combine(name, states, s.quorum), nil
}

// List implements [store.Inspector]: every lock that some node knows of,
// by name, combined as State combines them (a node that answered without
// the name counts as not holding it), and kept when it has holders or
// waiters. Each node lists its own locks, so it costs what a List of every
// node costs; it returns a [*QuorumError] when fewer than a majority answer.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.wg.Done()
	ch := fan(s, ctx, inspectTimeout, s.all, func(ctx context.Context, i int) listReply {
		in, ok := s.nodes[i].(store.Inspector)
		if !ok {
			return listReply{err: fmt.Errorf("%w: node %d cannot list its locks", store.ErrNotSupported, i)}
		}
		states, err := in.List(ctx)
		return listReply{states, err}
	})
	byName := make(map[string][]store.State)
	answered := 0
	var errs []error
	for r := range gather(s, ch, func() int { return answered }) {
		if r.val.err != nil {
			errs = append(errs, nodeErr("list", r.node, r.val.err))
			continue
		}
		answered++
		for _, st := range r.val.states {
			byName[st.Name] = append(byName[st.Name], st)
		}
	}
	if err := s.inspectErr("list", answered, errs); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]store.State, 0, len(names))
	for _, name := range names {
		states := byName[name]
		// The nodes that answered without the name do not hold it.
		for len(states) < answered {
			states = append(states, store.State{Name: name})
		}
		if st := combine(name, states, s.quorum); st.Holders > 0 || st.Queue > 0 {
			out = append(out, st)
		}
	}
	return out, nil
}

// gather yields the nodes' replies from ch as they come, and stops waiting
// for the rest once ok() (the replies taken so far) reaches a quorum and
// one node timeout has passed since: a node that is down does not hold up
// a dashboard.
func gather[T any](s *Store, ch <-chan result[T], ok func() int) iter.Seq[result[T]] {
	return func(yield func(result[T]) bool) {
		var straggle <-chan time.Time
		for range s.all {
			select {
			case r := <-ch:
				if !yield(r) {
					return
				}
			case <-straggle:
				return
			}
			if straggle == nil && ok() >= s.quorum {
				straggle = time.After(s.nodeTimeout(time.Second))
			}
		}
	}
}

// inspectErr is the error of an inspection that ok nodes answered, or nil
// when they are a majority.
func (s *Store) inspectErr(op string, ok int, errs []error) error {
	if ok >= s.quorum {
		return nil
	}
	for _, err := range errs {
		if errors.Is(err, store.ErrInvalid) {
			return err // a bad name: every node says so
		}
	}
	unsupported := 0
	for _, err := range errs {
		if requestError(err) {
			unsupported++
		}
	}
	if unsupported > len(s.nodes)-s.quorum {
		return fmt.Errorf("%w: redlock %s: too few nodes can describe their locks", store.ErrNotSupported, op)
	}
	return &QuorumError{Op: op, OK: ok, Quorum: s.quorum, Nodes: errs}
}

// combine is one lock as a quorum of nodes sees it, from the states of the
// nodes that answered (at least a quorum).
func combine(name string, states []store.State, q int) store.State {
	st := store.State{Name: name}
	holders := make([]int, 0, len(states))
	fences := make([]int64, 0, len(states))
	ttls := make([]time.Duration, 0, len(states))
	modes := make(map[store.Mode]int)
	lists := make([][]store.Holder, 0, len(states))
	for _, n := range states {
		lists = append(lists, nodeOwners(n))
		holders = append(holders, n.Holders)
		fences = append(fences, n.Fence)
		st.Queue = max(st.Queue, n.Queue)
		st.Limit = max(st.Limit, n.Limit)
		if n.Holders > 0 {
			ttls = append(ttls, n.TTL)
			modes[n.Mode]++
		}
	}
	st.Owners = combineOwners(lists, q)
	st.Holders = max(qthHighest(holders, q), len(st.Owners))
	for len(st.Owners) < st.Holders {
		st.Owners = append(st.Owners, store.Holder{})
	}
	st.Fence = qthHighest(fences, q)
	if st.Holders > 0 {
		st.TTL = qthHighest(ttls, q)
		best := 0
		for m, k := range modes {
			if k > best || (k == best && m < st.Mode) {
				st.Mode, best = m, k
			}
		}
	}
	if exclusiveMode(st.Mode) && st.Fence > 0 {
		// The holder's fence: its nodes report the fence each issued, one
		// issued late may be above the fence the grant settled on, and a
		// quorum holds a counter of at least that fence (see settle).
		for i := range st.Owners {
			st.Owners[i].Fence = min(st.Owners[i].Fence, st.Fence)
		}
	}
	return st
}

// qthHighest returns the q-th highest of vs (the value that at least q of
// them reach), or the zero value when there are fewer than q.
func qthHighest[T int | int64 | time.Duration](vs []T, q int) T {
	if len(vs) < q {
		var zero T
		return zero
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)-q]
}
