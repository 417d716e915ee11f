package etcd

import (
	"testing"

	"github.com/dlock-dev/dlock/store"
)

// TestKeyLayout pins the keys the store writes: they are shared with every
// dlock version that runs against the same etcd, so a change to how the
// code names a kind must not move them.
func TestKeyLayout(t *testing.T) {
	s := &Store{prefix: "dlock/"}
	tests := []struct {
		mode store.Mode
		want string
	}{
		{store.ModeMutex, "dlock/l/m/7:na:me/x/h/tok"},
		{store.ModeReentrant, "dlock/l/r/7:na:me/x/h/tok"},
		{store.ModeRead, "dlock/l/w/7:na:me/x/h/tok"},
		{store.ModeWrite, "dlock/l/w/7:na:me/x/w/tok"},
		{store.ModeFair, "dlock/l/f/7:na:me/x/h/tok"},
		{store.ModeSemaphore, "dlock/l/s/7:na:me/x/h/tok"},
		{store.ModeElection, "dlock/l/e/7:na:me/x/h/tok"},
	}
	for _, tt := range tests {
		k, err := kindOf(tt.mode)
		if err != nil {
			t.Fatalf("kindOf(%v) = %v", tt.mode, err)
		}
		req := store.Request{Name: "na:me/x", Token: "tok", Mode: tt.mode}
		if got := s.key(k, req); got != tt.want {
			t.Errorf("key(%v) = %q, want %q", tt.mode, got, tt.want)
		}
		gk, name, token, ok := parseLockKey(tt.want[len("dlock/l/"):])
		if !ok || gk != k || name != req.Name || token != req.Token {
			t.Errorf("parseLockKey(%q) = %v, %q, %q, %v, want %v, %q, %q, true", tt.want, gk, name, token, ok, k, req.Name, req.Token)
		}
	}
	for _, tt := range []struct{ got, want string }{
		{s.fenceKey("na:me"), "dlock/f/n/5:na:me"},
		{s.slotKey("na:me", 3), "dlock/s/s/5:na:me/3"},
	} {
		if tt.got != tt.want {
			t.Errorf("key = %q, want %q", tt.got, tt.want)
		}
	}
	if _, _, _, ok := parseLockKey("x/5:na:me/h/tok"); ok {
		t.Errorf("parseLockKey of an unknown kind = ok, want not ok")
	}
}
