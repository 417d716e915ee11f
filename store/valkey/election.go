package valkey

import (
	"context"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisproto"
)

// The election (dlock.ModeElection) runs the scripts and keys of
// internal/redisproto (election.go).

var (
	_ dlock.Elector     = (*Store)(nil)
	_ dlock.LockDelayer = (*Store)(nil)
)

// Leader implements [dlock.Elector] in one round trip.
func (s *Store) Leader(ctx context.Context, name string) (dlock.Leader, error) {
	if err := s.checkName(name); err != nil {
		return dlock.Leader{}, err
	}
	keys := s.l.LeaderKeys(name)
	res := s.do(ctx, 1, func(_ int, eval bool) vk.Completed {
		return cmd(s.client, redisproto.LeaderScript, keys, nil, eval)
	})
	v, err := res[0].AsStrSlice()
	if err != nil {
		return dlock.Leader{}, fail("leader", err)
	}
	return redisproto.DecodeLeader(v)
}

// SupportsLockDelay implements [dlock.LockDelayer]: every hold expires at
// its TTL by the server's clock (PX).
func (s *Store) SupportsLockDelay() bool { return true }
