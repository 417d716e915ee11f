package etcd_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
)

// BenchmarkMutexRecord is a mutex Acquire and Release on etcd without a
// hold record (plain) and with a Holder and Data (record), in one run, so
// the record's cost reads as the ratio of the two:
//
//	go test -run '^$' -bench BenchmarkMutexRecord -count 5 ./store/etcd
func BenchmarkMutexRecord(b *testing.B) {
	srv := etcdtest.Start(b)
	s, err := etcd.New(b.Context(), []string{srv.Endpoint()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, bc := range []struct {
		name         string
		holder, data string
	}{{"plain", "", ""}, {"record", "host-1/4242", "job 7 of the nightly run"}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := b.Context()
			i := 0
			for b.Loop() {
				i++
				req := store.Request{Name: "bench-" + bc.name, Token: strconv.Itoa(i), TTL: 10 * time.Second, Holder: bc.holder, Data: bc.data}
				if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
					b.Fatalf("Acquire = %+v, %v", g, err)
				}
				if err := s.Release(ctx, req); err != nil {
					b.Fatalf("Release = %v", err)
				}
			}
		})
	}
}
