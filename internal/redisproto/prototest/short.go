package prototest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// evalshaKeyCounts returns the number of keys of each EVALSHA or FCALL srv
// ran since the last call, oldest first, from a SLOWLOG that logs every
// command, and resets the log. [testredis.Server.Do] renders the nested
// reply as lines: an EVALSHA entry's arguments are "evalsha", the SHA and
// the key count; an FCALL's "fcall", the function and the key count.
func evalshaKeyCounts(t *testing.T, srv *testredis.Server) []string {
	t.Helper()
	lines := strings.Split(do(t, srv, "SLOWLOG", "GET", "-1"), "\n")
	do(t, srv, "SLOWLOG", "RESET")
	var out []string
	for i := len(lines) - 3; i >= 0; i-- {
		if strings.EqualFold(lines[i], "evalsha") || strings.EqualFold(lines[i], "fcall") {
			out = append(out, lines[i+2])
		}
	}
	return out
}

// mutexShortRelease: an acquire that does not queue sends the lock key
// and the fence counter alone, and a release on a name without known
// waiters the lock key and the waiters flag alone (each key costs the server
// time). A short release that finds waiters (registered through another
// Store) changes nothing and the full form hands the lock over; the Store
// then sends the full form for that name at once, as it does for a name on
// which it was refused.
func mutexShortRelease(t *testing.T, srv *testredis.Server, open func(*testing.T) store.Store) {
	a, b := open(t), open(t)
	ctx := Context(t)
	do(t, srv, "CONFIG", "SET", "slowlog-log-slower-than", "0")
	do(t, srv, "CONFIG", "SET", "slowlog-max-len", "1000")
	t.Cleanup(func() { do(t, srv, "CONFIG", "SET", "slowlog-log-slower-than", "10000") })
	hold := store.Request{Name: "short", Token: "holder", TTL: time.Minute}
	cycle := func() {
		t.Helper()
		if g, err := a.Acquire(ctx, hold); err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v", g, err)
		}
		if err := a.Release(ctx, hold); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // loads the scripts
	evalshaKeyCounts(t, srv)
	cycle()
	if got := evalshaKeyCounts(t, srv); !slices.Equal(got, []string{"3", "2"}) {
		t.Errorf("uncontended acquire+release sent %v keys, want [3 2]", got)
	}

	if g, err := a.Acquire(ctx, hold); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	w := store.Request{Name: "short", Token: "waiter", TTL: time.Minute, Queue: true, QueueTTL: time.Minute}
	gw, ok := b.(store.GrantWatcher)
	if !ok {
		t.Fatalf("%T is not a store.GrantWatcher", b)
	}
	grants, stop, err := gw.WatchGrant(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if g, err := b.Acquire(ctx, w); err != nil || g.Acquired {
		t.Fatalf("Acquire(waiter) = %+v, %v; want refused", g, err)
	}
	evalshaKeyCounts(t, srv)
	if err := a.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	if got := evalshaKeyCounts(t, srv); !slices.Equal(got, []string{"2", "7"}) {
		t.Errorf("release with a waiter of another Store sent %v keys, want [2 7] (short, then full)", got)
	}
	if g := <-grants; !g.Acquired {
		t.Fatalf("pushed grant = %+v", g)
	}
	if got := do(t, srv, "GET", "lock:short"); got != "waiter" {
		t.Fatalf("GET lock:short = %q, want waiter", got)
	}
	if err := b.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	evalshaKeyCounts(t, srv)
	cycle()
	if got := evalshaKeyCounts(t, srv); !slices.Equal(got, []string{"3", "7"}) {
		t.Errorf("a release on a name that had waiters sent %v keys, want [3 7] (the full form at once)", got)
	}
	// A Store refused on a name sends the full form for it.
	if err := a.Release(ctx, hold); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
	evalshaKeyCounts(t, srv)
	hold2 := store.Request{Name: "short2", Token: "x", TTL: time.Minute}
	if g, err := a.Acquire(ctx, hold2); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	other := store.Request{Name: "short2", Token: "y", TTL: time.Minute}
	if g, err := b.Acquire(ctx, other); err != nil || g.Acquired {
		t.Fatalf("Acquire(other) = %+v, %v; want refused", g, err)
	}
	if err := a.Release(ctx, hold2); err != nil {
		t.Fatal(err)
	}
	if g, err := b.Acquire(ctx, other); err != nil || !g.Acquired {
		t.Fatalf("Acquire(other) = %+v, %v", g, err)
	}
	evalshaKeyCounts(t, srv)
	if err := b.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
	if got := evalshaKeyCounts(t, srv); !slices.Equal(got, []string{"7"}) {
		t.Errorf("release by a Store refused on the name sent %v keys, want [7]", got)
	}
}
