package postgres

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// A hold's record (issue 38) lives in its dlock_leases row: the columns
// holder, data, since (the grant, by the database's clock), min_ms and
// max_ms, written by the statement that grants the hold and deleted with
// the row. See [Schema].

var (
	_ store.Resumer       = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// Resume implements [store.Resumer]: one call of dlock_resume, which locks
// the name's rows, checks that req.Token holds the name in req.Mode by the
// database's clock, and extends the hold to req.TTL capped by its MaxHold,
// in one transaction. It returns [store.ErrNotHeld] when the token holds
// nothing (expired, released, or held in another mode); nothing changes
// then.
func (s *Store) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	k, err := kind(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	if err := validate(req); err != nil {
		return store.Grant{}, err
	}
	var (
		ok                  bool
		fence, ttl, maxLeft int64
		count               int32
	)
	err = s.pool.QueryRow(ctx, "SELECT o_ok, o_fence, o_count, o_ttl_ms, o_max_left_ms FROM dlock_resume($1, $2, $3, $4, $5)",
		k, req.Name, req.Token, int16(req.Mode), ms(req.TTL)).Scan(&ok, &fence, &count, &ttl, &maxLeft)
	if err != nil {
		return store.Grant{}, storeErr("resume", err)
	}
	if !ok {
		return store.Grant{}, store.ErrNotHeld
	}
	return store.Grant{
		Acquired: true, Fence: fence, Count: int(count),
		TTL: time.Duration(ttl) * time.Millisecond, MaxHoldLeft: time.Duration(maxLeft) * time.Millisecond,
	}, nil
}

// ForceRelease implements [store.ForceReleaser]: one call of
// dlock_force_release, which locks the name's row and deletes every hold of
// the name, whatever its pattern and token, a hold kept by its MinHold too,
// and notifies the name's watchers on commit. Queue places (fair tickets,
// writer intents) stay; the fence counters are untouched, so the next
// grant's fence is above every ended hold's. It returns the live holds it
// ended (a reentrant hold once), none when nobody held the name.
func (s *Store) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	if err := store.ValidName(name); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT o_holder, o_since, o_data, o_fence FROM dlock_force_release($1)", name)
	if err != nil {
		return nil, storeErr("force release", err)
	}
	defer rows.Close()
	var out []store.Holder
	for rows.Next() {
		var (
			h     store.Holder
			since *time.Time
		)
		if err := rows.Scan(&h.Owner, &since, &h.Data, &h.Fence); err != nil {
			return nil, storeErr("force release", err)
		}
		if since != nil {
			h.Since = since.Truncate(time.Millisecond)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr("force release", err)
	}
	return out, nil
}
