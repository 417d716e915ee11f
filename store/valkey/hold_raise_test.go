package valkey_test

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// TestRaisedHoldKeepsItsRecord: a hold whose fence store/redlock raised
// after its grant (RaiseFence, the fence write-back) still shows its
// record in State, with the raised fence: the record belongs to the
// token, whatever fence it was first issued. Before, State matched the
// record by its issued fence and showed such a mutex or leader as held by
// an unknown owner, on every node the write-back raised.
func TestRaisedHoldKeepsItsRecord(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	for _, m := range []store.Mode{store.ModeMutex, store.ModeElection} {
		req := store.Request{Name: "raised-" + m.String(), Token: "tok-" + m.String(), TTL: 10 * time.Second, Mode: m,
			Holder: "web-1/42", Data: "job 7"}
		if m == store.ModeElection {
			req.Value = "candidate"
		}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire(%v) = %+v, %v", m, g, err)
		}
		high := g.Fence + 1_000_000
		if err := s.RaiseFence(ctx, req, high); err != nil {
			t.Fatalf("RaiseFence(%v) = %v", m, err)
		}
		st, err := s.State(ctx, req.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Owners) != 1 || st.Owners[0].Owner != req.Holder || st.Owners[0].Data != req.Data || st.Owners[0].Fence != high {
			t.Errorf("State of a %v hold raised to %d = %+v, want its record (%q, %q) with the raised fence", m, high, st.Owners, req.Holder, req.Data)
		}
	}
}
