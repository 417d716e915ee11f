package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/postgres"
)

// The postgres store: the lease table of store/postgres. Options (-opt):
//
//	hosts=h1:p1,h2:p2  the servers, as one libpq multi-host URL with
//	                   target_session_attrs=read-write: every new connection
//	                   goes to whichever of them accepts writes, so the
//	                   workers follow a promoted standby as libpq clients do
//	                   (default: -addrs)
//	db=name            the database (default postgres)
//	kind=advisory      the advisory-lock store (NewAdvisory: session-level
//	                   pg_advisory_lock) instead of the lease table
//	fence-rule=counter negative control: before the workload the worker
//	                   replaces dlock_next_fence in the database with a
//	                   counter without the clock floor (last + 1), the rule
//	                   the floor exists to replace; the function is in the
//	                   catalog, so a standby replays it too
func init() {
	extraStores["postgres"] = openPostgres
}

// counterFence is the negative control's fence rule: no clock floor.
const counterFence = `CREATE OR REPLACE FUNCTION dlock_next_fence(p_last bigint, p_now timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT p_last + 1 $$`

// pgMigrateKey is store/postgres's migration lock ('dlock' in ASCII): the
// control's CREATE OR REPLACE runs under it, so workers that start together
// do not update the function at once.
const pgMigrateKey = 0x646c6f636b

func postgresURL(c config) string {
	hosts := c.opts["hosts"]
	if hosts == "" {
		hosts = strings.Join(c.addrs, ",")
	}
	db := c.opts["db"]
	if db == "" {
		db = "postgres"
	}
	q := url.Values{}
	q.Set("sslmode", "disable")
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", "2")
	return fmt.Sprintf("postgres://postgres@%s/%s?%s", hosts, url.PathEscape(db), q.Encode())
}

func openPostgres(ctx context.Context, c config) (store.Store, func(), error) {
	rule := c.opts["fence-rule"]
	if rule != "" && rule != "floor" && rule != "counter" {
		return nil, nil, fmt.Errorf("-opt fence-rule=%q: want floor or counter", rule)
	}
	switch kind := c.opts["kind"]; kind {
	case "", "table":
	case "advisory":
		if rule == "counter" {
			return nil, nil, errors.New("-opt fence-rule=counter is for the lease table")
		}
		a, err := postgres.NewAdvisory(ctx, postgresURL(c))
		if err != nil {
			return nil, nil, err
		}
		return a, func() { a.Close() }, nil
	default:
		return nil, nil, fmt.Errorf("-opt kind=%q: want table or advisory", kind)
	}
	s, err := postgres.New(ctx, postgresURL(c))
	if err != nil {
		return nil, nil, err
	}
	if rule == "counter" {
		// After New's migration, so that no later one overwrites it.
		if err := installCounterFence(ctx, s.Pool()); err != nil {
			s.Close()
			return nil, nil, fmt.Errorf("fence-rule=counter: %w", err)
		}
		fmt.Fprintln(os.Stderr, "worker: dlock_next_fence is a counter without the clock floor (negative control)")
	}
	return s, func() { s.Close() }, nil
}

// installCounterFence replaces dlock_next_fence with the counter-only rule,
// under the migration lock.
func installCounterFence(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pgMigrateKey)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, counterFence)
		return err
	})
}
