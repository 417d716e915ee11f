package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/jackc/pgx/v5"
)

// The election (store.ModeElection) is kind 6 of the lease table: an
// exclusive hold whose row keeps the leader's value in owner; the term is
// the grant's fence. A new leader is notified like a release, so observers
// wake on grants too.

var _ store.Elector = (*Store)(nil)

const leaderSQL = `SELECT owner, fence, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM dlock_leases WHERE kind = 6 AND name = $1 AND held AND expires_at > clock_timestamp() LIMIT 1`

// Leader implements [store.Elector] with one query; the TTL is judged by
// the database's clock.
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	if err := store.ValidName(name); err != nil {
		return store.Leader{}, err
	}
	var (
		ld   store.Leader
		left int64
	)
	err := s.pool.QueryRow(ctx, leaderSQL, name).Scan(&ld.Value, &ld.Term, &left)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Leader{}, store.ErrNoLeader
	}
	if err != nil {
		return store.Leader{}, storeErr("leader", err)
	}
	ld.TTL = max(time.Duration(left)*time.Millisecond, time.Millisecond)
	return ld, nil
}
