package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/go-zookeeper/zk"
)

// The election (store.ModeElection) is the exclusive pattern "e": the
// leader's node keeps its value in its data, the term is its fence.

var _ store.Elector = (*Store)(nil)

// Leader implements [store.Elector]: it lists the name's nodes and reads
// the holding node's data. The term is the leader's fence, recorded in that
// data (a leader whose grant has not written it yet gets it issued now, as
// its own grant would). The TTL is exact for a leader of this store and
// otherwise the TTL it asked for (an upper bound).
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	if err := store.ValidName(name); err != nil {
		return store.Leader{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Leader{}, storeErr("leader", err)
	}
	dir := s.dir("e", name)
	es, err := s.list(dir)
	if err != nil {
		return store.Leader{}, storeErr("leader", err)
	}
	h := firstHolder(es)
	if h < 0 || es[h].kind != 'e' {
		return store.Leader{}, store.ErrNoLeader
	}
	path := dir + "/" + es[h].name
	b, st, err := s.conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return store.Leader{}, store.ErrNoLeader // gone since the listing
	}
	if err != nil {
		return store.Leader{}, storeErr("leader", err)
	}
	var d nodeData
	if err := json.Unmarshal(b, &d); err != nil {
		return store.Leader{}, storeErr("leader", err)
	}
	term, err := s.nodeFence(dir, path, &known{d: d, ver: st.Version})
	if errors.Is(err, errNodeGone) {
		return store.Leader{}, store.ErrNoLeader // gone since the listing
	}
	if err != nil {
		return store.Leader{}, storeErr("leader", err)
	}
	ld := store.Leader{Value: d.Value, Term: term, TTL: time.Duration(d.TTL) * time.Millisecond}
	if r, ok := s.remaining(path); ok {
		ld.TTL = r
	}
	return ld, nil
}
