package prototest

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// holdStores returns s as the Inspector and ForceReleaser that the checks
// of a hold's record need.
func holdStores(t *testing.T, s store.Store) (store.Inspector, store.ForceReleaser) {
	t.Helper()
	in, ok1 := s.(store.Inspector)
	fr, ok2 := s.(store.ForceReleaser)
	if !ok1 || !ok2 {
		t.Fatalf("%T is not a store.Inspector and a store.ForceReleaser", s)
	}
	return in, fr
}

// holdKeys: a mutex granted with a record keeps exactly its token in the
// lock key, so another library's SET NX is refused and its
// compare-and-delete would work; the record's key expires no later than
// the lock key and goes with the release; a grant without a record writes
// neither the record's key nor the waiters flag, and its release by the
// Store that granted the record before is one script still (the record's
// short form, three keys).
func holdKeys(t *testing.T, srv *testredis.Server, s store.Store) {
	ctx := Context(t)
	name := "prototest-hold-keys"
	rec, flag := layout.Aux(name, "hold"), layout.Aux(name, "waiters:flag")
	req := store.Request{Name: name, Token: "tok-h", TTL: 20 * time.Second, Holder: "host/1", Data: "d"}
	grant(t, s, req)
	if got := do(t, srv, "GET", layout.Key(name)); got != req.Token {
		t.Errorf("GET %s = %q, want exactly the token %q", layout.Key(name), got, req.Token)
	}
	if got := do(t, srv, "SET", layout.Key(name), "foreign", "NX", "PX", "10000"); got != "" {
		t.Errorf("a foreign SET NX over a hold with a record = %q, want refused", got)
	}
	// The lock key's first: read second, the record's can only be lower if
	// it expires no later (a loaded machine can take milliseconds between).
	if lock, ms := pttl(t, srv, layout.Key(name)), pttl(t, srv, rec); ms <= 0 || ms > lock+5 {
		t.Errorf("PTTL of the record = %d ms, the lock key's %d ms: want the record to expire with the hold", ms, lock)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if got := do(t, srv, "EXISTS", layout.Key(name), rec); got != "0" {
		t.Errorf("EXISTS lock key and record after Release = %s, want 0", got)
	}
	plain := store.Request{Name: name, Token: "tok-p", TTL: 20 * time.Second}
	grant(t, s, plain)
	if got := do(t, srv, "EXISTS", rec, flag); got != "0" {
		t.Errorf("EXISTS record and waiters flag after a grant without a record = %s, want 0: nothing written", got)
	}
	do(t, srv, "CONFIG", "SET", "slowlog-log-slower-than", "0")
	do(t, srv, "CONFIG", "SET", "slowlog-max-len", "1000")
	t.Cleanup(func() { do(t, srv, "CONFIG", "SET", "slowlog-log-slower-than", "10000") })
	evalshaKeyCounts(t, srv)
	if err := s.Release(ctx, plain); err != nil {
		t.Fatalf("Release without a record = %v", err)
	}
	if got := evalshaKeyCounts(t, srv); !slices.Equal(got, []string{"3"}) {
		t.Errorf("release without a record of a name granted with one before sent %v keys, want [3] (one script)", got)
	}
	if got := do(t, srv, "EXISTS", layout.Key(name)); got != "0" {
		t.Errorf("EXISTS %s after Release = %s, want 0", layout.Key(name), got)
	}
}

// holdStaleRecord: a record whose hold a foreign client took over (a DEL,
// then its SET NX) is never shown: the foreign holder is an unknown owner,
// and a force-release of it ends the foreign key, returning that unknown
// owner, while the fence key and the slot's mark stay, so the next grant's
// fence is higher.
func holdStaleRecord(t *testing.T, srv *testredis.Server, s store.Store) {
	ctx := Context(t)
	in, fr := holdStores(t, s)
	name := "prototest-hold-stale"
	req := store.Request{Name: name, Token: "tok-s", TTL: 20 * time.Second, Holder: "host/2"}
	g := grant(t, s, req)
	do(t, srv, "DEL", layout.Key(name))
	do(t, srv, "SET", layout.Key(name), "foreign", "NX", "PX", "20000")
	st, err := in.State(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Holders != 1 || len(st.Owners) != 1 || st.Owners[0].Owner != "" || !st.Owners[0].Since.IsZero() {
		t.Errorf("State of a foreign hold over a stale record = %+v, want one unknown owner", st)
	}
	ended, err := fr.ForceRelease(ctx, name)
	if err != nil || len(ended) != 1 || ended[0].Owner != "" {
		t.Fatalf("ForceRelease of a foreign key = %+v, %v; want one unknown owner", ended, err)
	}
	if got := do(t, srv, "EXISTS", layout.Key(name)); got != "0" {
		t.Errorf("EXISTS %s after ForceRelease = %s, want 0", layout.Key(name), got)
	}
	if got := do(t, srv, "GET", layout.Aux(name, "fence")); got == "" {
		t.Errorf("fence key gone after ForceRelease, want it kept")
	}
	next := grant(t, s, store.Request{Name: name, Token: "tok-n", TTL: 20 * time.Second})
	if next.Fence <= g.Fence {
		t.Errorf("fence after ForceRelease = %d, want above %d", next.Fence, g.Fence)
	}
	s.Release(ctx, store.Request{Name: name, Token: "tok-n"})
}

// holdMinHoldKeys: a mutex released before its MinHold keeps its lock key
// (the token, nothing else) until grant + MinHold by the server's clock, so
// a foreign SET NX is refused meanwhile; a second Release answers nil and
// an Extend ErrNotHeld; ForceRelease ends it at once.
func holdMinHoldKeys(t *testing.T, srv *testredis.Server, s store.Store) {
	ctx := Context(t)
	_, fr := holdStores(t, s)
	name := "prototest-hold-min"
	req := store.Request{Name: name, Token: "tok-m", TTL: 2 * time.Second, MinHold: 30 * time.Second}
	grant(t, s, req)
	if err := s.Release(ctx, req); err != nil {
		t.Fatalf("Release before the min hold = %v, want nil", err)
	}
	if got := do(t, srv, "GET", layout.Key(name)); got != req.Token {
		t.Errorf("GET %s after an early Release = %q, want the token kept", layout.Key(name), got)
	}
	if ms := pttl(t, srv, layout.Key(name)); ms <= 20000 || ms > 30000 {
		t.Errorf("PTTL %s after an early Release = %d ms, want the min hold's end, in (20 000, 30 000]", layout.Key(name), ms)
	}
	if got := do(t, srv, "SET", layout.Key(name), "foreign", "NX", "PX", "10000"); got != "" {
		t.Errorf("a foreign SET NX during the min hold = %q, want refused", got)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Errorf("second Release = %v, want nil (idempotent)", err)
	}
	if errs := s.Extend(ctx, []store.Request{req}); !errors.Is(errs[0], store.ErrNotHeld) {
		t.Errorf("Extend after the Release = %v, want ErrNotHeld", errs[0])
	}
	if ended, err := fr.ForceRelease(ctx, name); err != nil || len(ended) != 1 {
		t.Fatalf("ForceRelease of a hold kept by its min hold = %+v, %v", ended, err)
	}
	if got := do(t, srv, "EXISTS", layout.Key(name), layout.Aux(name, "hold")); got != "0" {
		t.Errorf("EXISTS lock key and record after ForceRelease = %s, want 0", got)
	}
}

// holdMaxHoldKeys: every grant and extend of a hold with a MaxHold sets the
// lock key's expiry to at most the grant + MaxHold by the server's clock,
// whatever TTL is asked.
func holdMaxHoldKeys(t *testing.T, srv *testredis.Server, s store.Store) {
	ctx := Context(t)
	name := "prototest-hold-max"
	req := store.Request{Name: name, Token: "tok-x", TTL: time.Minute, MaxHold: 10 * time.Second}
	grant(t, s, req)
	defer s.Release(ctx, req)
	if ms := pttl(t, srv, layout.Key(name)); ms <= 0 || ms > 10000 {
		t.Errorf("PTTL after a grant of 1m with max hold 10s = %d ms, want at most 10 000", ms)
	}
	ext := req
	ext.MaxHold, ext.Holder = 0, "" // an extend carries no record: the store's record caps it
	if errs := s.Extend(ctx, []store.Request{ext}); errs[0] != nil {
		t.Fatalf("Extend = %v", errs[0])
	}
	if ms := pttl(t, srv, layout.Key(name)); ms <= 0 || ms > 10000 {
		t.Errorf("PTTL after an Extend of 1m with max hold 10s = %d ms, want at most 10 000", ms)
	}
	if got, _ := strconv.Atoi(do(t, srv, "PTTL", layout.Aux(name, "hold"))); got <= 0 || got > 10000 {
		t.Errorf("PTTL of the record = %d ms, want at most 10 000", got)
	}
}
