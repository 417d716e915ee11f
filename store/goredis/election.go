package goredis

import (
	"context"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisproto"
)

// The election (dlock.ModeElection) runs the scripts and keys of
// internal/redisproto (election.go), as store/valkey does.

var (
	_ dlock.Elector     = (*Store)(nil)
	_ dlock.LockDelayer = (*Store)(nil)
)

// Leader implements [dlock.Elector] in one round trip.
func (s *Store) Leader(ctx context.Context, name string) (dlock.Leader, error) {
	if err := s.l.CheckName(name); err != nil {
		return dlock.Leader{}, err
	}
	v, err := s.run(ctx, redisproto.LeaderScript, s.l.LeaderKeys(name), nil).StringSlice()
	if err != nil {
		return dlock.Leader{}, fail("leader", err)
	}
	return redisproto.DecodeLeader(v)
}

// SupportsLockDelay implements [dlock.LockDelayer]: every hold expires at
// its TTL by the server's clock (PX).
func (s *Store) SupportsLockDelay() bool { return true }
