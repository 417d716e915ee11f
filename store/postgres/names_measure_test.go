package postgres_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestMeasureRowsPerName measures what distinct names leave in PostgreSQL
// once each was acquired and released: the rows of dlock_locks and
// dlock_leases, and the size of the two tables with their indexes (after a
// VACUUM FULL, so that dead tuples do not count), per name. A measurement,
// not a check: it runs when DLOCK_MEASURE_NAMES is set to the number of
// names, e.g.
//
//	DLOCK_MEASURE_NAMES=20000 go test -run TestMeasureRowsPerName -v ./store/postgres
func TestMeasureRowsPerName(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DLOCK_MEASURE_NAMES"))
	if n <= 0 {
		t.Skip("a measurement: set DLOCK_MEASURE_NAMES to the number of names")
	}
	srv := pgtest.Start(t)
	s := newStore(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	size := func() (rows, bytes int64) {
		t.Helper()
		for _, table := range []string{"dlock_locks", "dlock_leases"} {
			if _, err := conn.Exec(ctx, "VACUUM FULL "+table); err != nil {
				t.Fatal(err)
			}
		}
		err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM dlock_locks) + (SELECT count(*) FROM dlock_leases),
  pg_total_relation_size('dlock_locks') + pg_total_relation_size('dlock_leases')`).Scan(&rows, &bytes)
		if err != nil {
			t.Fatal(err)
		}
		return rows, bytes
	}
	_, base := size()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				req := store.Request{Name: "name-" + strconv.Itoa(i), Token: "t", TTL: 30 * time.Second}
				if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
					t.Errorf("Acquire = %+v, %v", g, err)
					return
				}
				if err := s.Release(ctx, req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	rows, used := size()
	t.Logf("%d names acquired and released: %d rows in dlock_locks and dlock_leases, tables and indexes %d -> %d bytes, %.1f bytes per name",
		n, rows, base, used, float64(used-base)/float64(n))
}
