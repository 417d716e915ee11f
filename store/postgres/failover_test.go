package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestFenceRisesAfterAsyncStandbyPromoted: a failover to an asynchronous
// standby that lagged does not repeat a fence. A primary streams to a hot
// standby; grants that reached the standby, then the standby's WAL receiver
// is cut (primary_conninfo emptied and reloaded), grants that it never gets,
// the primary is killed and the standby promoted. Its fence row is stale (the
// test checks it is), yet the next grant through the store is above every
// fence issued before, because dlock_next_fence applies the clock floor on
// every grant. A negative control on the promoted standby (a counter-only
// dlock_next_fence, rolled back) must issue a fence that is not above them.
func TestFenceRisesAfterAsyncStandbyPromoted(t *testing.T) {
	began := time.Now()
	primary := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const name = "failover-fence"
	grant := func(s *postgres.Store, tok string) int64 {
		t.Helper()
		req := store.Request{Name: name, Token: tok, TTL: time.Minute}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v; want a grant", tok, g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release(%s) = %v", tok, err)
		}
		return g.Fence
	}
	ps := newStore(t, primary.URL())
	var issued []int64
	for i := range 3 {
		issued = append(issued, grant(ps, fmt.Sprintf("before-backup-%d", i)))
	}
	standby := pgtest.StartStandby(t, primary)
	for i := range 3 {
		issued = append(issued, grant(ps, fmt.Sprintf("streamed-%d", i)))
	}
	pc, sc := connect(t, primary.URL()), connect(t, standby.URL())

	// Wait until the standby has replayed every grant so far.
	var lsn string
	if err := pc.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "standby replays the primary's WAL", func() (bool, error) {
		var ok bool
		err := sc.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&ok)
		return ok, err
	})
	replicated := standbyFence(ctx, t, sc, name)
	if replicated != issued[len(issued)-1] {
		t.Fatalf("standby's fence row = %d, want %d (the last streamed grant)", replicated, issued[len(issued)-1])
	}

	// Cut replication: with primary_conninfo empty the WAL receiver stops
	// and does not come back.
	for _, q := range []string{"ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"} {
		if _, err := sc.Exec(ctx, q); err != nil {
			t.Fatalf("%s on the standby: %v", q, err)
		}
	}
	poll(ctx, t, "the standby's WAL receiver stops", func() (bool, error) {
		var n int
		err := sc.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&n)
		return n == 0, err
	})
	for i := range 3 {
		issued = append(issued, grant(ps, fmt.Sprintf("lost-%d", i)))
	}
	top := issued[0]
	for i, f := range issued {
		if i > 0 && f <= issued[i-1] {
			t.Fatalf("fences on the primary = %v: not strictly increasing", issued)
		}
		top = max(top, f)
	}
	primary.Kill()
	var promoted bool
	if err := sc.QueryRow(ctx, "SELECT pg_promote(true, 30)").Scan(&promoted); err != nil || !promoted {
		t.Fatalf("pg_promote on the standby = %v, %v", promoted, err)
	}
	if stale := standbyFence(ctx, t, sc, name); stale >= top {
		t.Fatalf("promoted standby's fence row = %d, want it stale (below %d): the failover lost no grant, the test tests nothing", stale, top)
	}

	// Negative control: a counter without the clock floor, in a transaction
	// rolled back, issues a fence that is not above every fence issued.
	tx, err := sc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var control int64
	_, err = tx.Exec(ctx, `CREATE OR REPLACE FUNCTION dlock_next_fence(p_last bigint, p_now timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT p_last + 1 $$`)
	if err == nil {
		err = tx.QueryRow(ctx, "SELECT o_fence FROM dlock_acquire(0::smallint, $1, 'control', 0::smallint, '', 0, 60000, false, 60000)", name).Scan(&control)
	}
	tx.Rollback(ctx)
	if err != nil {
		t.Fatalf("negative control: %v", err)
	}
	if control > top {
		t.Fatalf("negative control: a counter-only fence after the failover = %d, above every fence issued (%d): the test would not catch a repeat", control, top)
	}

	ss := newStore(t, standby.URL())
	after := grant(ss, "after-failover")
	t.Logf("fences on the primary %v; the standby had %d; counter-only control %d; first grant after promotion %d; %v",
		issued, replicated, control, after, time.Since(began).Round(time.Millisecond))
	if after <= top {
		t.Fatalf("first fence after the promotion = %d, want above every fence issued before (%d)", after, top)
	}
	if next := grant(ss, "after-failover-2"); next <= after {
		t.Fatalf("second fence after the promotion = %d, want above %d", next, after)
	}
}

// standbyFence is the fence row of name (kind -1) on the server c talks to.
func standbyFence(ctx context.Context, t *testing.T, c *pgx.Conn, name string) int64 {
	t.Helper()
	var f int64
	if err := c.QueryRow(ctx, "SELECT fence FROM dlock_locks WHERE kind = -1 AND name = $1", name).Scan(&f); err != nil {
		t.Fatalf("read the fence row of %q: %v", name, err)
	}
	return f
}

// poll calls cond until it reports true, failing t when ctx ends first.
func poll(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within the deadline (last error %v)", what, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
