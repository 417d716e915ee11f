package valkey_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// oldScripts are the scripts of the version before 2026-11 (commit 1af8b53),
// which kept a fence counter per name for a day and no fence mark: the
// mutex's acquire and release, and the write side of the read-write lock (a
// pattern's fence from clock_lib). They run beside the Store to stand for
// the clients of a fleet that has not upgraded yet.
type oldScripts struct {
	mutexAcquire, mutexRelease, writeAcquire, rwRelease string
}

func loadOldScripts(t *testing.T) oldScripts {
	t.Helper()
	read := func(names ...string) string {
		var b strings.Builder
		for i, n := range names {
			src, err := os.ReadFile("testdata/v2026-10/" + n)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				b.WriteString("\n")
			}
			b.Write(src)
		}
		return b.String()
	}
	return oldScripts{
		mutexAcquire: read("mutex_acquire.lua"),
		mutexRelease: read("mutex_release.lua"),
		writeAcquire: read("clock_lib.lua", "name_lib.lua", "rw_lib.lua", "rw_write_acquire.lua"),
		rwRelease:    read("clock_lib.lua", "name_lib.lua", "rw_lib.lua", "rw_release.lua"),
	}
}

// eval runs src by EVAL on srv with keys and args.
func eval(t *testing.T, srv *testredis.Server, src string, keys []string, args ...string) string {
	t.Helper()
	cmd := append([]string{"EVAL", src, strconv.Itoa(len(keys))}, keys...)
	return mustDo(t, srv, append(cmd, args...)...)
}

// oldClient runs the old scripts on srv with the keys the old version
// used for a Store s of the same prefix: the same main and fence keys.
type oldClient struct {
	t   *testing.T
	srv *testredis.Server
	s   *valkey.Store
	old oldScripts
}

// acquire takes name with token as the old version did, seen picking its
// path ("1": INCR the counter; "0": SET GET from the clock floor), and
// returns the fence.
func (c oldClient) acquire(mode store.Mode, name, token, seen string) int64 {
	c.t.Helper()
	var r string
	if mode == store.ModeMutex {
		r = eval(c.t, c.srv, c.old.mutexAcquire, []string{"lock:" + name, c.s.AuxKey(name, "fence")}, token, "10000", "86400000", seen)
	} else {
		r = eval(c.t, c.srv, c.old.writeAcquire, c.rwKeys(name), token, "10000", token, "0", "0", "0", "86400000")
		r = strings.Fields(r)[1]
	}
	f, err := strconv.ParseInt(r, 10, 64)
	if err != nil || f <= 0 {
		c.t.Fatalf("old %v acquire of %s = %q, want a fence", mode, name, r)
	}
	return f
}

func (c oldClient) rwKeys(name string) []string {
	return append(c.s.KeySet(false, name, "rw", "fence", "rw:meta", "rw:intents", "rw:deadlines", "rw:gate"), "lock:"+name)
}

func (c oldClient) release(mode store.Mode, name, token string) {
	c.t.Helper()
	var r string
	if mode == store.ModeMutex {
		r = eval(c.t, c.srv, c.old.mutexRelease, []string{"lock:" + name, c.s.AuxKey(name, "waiters:flag")}, token)
	} else {
		r = eval(c.t, c.srv, c.old.rwRelease, c.rwKeys(name), token, "10000", token, "0", "0", "0", "86400000")
	}
	if r != "1" {
		c.t.Fatalf("old %v release of %s = %q, want 1", mode, name, r)
	}
}

// TestFencesRiseAcrossAnUpgrade runs the old version's scripts beside this
// version's on the same names, as a fleet does during a rolling upgrade,
// and checks that the fences of every name rise strictly: while the name's
// fence key lives (grants alternating between the versions, within the same
// milliseconds, both of the old version's paths), and once it expired
// after a grant of either version. A fence from a mark alone, without the
// fence key beside the hold, fails the first part: the old version's next
// grant would INCR a counter below the mark's fences, or start one at the
// clock floor of the same millisecond.
func TestFencesRiseAcrossAnUpgrade(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	s := dial(t, srv.URL(), valkey.WithFenceRetention(time.Second))
	old := oldClient{t, srv, s, loadOldScripts(t)}
	last := map[string]int64{}
	check := func(name, who string, f int64) {
		t.Helper()
		if f <= last[name] {
			t.Fatalf("%s: %s grant's fence %d after %d; want strictly increasing", name, who, f, last[name])
		}
		last[name] = f
	}
	newGrant := func(mode store.Mode, name, token string) {
		t.Helper()
		req := store.Request{Name: name, Token: token, TTL: 10 * time.Second, Mode: mode}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v", name, g, err)
		}
		check(name, "new", g.Fence)
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	oldGrant := func(mode store.Mode, name, token, seen string) {
		t.Helper()
		check(name, "old", old.acquire(mode, name, token, seen))
		old.release(mode, name, token)
	}
	modes := map[string]store.Mode{"m1": store.ModeMutex, "m2": store.ModeMutex, "{t}m3": store.ModeMutex, "{t}m4": store.ModeMutex, "w1": store.ModeWrite}
	for i := range 300 {
		for name, mode := range modes {
			tok := "t" + strconv.Itoa(i)
			switch (i + len(name)) % 4 {
			case 0, 2:
				newGrant(mode, name, tok)
			case 1:
				oldGrant(mode, name, tok, "1")
			case 3:
				oldGrant(mode, name, tok, "0")
			}
		}
	}
	// The fence key expires the retention after a new grant's TTL: wait
	// for it, then the old version issues from the clock floor.
	gone := func(name string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for mustDo(t, srv, "EXISTS", s.AuxKey(name, "fence")) != "0" {
			if time.Now().After(deadline) {
				t.Fatalf("fence key of %s still there after 30 s", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A key the old version created lives a day, and this version never
	// shortens a fence key's expiry: let those days have passed.
	for name := range modes {
		mustDo(t, srv, "DEL", s.AuxKey(name, "fence"))
	}
	for round := range 2 {
		for name, mode := range modes {
			req := store.Request{Name: name, Token: "short" + strconv.Itoa(round), TTL: 100 * time.Millisecond, Mode: mode}
			g, err := s.Acquire(ctx, req)
			if err != nil || !g.Acquired {
				t.Fatalf("Acquire(%s) = %+v, %v", name, g, err)
			}
			check(name, "new", g.Fence)
			if err := s.Release(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		for name, mode := range modes {
			gone(name)
			oldGrant(mode, name, "after-new"+strconv.Itoa(round), strconv.Itoa(round))
		}
		// The old version keeps its counter a day; one it created and
		// that expired (here deleted, a retention after its last write)
		// leaves the new version the mark and the clock floor.
		time.Sleep(1100 * time.Millisecond)
		for name, mode := range modes {
			mustDo(t, srv, "DEL", s.AuxKey(name, "fence"))
			newGrant(mode, name, "after-old"+strconv.Itoa(round))
		}
	}
}

// TestNothingOutlivesAHold acquires and releases (or lets expire) many
// distinct names in every pattern but the fair lock (whose audit stream is
// kept a day by design) and checks that, once the holds' TTLs and the fence
// retention have passed, the server holds the fence marks of the hash slots
// the names fell in and nothing else: no key per name. The version before
// 2026-11 left a fence counter per name for a day.
func TestNothingOutlivesAHold(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	s := dial(t, srv.URL(), valkey.WithFenceRetention(time.Second))
	modes := []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeWrite, store.ModeSemaphore, store.ModeElection}
	const n = 3000
	marks := map[string]bool{}
	for i := range n {
		name := "distinct-" + strconv.Itoa(i)
		req := store.Request{Name: name, Token: "t", TTL: 500 * time.Millisecond, Mode: modes[i%len(modes)], Limit: 2, Value: "v"}
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("Acquire(%s, %v) = %+v, %v", name, req.Mode, g, err)
		}
		// Half the mutex, reentrant and election holds are left to
		// expire; a read-write lock's and a semaphore's holder set
		// outlives an expired hold by a minute, so those are released.
		if expires := req.Mode == store.ModeMutex || req.Mode == store.ModeReentrant || req.Mode == store.ModeElection; !expires || i%2 == 0 {
			if err := s.Release(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		marks[s.MarkKey(name)] = true
	}
	deadline := time.Now().Add(30 * time.Second)
	for dbsize(t, srv) > len(marks) {
		if time.Now().After(deadline) {
			t.Fatalf("DBSIZE = %d 30 s after %d names were released or expired, want %d (the slots' marks); some keys: %q", dbsize(t, srv), n, len(marks),
				strings.Fields(mustDo(t, srv, "SCAN", "0", "MATCH", "{lock:distinct*", "COUNT", "100000")))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cursor := "0"
	for {
		r := strings.Fields(mustDo(t, srv, "SCAN", cursor, "COUNT", "1000"))
		cursor = r[0]
		for _, k := range r[1:] {
			if !marks[k] {
				t.Errorf("key %q left after every hold ended", k)
			}
		}
		if cursor == "0" {
			break
		}
	}
	if got := dbsize(t, srv); got != len(marks) {
		t.Errorf("DBSIZE = %d, want %d marks", got, len(marks))
	}
}

func dbsize(t *testing.T, srv *testredis.Server) int {
	t.Helper()
	n, err := strconv.Atoi(mustDo(t, srv, "DBSIZE"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFencesRiseAcrossARestartAfterABurst: grants in one hash slot faster
// than one per millisecond run the slot's mark ahead of the clock floor;
// a node restarted without persistence loses the marks and the fence
// keys, and its next fences, from the clock floor, are still above every
// fence issued before (a restart takes longer than the lead).
func TestFencesRiseAcrossARestartAfterABurst(t *testing.T) {
	srv := testredis.Start(t)
	ctx := prototest.Context(t)
	s := dial(t, srv.URL())
	var high int64
	for i := range 500 {
		req := store.Request{Name: "{burst}" + strconv.Itoa(i%50), Token: "t" + strconv.Itoa(i), TTL: 10 * time.Second}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v", g, err)
		}
		high = max(high, g.Fence)
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	srv.Restart(t)
	if got := dbsize(t, srv); got != 0 {
		t.Fatalf("DBSIZE after a restart without persistence = %d, want 0", got)
	}
	for i := range 50 {
		req := store.Request{Name: "{burst}" + strconv.Itoa(i), Token: "after", TTL: 10 * time.Second}
		g, err := acquireRetrying(ctx, s, req)
		if err != nil || !g.Acquired || g.Fence <= high {
			t.Fatalf("Acquire after the restart = %+v, %v; want a fence above %d", g, err, high)
		}
		high = g.Fence
	}
}

// acquireRetrying retries an acquire that fails while the Store reconnects.
func acquireRetrying(ctx context.Context, s *valkey.Store, req store.Request) (store.Grant, error) {
	for {
		g, err := s.Acquire(ctx, req)
		if err == nil || ctx.Err() != nil {
			return g, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFenceMarkPerClusterSlot runs names of one slot and names of many
// slots on a Redis Cluster of three masters: each name's fences rise across
// the loss of its fence key within the same millisecond (from its slot's
// mark), every script stays in one slot, and after the holds end and the
// retention passes the cluster holds one mark per slot used and nothing
// else.
func TestFenceMarkPerClusterSlot(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	ctx := prototest.Context(t)
	s := dial(t, "redis://"+strings.Join(c.Addrs(), ","), valkey.WithFenceRetention(time.Second))
	names := []string{"{slot}a", "{slot}b", "{slot}c", "x", "y", "z", "{user:1}:job"}
	last := map[string]int64{}
	marks := map[string]bool{}
	for _, name := range names {
		for i := range 40 { // in quick succession: within a millisecond of the one before
			req := store.Request{Name: name, Token: "t" + strconv.Itoa(i), TTL: 200 * time.Millisecond}
			g, err := s.Acquire(ctx, req)
			if err != nil || !g.Acquired || g.Fence <= last[name] {
				t.Fatalf("Acquire(%s) #%d = %+v, %v; want a fence above %d", name, i, g, err, last[name])
			}
			last[name] = g.Fence
			if err := s.Release(ctx, req); err != nil {
				t.Fatal(err)
			}
			// As if the key expired: the next grant has the mark alone.
			if err := nodeDo(c, s.AuxKey(name, "fence"), "DEL", s.AuxKey(name, "fence")); err != nil {
				t.Fatal(err)
			}
			marks[s.MarkKey(name)] = true
		}
	}
	if len(marks) != 5 {
		t.Errorf("%d marks for names in 5 slots: %v", len(marks), marks)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		total := 0
		for _, n := range c.Nodes() {
			total += dbsize(t, n)
		}
		if total == len(marks) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys on the cluster after every hold ended, want %d marks", total, len(marks))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for m := range marks {
		found := false
		for _, n := range c.Nodes() {
			if v, err := n.Do("EXISTS", m); err == nil && v == "1" {
				found = true
			}
		}
		if !found {
			t.Errorf("mark %q on no master", m)
		}
	}
}

// nodeDo runs a command on the master that serves key.
func nodeDo(c *testredis.Cluster, key string, args ...string) error {
	var err error
	for _, n := range c.Nodes() {
		if _, err = n.Do(args...); err == nil {
			return nil
		}
	}
	return err
}
