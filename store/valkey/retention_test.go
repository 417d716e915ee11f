package valkey_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// counterTTL returns the PTTL of lock name's fence key, in ms.
func counterTTL(t *testing.T, srv *testredis.Server, s *valkey.Store, name string) int {
	t.Helper()
	n, err := strconv.Atoi(mustDo(t, srv, "PTTL", s.AuxKey(name, "fence")))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// within reports whether got (a PTTL just read) is want or a little less.
func within(got, want int) bool { return got > want-5000 && got <= want }

// TestFenceRetention checks that every mode's grant keeps the name's fence
// key for the hold's TTL plus the retention: the default 61 s, a longer
// retention, and a hold longer than the retention.
func TestFenceRetention(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	def := dial(t, srv.URL(), valkey.WithPrefix("def:"))
	long := dial(t, srv.URL(), valkey.WithPrefix("long:"), valkey.WithFenceRetention(2*time.Minute))
	modes := []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeWrite, store.ModeFair, store.ModeSemaphore}
	for _, m := range modes {
		for _, tt := range []struct {
			s    *valkey.Store
			ttl  time.Duration
			want int
		}{
			{def, 10 * time.Second, 71_000},
			{long, 10 * time.Second, 130_000},
			{long, 3 * time.Minute, 300_000}, // the hold outlasts the retention
		} {
			name := m.String() + "-" + strconv.Itoa(int(tt.ttl/time.Second))
			req := store.Request{Name: name, Token: "a", TTL: tt.ttl, Mode: m, Limit: 2}
			if g, err := tt.s.Acquire(ctx, req); err != nil || !g.Acquired {
				t.Fatalf("%v: Acquire = %+v, %v", m, g, err)
			}
			if got := counterTTL(t, srv, tt.s, name); !within(got, tt.want) {
				t.Errorf("%v, TTL %v: fence key PTTL = %d ms, want about %d", m, tt.ttl, got, tt.want)
			}
		}
	}
}

// TestFenceRetentionMutexPaths covers the mutex's other writers of the
// fence key: a handoff to a registered waiter (the waiter's TTL), an
// extension, and a fence write-back.
func TestFenceRetentionMutexPaths(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	s := dial(t, srv.URL(), valkey.WithFenceRetention(2*time.Minute))

	hold := store.Request{Name: "m", Token: "holder", TTL: 10 * time.Second}
	if g, err := s.Acquire(ctx, hold); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	w := store.Request{Name: "m", Token: "waiter", TTL: 100 * time.Second, Queue: true, QueueTTL: time.Minute}
	grants, stop, err := s.WatchGrant(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if g, err := s.Acquire(ctx, w); err != nil || g.Acquired {
		t.Fatalf("Acquire(waiter) = %+v, %v; want refused", g, err)
	}
	mustDo(t, srv, "DEL", s.AuxKey("m", "fence")) // as if it expired
	if err := s.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-grants:
		if !g.Acquired {
			t.Fatalf("handoff = %+v", g)
		}
	case <-ctx.Done():
		t.Fatal("no handoff")
	}
	if got := counterTTL(t, srv, s, "m"); !within(got, 220_000) {
		t.Errorf("fence key PTTL after a handoff of a 100 s hold = %d ms, want about 220 000", got)
	}

	// An extension tops the key up to the new TTL plus the retention.
	mustDo(t, srv, "PEXPIRE", s.AuxKey("m", "fence"), "30000")
	w.TTL = 30 * time.Second
	if errs := s.Extend(ctx, []store.Request{w}); errs[0] != nil {
		t.Fatalf("Extend = %v", errs[0])
	}
	if got := counterTTL(t, srv, s, "m"); !within(got, 150_000) {
		t.Errorf("fence key PTTL after an extension = %d ms, want about 150 000", got)
	}

	// A write-back keeps the key for the hold's remaining TTL plus the
	// retention at least, and raises the slot's mark.
	fence, _ := strconv.ParseInt(mustDo(t, srv, "GET", s.AuxKey("m", "fence")), 10, 64)
	mustDo(t, srv, "PEXPIRE", s.AuxKey("m", "fence"), "30000")
	if err := s.RaiseFence(ctx, w, fence+10); err != nil {
		t.Fatalf("RaiseFence = %v", err)
	}
	if got := counterTTL(t, srv, s, "m"); !within(got, 150_000) {
		t.Errorf("fence key PTTL after a write-back = %d ms, want about 150 000", got)
	}
	if got := mustDo(t, srv, "ZSCORE", s.MarkKey("m"), "m"); got != strconv.FormatInt(fence+10, 10) {
		t.Errorf("slot mark after a write-back of %d = %s", fence+10, got)
	}
}

// TestFenceKeyFollowsTheHold checks that a grant on a name whose fence key
// exists renews the key's expiry to the new hold's TTL plus the retention,
// in every mode: the key lives beside the holds, not from its creation.
func TestFenceKeyFollowsTheHold(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	s := dial(t, srv.URL(), valkey.WithFenceRetention(2*time.Minute))
	modes := []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeWrite, store.ModeFair, store.ModeSemaphore}
	for _, m := range modes {
		name := "follows-" + m.String()
		var last int64
		for i := range 2 {
			req := store.Request{Name: name, Token: "t" + strconv.Itoa(i), TTL: 10 * time.Second, Mode: m, Limit: 1}
			g, err := s.Acquire(ctx, req)
			if err != nil || !g.Acquired || g.Fence <= last {
				t.Fatalf("%v: grant %d = %+v, %v; want a fence above %d", m, i, g, err, last)
			}
			last = g.Fence
			if i == 0 {
				mustDo(t, srv, "PEXPIRE", s.AuxKey(name, "fence"), "5000")
			}
			if err := s.Release(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		if got := counterTTL(t, srv, s, name); !within(got, 130_000) {
			t.Errorf("%v: fence key PTTL after a second grant = %d ms, want the TTL plus the retention (about 130 000)", m, got)
		}
	}
}

// TestFenceRetentionExpiredCounter checks that fences keep rising after a
// name's fence key expired, without waiting for the clock: the next grant
// is above the slot's fence mark.
func TestFenceRetentionExpiredCounter(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	s := dial(t, srv.URL(), valkey.WithFenceRetention(time.Second))
	var last int64
	for i := range 100 { // many within one millisecond of the one before
		req := store.Request{Name: "x", Token: "t" + strconv.Itoa(i), TTL: time.Second}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired || g.Fence <= last {
			t.Fatalf("grant %d = %+v, %v; want a fence above %d", i, g, err, last)
		}
		last = g.Fence
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
		mustDo(t, srv, "DEL", s.AuxKey("x", "fence")) // as if it expired
	}
}

func TestFenceRetentionValidated(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, 999 * time.Millisecond} {
		if _, err := valkey.Dial(prototest.Context(t), "redis://127.0.0.1:1", valkey.WithFenceRetention(d)); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("WithFenceRetention(%v) = %v, want ErrInvalid", d, err)
		}
	}
}

// TestFenceKeyNeverShortened: a grant or a repeat only ever raises the
// name's fence key's expiry. On 636d7c8 a 200 ms semaphore permit cut the
// key of a 1 h permit beside it to 1.2 s (and State then reported Fence 0
// while the hour's permit was held), and the fair and semaphore repeats,
// whose TTL may be longer than the grant's, did not keep the key at all.
func TestFenceKeyNeverShortened(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	s := dial(t, srv.URL(), valkey.WithFenceRetention(time.Second))
	long := store.Request{Name: "permits", Token: "hour", TTL: time.Hour, Mode: store.ModeSemaphore, Limit: 2}
	short := store.Request{Name: "permits", Token: "brief", TTL: 200 * time.Millisecond, Mode: store.ModeSemaphore, Limit: 2}
	for _, req := range []store.Request{long, short} {
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v", req.Token, g, err)
		}
	}
	if got := counterTTL(t, srv, s, "permits"); got < 3_600_000 {
		t.Errorf("fence key PTTL after a 200 ms permit beside a 1 h one = %d ms, want at least the hour", got)
	}

	for _, m := range []store.Mode{store.ModeFair, store.ModeSemaphore, store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeWrite, store.ModeElection} {
		name := "repeat-" + m.String()
		req := store.Request{Name: name, Token: "t", TTL: time.Second, Mode: m, Limit: 1}
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("%v: Acquire = %+v, %v", m, g, err)
		}
		req.TTL = time.Hour // the holder's repeat with a longer TTL
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("%v: repeated Acquire = %+v, %v", m, g, err)
		}
		if got := counterTTL(t, srv, s, name); got < 3_600_000 {
			t.Errorf("%v: fence key PTTL after the holder's repeat for an hour = %d ms, want at least the hour", m, got)
		}
	}
}
