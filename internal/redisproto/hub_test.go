package redisproto

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
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

// TestHubRearmsAfterAnInvalidationDuringItsRead: an invalidation handled
// while a tracked read of the key is on its way (the server ran the read,
// then a write ended that tracking, and the push was handled before the
// read's answer) leaves the key to be armed again. It used to count as
// armed by that read, and the key stayed untracked with nobody woken by
// its next change (TestWatchRearms in store/valkey failed so under load).
func TestHubRearmsAfterAnInvalidationDuringItsRead(t *testing.T) {
	t.Run("the hub's own read", func(t *testing.T) {
		var reads atomic.Int32
		_, armed := startedHub(t, func(h *Hub, keys []string) {
			if reads.Add(1) == 1 {
				h.Invalidate(keys)
			}
		})
		for want := 1; want <= 2; want++ {
			select {
			case <-armed:
			case <-time.After(10 * time.Second):
				t.Fatalf("the key was read %d time(s); want %d: a read that an invalidation overtook must be followed by another", want-1, want)
			}
		}
	})
	t.Run("a waiter's tracked acquire", func(t *testing.T) {
		h, armed := startedHub(t, func(*Hub, []string) {})
		<-armed // the first waiter's read
		gen, ok := h.Tracked("k")
		if !ok {
			t.Fatal("Tracked(k) = false for a self-armed key with a waiter")
		}
		h.Invalidate([]string{"k"}) // handled before the acquire's answer
		h.Armed("k", gen)
		select {
		case <-armed:
		case <-time.After(10 * time.Second):
			t.Fatal("no read of the key after an invalidation that overtook a tracked acquire")
		}
	})
}

// startedHub returns a running Hub with one waiter on the self-armed key
// "k", and a channel that receives after each tracked read the Hub makes
// (each read calls onRead first, then succeeds).
func startedHub(t *testing.T, onRead func(h *Hub, keys []string)) (*Hub, <-chan struct{}) {
	armed := make(chan struct{}, 10)
	var h *Hub
	h = NewHub(func(ctx context.Context, keys []string) []ArmResult {
		onRead(h, keys)
		armed <- struct{}{}
		return make([]ArmResult, len(keys))
	}, slog.Default())
	h.Start()
	t.Cleanup(h.Stop)
	h.Add("k", make(chan struct{}, 1), true)
	return h, armed
}
