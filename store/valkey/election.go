package valkey

import (
	"context"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// The election (store.ModeElection) runs the scripts and keys of
// internal/redisproto (election.go).

var (
	_ store.Elector     = (*Store)(nil)
	_ store.LockDelayer = (*Store)(nil)
)

// Leader implements [store.Elector] in one round trip.
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	if err := s.checkName(name); err != nil {
		return store.Leader{}, err
	}
	keys := s.l.LeaderKeys(name)
	res := s.do(ctx, 1, func(_ int, eval bool) vk.Completed {
		return cmd(s.client, redisproto.LeaderScript, keys, nil, eval)
	})
	v, err := res[0].AsStrSlice()
	if err != nil {
		return store.Leader{}, fail("leader", err)
	}
	return redisproto.DecodeLeader(v)
}

// SupportsLockDelay implements [store.LockDelayer]: every hold expires at
// its TTL by the server's clock (PX).
func (s *Store) SupportsLockDelay() bool { return true }
