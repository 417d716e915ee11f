package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// TestBesideAnchorGone checks that a node entering beside a hold is not
// created once that hold's node is gone (the multi-op's check fails).
func TestBesideAnchorGone(t *testing.T) {
	srv := zktest.Start(t)
	s, err := New(t.Context(), []string{srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name         string
		anchor, next store.Request
	}{
		{"Reentry", store.Request{Name: "gone-r", Token: "a", Owner: "x", Mode: store.ModeReentrant}, store.Request{Name: "gone-r", Token: "b", Owner: "x", Mode: store.ModeReentrant}},
		{"Downgrade", store.Request{Name: "gone-w", Token: "w", Mode: store.ModeWrite}, store.Request{Name: "gone-w", Token: "r", Owner: "w", Mode: store.ModeRead}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.anchor.TTL, tc.next.TTL = 10*time.Second, 10*time.Second
			if g, err := s.Acquire(t.Context(), tc.anchor); err != nil || !g.Acquired {
				t.Fatalf("Acquire = %+v, %v", g, err)
			}
			kind, _ := kindOf(tc.next.Mode)
			dir := s.dir(kind, tc.next.Name)
			es, err := s.list(dir)
			if err != nil || len(es) != 1 {
				t.Fatalf("list = %v, %v; want the anchor", es, err)
			}
			if err := s.conn.Delete(dir+"/"+es[0].name, -1); err != nil {
				t.Fatal(err)
			}
			if _, err := s.acquireBeside(kind, tc.next, dir, es, 0); !errors.Is(err, errAnchorGone) {
				t.Fatalf("acquireBeside with its anchor deleted = %v, want errAnchorGone", err)
			}
			if es, err := s.listAll(dir); err != nil || len(es) != 0 {
				t.Errorf("nodes after the refused multi-op = %v, %v; want none", es, err)
			}
			if g, err := s.Acquire(t.Context(), tc.next); err != nil || !g.Acquired || g.Count != 1 {
				t.Errorf("Acquire after the anchor went = %+v, %v; want a grant on its own", g, err)
			}
		})
	}
}
