package postgres_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BenchmarkRecordCost measures what schema 6's hold record costs a mutex
// Acquire+Release, before and after in one run on one server, interleaved:
// "schema5" is the calls of schema 5 on a database of schema 5 only,
// "schema6" the store's calls with no record (the grant time is still
// written), "schema6-record" with a Holder and 64 bytes of Data. It reports
// each one's median and the ratios to schema5.
//
//	go test -run '^$' -bench RecordCost -count 5 ./store/postgres
func BenchmarkRecordCost(b *testing.B) {
	srv := pgtest.Start(b)
	ctx := b.Context()
	s := newStore(b, srv.URL())
	if _, err := s.Pool().Exec(ctx, "CREATE DATABASE schema5"); err != nil {
		b.Fatal(err)
	}
	old, err := pgxpool.New(ctx, strings.Replace(srv.URL(), "/postgres?", "/schema5?", 1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(old.Close)
	if _, err := old.Exec(ctx, schema5); err != nil {
		b.Fatal(err)
	}
	oldOp := func(name string) {
		var status string
		if err := old.QueryRow(ctx, "SELECT o_status FROM dlock_acquire(0::smallint, $1, 't', 0::smallint, '', 0, 60000, false, 0)", name).Scan(&status); err != nil || status != "acquired" {
			b.Fatalf("dlock_acquire = %s, %v", status, err)
		}
		var ok bool
		if err := old.QueryRow(ctx, "SELECT dlock_release(0::smallint, $1, 't')", name).Scan(&ok); err != nil || !ok {
			b.Fatalf("dlock_release = %v, %v", ok, err)
		}
	}
	newOp := func(req store.Request) {
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			b.Fatalf("Acquire = %+v, %v", g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	// The three run interleaved, so that the machine's load falls on each
	// alike; each reports its median.
	var d5, d6, d6r []time.Duration
	timed := func(into *[]time.Duration, op func()) {
		t0 := time.Now()
		op()
		*into = append(*into, time.Since(t0))
	}
	for i := 0; b.Loop(); i++ {
		name := "bench-" + strconv.Itoa(i%64)
		req := store.Request{Name: name, Token: "t", TTL: time.Minute}
		rec := req
		rec.Holder, rec.Data = "host.example/4242", strings.Repeat("d", 64)
		timed(&d5, func() { oldOp(name) })
		timed(&d6, func() { newOp(req) })
		timed(&d6r, func() { newOp(rec) })
	}
	m5, m6, m6r := median(d5), median(d6), median(d6r)
	b.ReportMetric(float64(m5.Microseconds()), "schema5-µs")
	b.ReportMetric(float64(m6.Microseconds()), "schema6-µs")
	b.ReportMetric(float64(m6r.Microseconds()), "schema6-record-µs")
	b.ReportMetric(float64(m6)/float64(m5), "schema6/schema5")
	b.ReportMetric(float64(m6r)/float64(m5), "record/schema5")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
