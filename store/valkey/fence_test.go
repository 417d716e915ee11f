package valkey_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
)

func TestRaiseFence(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := testContext(t)
	req := dlock.Request{Name: "raise", Token: "a", TTL: 10 * time.Second, Mode: dlock.ModeMutex}
	if err := s.RaiseFence(ctx, req, 5); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("RaiseFence on a free lock = %v, want ErrNotHeld", err)
	}
	g, err := s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	high := g.Fence + 1_000_000
	if err := s.RaiseFence(ctx, req, high); err != nil {
		t.Fatalf("RaiseFence by the holder = %v, want nil", err)
	}
	if err := s.RaiseFence(ctx, req, g.Fence); err != nil {
		t.Fatalf("RaiseFence below the counter = %v, want nil", err)
	}
	other := req
	other.Token = "b"
	if err := s.RaiseFence(ctx, other, high+5); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("RaiseFence by another token = %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	g2, err := s.Acquire(ctx, other)
	if err != nil || !g2.Acquired {
		t.Fatalf("Acquire(b) = %+v, %v", g2, err)
	}
	if g2.Fence != high+1 {
		t.Errorf("fence after RaiseFence(%d) = %d, want %d (never lowered, not raised by others)", high, g2.Fence, high+1)
	}
	if ttl := mustDo(t, srv, "PTTL", s.AuxKey("raise", "fence")); ttl == "-1" {
		t.Errorf("fence counter has no expiry after a raise")
	}
	if err := s.RaiseFence(ctx, dlock.Request{Name: "raise", Token: "b", TTL: time.Second, Mode: dlock.ModeFair}, 1); !errors.Is(err, dlock.ErrNotSupported) {
		t.Errorf("RaiseFence(mode fair) = %v, want ErrNotSupported", err)
	}
}

func TestRaiseFenceWrite(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := testContext(t)
	w := dlock.Request{Name: "raise-rw", Token: "w", TTL: 10 * time.Second, Mode: dlock.ModeWrite}
	r := dlock.Request{Name: "raise-rw", Token: "r", TTL: 10 * time.Second, Mode: dlock.ModeRead}
	if err := s.RaiseFence(ctx, w, 5); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("RaiseFence on a free lock = %v, want ErrNotHeld", err)
	}
	g, err := s.Acquire(ctx, w)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire(write) = %+v, %v", g, err)
	}
	high := g.Fence + 1_000_000
	if err := s.RaiseFence(ctx, w, high); err != nil {
		t.Fatalf("RaiseFence by the writer = %v, want nil", err)
	}
	if err := s.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	gr, err := s.Acquire(ctx, r)
	if err != nil || !gr.Acquired {
		t.Fatalf("Acquire(read) = %+v, %v", gr, err)
	}
	if gr.Fence != high {
		t.Errorf("reader fence after RaiseFence(%d) = %d, want %d", high, gr.Fence, high)
	}
	if err := s.RaiseFence(ctx, dlock.Request{Name: "raise-rw", Token: "r", Mode: dlock.ModeWrite}, high+9); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("RaiseFence by a reader = %v, want ErrNotHeld", err)
	}
	s.Release(ctx, r)
	w2 := w
	w2.Token = "w2"
	if g2, err := s.Acquire(ctx, w2); err != nil || g2.Fence != high+1 {
		t.Errorf("next writer = %+v, %v; want fence %d", g2, err, high+1)
	}
}
