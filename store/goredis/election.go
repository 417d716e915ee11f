package goredis

import (
	"context"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// The election (store.ModeElection) runs the scripts and keys of
// internal/redisproto (election.go), as store/valkey does.

var (
	_ store.Elector     = (*Store)(nil)
	_ store.LockDelayer = (*Store)(nil)
)

// Leader implements [store.Elector] in one round trip.
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	if err := s.l.CheckName(name); err != nil {
		return store.Leader{}, err
	}
	v, err := s.run(ctx, redisproto.LeaderScript, s.l.LeaderKeys(name), nil).StringSlice()
	if err != nil {
		return store.Leader{}, fail("leader", err)
	}
	return redisproto.DecodeLeader(v)
}

// SupportsLockDelay implements [store.LockDelayer]: every hold expires at
// its TTL by the server's clock (PX).
func (s *Store) SupportsLockDelay() bool { return true }
