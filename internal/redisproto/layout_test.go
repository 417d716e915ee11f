package redisproto

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

func TestSeen(t *testing.T) {
	l := NewLayout("lock:", time.Hour)
	if l.Seen("a") {
		t.Fatal("Seen(a) on a new Layout = true")
	}
	if !l.Seen("a") {
		t.Fatal("Seen(a) after asking for a = false")
	}
	if NewLayout("lock:", time.Hour).Seen("a") {
		t.Error("another Layout saw a")
	}
	// Lossy, but not much: of 1000 new names, few collide with the 1000
	// before them in 4096 entries.
	for i := range 1000 {
		l.Seen("x" + strconv.Itoa(i))
	}
	wrong := 0
	for i := range 1000 {
		if l.Seen("y" + strconv.Itoa(i)) {
			wrong++
		}
	}
	if wrong > 0 {
		t.Errorf("%d of 1000 new names reported seen; entries hold a name's whole hash", wrong)
	}
	// A name is forgotten when another of the 1000 shares its entry, and
	// then both are: 1000 × (1 − (1 − 1/4096)^999) ≈ 216 on average
	// (standard deviation about 14).
	forgotten := 0
	for i := range 1000 {
		if !l.Seen("y" + strconv.Itoa(i)) {
			forgotten++
		}
	}
	if forgotten > 300 {
		t.Errorf("%d of the last 1000 names forgotten, want most kept in 4096 entries", forgotten)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				l.Seen(strconv.Itoa(g*1000 + i))
			}
		})
	}
	wg.Wait()
}

// TestCheckTokenRefusesMarkers: every request's token is checked (acquire,
// extend, release, fence raise) and one shaped like a marker the scripts
// keep in a main key is refused, naming the field.
func TestCheckTokenRefusesMarkers(t *testing.T) {
	l := NewLayout("lock:", time.Hour)
	for _, tok := range []string{"dlock:", "dlock:read", "dlock:write", "dlock:reentrant", "dlock:fair", "dlock:election", "dlock:semaphore:3"} {
		req := store.Request{Name: "a", Token: tok, TTL: time.Second}
		for _, check := range []func(store.Request) error{l.CheckToken, l.CheckRequest} {
			var inv *store.InvalidError
			if err := check(req); !errors.As(err, &inv) || inv.Field != "token" {
				t.Errorf("check of token %q = %v, want an *InvalidError naming token", tok, err)
			}
		}
	}
	for _, tok := range []string{"DLOCK:read", "xdlock:read", "dlock", "0123456789abcdef"} {
		if err := l.CheckRequest(store.Request{Name: "a", Token: tok, TTL: time.Second}); err != nil {
			t.Errorf("CheckRequest with token %q = %v, want nil", tok, err)
		}
	}
}
