package zookeeper

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/dlock-dev/dlock/store"
	"github.com/go-zookeeper/zk"
)

func (s *Store) state(kind, name string, es []entry) store.State {
	dir := s.dir(kind, name)
	st := store.State{Name: name, Mode: kindMode[kind]}
	limit := 0
	if kind == "s" {
		limit = s.heldLimit(dir, es)
		st.Limit = limit
	}
	for i, e := range es {
		if !holds(kind, es, i, limit) {
			st.Queue++
			continue
		}
		st.Holders++
		if e.mode == 'w' {
			st.Mode = store.ModeWrite
		}
		if r, ok := s.remaining(dir + "/" + e.name); ok {
			st.TTL = max(st.TTL, r)
		}
	}
	st.Owners, _ = s.owners(dir, es, limit)
	for _, h := range st.Owners {
		st.Fence = max(st.Fence, h.Fence)
	}
	if kind == "w" {
		// The current fence: the writer's, or the one its readers share.
		st.Fence = s.currentFence(dir)
	}
	if kind == "r" && st.Holders > 0 {
		st.Holders = 1
	}
	return st
}

// holderKind is the kind of the pattern holding the name whose nodes are
// es (not empty): the first holder's.
func holderKind(es []entry) string {
	if h := firstHolder(es); h >= 0 {
		return string(es[h].kind)
	}
	return string(es[0].kind)
}

// State implements [store.Inspector]: the pattern holding name, and each
// hold's record (one read of its node; see [Store.owners] for Since).
// TTL is known only for holds of this store.
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	es, err := s.list(s.dir("", name))
	if err != nil {
		return store.State{}, storeErr("state", err)
	}
	if len(es) > 0 {
		return s.state(holderKind(es), name, es), nil
	}
	return store.State{Name: name}, nil
}

// List implements [store.Inspector]: every lock with a node, by name.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	var out []store.State
	dirs, _, err := s.conn.Children(s.root + "/" + namesDir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, storeErr("list", err)
	}
	for _, d := range dirs {
		nb, err := b64.DecodeString(strings.TrimPrefix(d, "n"))
		if err != nil {
			continue
		}
		es, err := s.list(s.root + "/" + namesDir + "/" + d)
		if err != nil {
			return nil, storeErr("list", err)
		}
		if len(es) > 0 {
			out = append(out, s.state(holderKind(es), string(nb), es))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
