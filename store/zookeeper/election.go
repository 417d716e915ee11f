package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

// The election (dlock.ModeElection) is the exclusive pattern "e": the
// leader's node keeps its value in its data, the term is its czxid.

var _ dlock.Elector = (*Store)(nil)

// Leader implements [dlock.Elector]: it lists the name's nodes and reads
// the holding node's data. The TTL is exact for a leader of this store and
// otherwise the TTL it asked for (an upper bound).
func (s *Store) Leader(ctx context.Context, name string) (dlock.Leader, error) {
	if err := dlock.ValidName(name); err != nil {
		return dlock.Leader{}, err
	}
	if err := ctx.Err(); err != nil {
		return dlock.Leader{}, storeErr("leader", err)
	}
	dir := s.dir("e", name)
	es, err := s.list(dir)
	if err != nil {
		return dlock.Leader{}, storeErr("leader", err)
	}
	h := firstHolder(es)
	if h < 0 || es[h].kind != 'e' {
		return dlock.Leader{}, dlock.ErrNoLeader
	}
	path := dir + "/" + es[h].name
	b, st, err := s.conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return dlock.Leader{}, dlock.ErrNoLeader // gone since the listing
	}
	if err != nil {
		return dlock.Leader{}, storeErr("leader", err)
	}
	var d nodeData
	if err := json.Unmarshal(b, &d); err != nil {
		return dlock.Leader{}, storeErr("leader", err)
	}
	ld := dlock.Leader{Value: d.Value, Term: st.Czxid, TTL: time.Duration(d.TTL) * time.Millisecond}
	if r, ok := s.remaining(path); ok {
		ld.TTL = r
	}
	return ld, nil
}
