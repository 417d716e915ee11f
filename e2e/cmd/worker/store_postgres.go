package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

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
	switch rule := c.opts["fence-rule"]; rule {
	case "", "floor":
	case "counter":
		if err := installCounterFence(ctx, postgresURL(c)); err != nil {
			return nil, nil, fmt.Errorf("fence-rule=counter: %w", err)
		}
		fmt.Fprintln(os.Stderr, "worker: dlock_next_fence is a counter without the clock floor (negative control)")
	default:
		return nil, nil, fmt.Errorf("-opt fence-rule=%q: want floor or counter", rule)
	}
	s, err := postgres.New(ctx, postgresURL(c))
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}

// installCounterFence runs the schema (so that the control's function is
// not overwritten by a later migration) and then the counter-only
// dlock_next_fence, under the migration lock.
func installCounterFence(ctx context.Context, u string) error {
	s, err := postgres.New(ctx, u)
	if err != nil {
		return err
	}
	s.Close()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pgMigrateKey)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, counterFence)
		return err
	})
}
