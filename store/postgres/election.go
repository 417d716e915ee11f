package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/jackc/pgx/v5"
)

// The election (dlock.ModeElection) is kind 6 of the lease table: an
// exclusive hold whose row keeps the leader's value in owner; the term is
// the grant's fence. A new leader is notified like a release, so observers
// wake on grants too.

var _ dlock.Elector = (*Store)(nil)

const leaderSQL = `SELECT owner, fence, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM dlock_leases WHERE kind = 6 AND name = $1 AND held AND expires_at > clock_timestamp() LIMIT 1`

// Leader implements [dlock.Elector] with one query; the TTL is judged by
// the database's clock.
func (s *Store) Leader(ctx context.Context, name string) (dlock.Leader, error) {
	if err := dlock.ValidName(name); err != nil {
		return dlock.Leader{}, err
	}
	var (
		ld   dlock.Leader
		left int64
	)
	err := s.pool.QueryRow(ctx, leaderSQL, name).Scan(&ld.Value, &ld.Term, &left)
	if errors.Is(err, pgx.ErrNoRows) {
		return dlock.Leader{}, dlock.ErrNoLeader
	}
	if err != nil {
		return dlock.Leader{}, storeErr("leader", err)
	}
	ld.TTL = max(time.Duration(left)*time.Millisecond, time.Millisecond)
	return ld, nil
}
