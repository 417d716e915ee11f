package redisproto

import (
	"log/slog"
	"testing"
)

// TestHubIdle: Idle is true exactly while no key has waiters, and a Wake
// still reaches a waiter added before it.
func TestHubIdle(t *testing.T) {
	h := NewHub(nil, slog.Default())
	if !h.Idle() {
		t.Fatal("a new Hub is not Idle")
	}
	a, b := make(chan struct{}, 1), make(chan struct{}, 1)
	h.Add("k", a, false)
	h.Add("k", b, false)
	h.Add("j", a, false)
	if h.Idle() {
		t.Fatal("Idle with waiters")
	}
	h.Wake("k")
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("Wake reached %d and %d waiters of 1 each", len(a), len(b))
	}
	h.Remove("k", a)
	h.Remove("k", b)
	if h.Idle() {
		t.Fatal("Idle while j has a waiter")
	}
	h.Remove("j", a)
	if !h.Idle() {
		t.Fatal("not Idle after every waiter left")
	}
}
