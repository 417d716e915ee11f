package zookeeper_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// BenchmarkMutexCycle measures one Acquire and one Release of a mutex on
// a free name: bare, and with a hold record (Holder and Data, issue 38),
// which rides in the node's data that the grant writes anyway. Compare the
// two (and a build before the record) as ratios from one run.
func BenchmarkMutexCycle(b *testing.B) {
	srv := zktest.Start(b)
	s, err := zookeeper.New(b.Context(), []string{srv.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, name := range []string{"bare", "record"} {
		b.Run(name, func(b *testing.B) {
			ctx := b.Context()
			req := store.Request{Name: "bench-" + name, TTL: 10 * time.Second}
			if name == "record" {
				req.Holder, req.Data = "host.example/4242", `{"job":"nightly","run":1234}`
			}
			for i := 0; b.Loop(); i++ {
				req.Token = strconv.Itoa(i)
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
