package etcd

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The election (store.ModeElection) is an exclusive pattern of its own
// (kindElection): the leader's key holds its value, the grant's revision is
// the term.

var _ store.Elector = (*Store)(nil)

// Leader implements [store.Elector] with one read of the name's keys. The
// TTL is known to the millisecond for a leader that campaigned through this
// store; for another process's leader it is the remaining time of its etcd
// lease (whole seconds, one more round trip), at most the TTL it asked for.
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	if err := store.ValidName(name); err != nil {
		return store.Leader{}, err
	}
	vw, err := s.read(ctx, kindElection, name)
	if err != nil {
		return store.Leader{}, storeErr("leader", err)
	}
	if len(vw.entries) == 0 || !vw.entries[0].v.Held {
		return store.Leader{}, store.ErrNoLeader
	}
	e := vw.entries[0]
	ld := store.Leader{Value: e.v.Value, Term: e.fence(), TTL: s.left(e, time.Now())}
	if r, ok := s.remaining(string(e.kv.Key)); ok {
		ld.TTL = r
		return ld, nil
	}
	if e.kv.Lease != 0 {
		resp, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(e.kv.Lease))
		if err != nil {
			return store.Leader{}, storeErr("leader", err)
		}
		if resp.TTL <= 0 {
			return store.Leader{}, store.ErrNoLeader // expired since the read
		}
		ld.TTL = min(ld.TTL, time.Duration(resp.TTL)*time.Second)
	}
	return ld, nil
}
