package valkey_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// TestMutexFastPathCommands pins the cost of an uncontended mutex on the
// server. Every grant takes the clock floor (issue 35: a fence key that came
// back stale from a snapshot or a lagging replica must not be continued),
// and the fence key's expiry only rises, so the acquire script makes six
// calls on a name whose fence key is still there (SET NX GET; TIME; SET NX
// GET of the fence key, which finds it; SET KEEPTTL and PEXPIRE GT of the
// fence key; ZADD GT CH of the slot's fence mark), and four on a name
// without it (SET NX GET; TIME; SET NX GET, which creates the fence key at
// the clock floor; ZADD GT CH, which says the mark stood below it). Until
// issue 41 a name without it cost six (GET and ZSCORE read first). The
// release makes two (MGET, DEL). Both scripts go by FCALL, as functions
// (issue 41; until then by EVALSHA).
func TestMutexFastPathCommands(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	req := store.Request{Name: "warm", Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex}
	// Load the scripts first: a missing function costs a FUNCTION LOAD.
	if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name        string
		dropCounter bool
		want        map[string]int64
	}{
		{"warm", false, map[string]int64{"fcall": 2, "set": 3, "time": 1, "pexpire": 1, "zadd": 1, "mget": 1, "del": 1}},
		{"fresh", false, map[string]int64{"fcall": 2, "set": 2, "time": 1, "zadd": 1, "mget": 1, "del": 1}},
		{"warm", true, map[string]int64{"fcall": 2, "set": 2, "time": 1, "zadd": 1, "mget": 1, "del": 1}},
	} {
		if tt.dropCounter {
			mustDo(t, srv, "DEL", s.AuxKey(tt.name, "fence"))
		}
		mustDo(t, srv, "CONFIG", "RESETSTAT")
		req.Name = tt.name
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v", g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
		calls := prototest.CallsByCommand(t, srv)
		for cmd, n := range tt.want {
			if calls[cmd] != n {
				t.Errorf("%s: %s: %d calls, want %d", tt.name, cmd, calls[cmd], n)
			}
		}
		for _, cmd := range []string{"get", "incr", "time", "zpopmin", "zrem", "pexpire", "pttl", "eval", "evalsha", "function|load"} {
			if _, ok := tt.want[cmd]; !ok && calls[cmd] != 0 {
				t.Errorf("%s: %s: %d calls, want none on the fast path", tt.name, cmd, calls[cmd])
			}
		}
		if t.Failed() {
			t.Logf("%s: commandstats: %v", tt.name, calls)
		}
	}
}

// TestMutexFenceSameMillisecond checks the fence when the counter is at or
// above the time floor: grants faster than one per millisecond, and a
// counter set far ahead (as a write-back from a node whose clock is ahead
// sets it), each get last + 1.
func TestMutexFenceSameMillisecond(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	req := store.Request{Name: "fast", Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex}
	var last int64
	for i := range 300 {
		req.Token = "t" + strconv.Itoa(i)
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire %d = %+v, %v", i, g, err)
		}
		if g.Fence <= last {
			t.Fatalf("grant %d: fence %d after %d, want strictly more", i, g.Fence, last)
		}
		last = g.Fence
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	high := last + 5_000_000_000
	mustDo(t, srv, "SET", s.AuxKey("fast", "fence"), strconv.FormatInt(high, 10), "PX", "86400000")
	g, err := s.Acquire(ctx, req)
	if err != nil || g.Fence != high+1 {
		t.Fatalf("Acquire after the counter was set to %d = %+v, %v; want fence %d", high, g, err, high+1)
	}
	if got := mustDo(t, srv, "GET", s.AuxKey("fast", "fence")); got != strconv.FormatInt(high+1, 10) {
		t.Errorf("counter = %s, want %d", got, high+1)
	}
	if ttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", s.AuxKey("fast", "fence"))); ttl <= 0 {
		t.Errorf("counter PTTL = %d, want the hold's TTL plus the retention", ttl)
	}
	// A repeat by the holder returns the same fence.
	if g2, err := s.Acquire(ctx, req); err != nil || g2.Fence != g.Fence {
		t.Errorf("repeated Acquire = %+v, %v; want fence %d", g2, err, g.Fence)
	}
}

// TestMutexFenceCounterWrongType checks that an acquire whose fence counter
// cannot be read fails without leaving the lock key set.
func TestMutexFenceCounterWrongType(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	mustDo(t, srv, "RPUSH", s.AuxKey("bad", "fence"), "x")
	req := store.Request{Name: "bad", Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex}
	if g, err := s.Acquire(ctx, req); err == nil {
		t.Fatalf("Acquire with a list as fence counter = %+v, want an error", g)
	}
	if n := mustDo(t, srv, "EXISTS", "lock:bad"); n != "0" {
		t.Errorf("lock key exists after the failed acquire")
	}
}

// TestMutexWaitersFlag checks the flag that lets a release skip the
// waiters set: a registration sets it with an expiry past the set's, a
// release by a registered waiter drops its registration, and the release
// that finds no waiter left deletes the flag.
func TestMutexWaitersFlag(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	flag, wkey := s.AuxKey("flag", "waiters:flag"), s.AuxKey("flag", "waiters")
	hold := store.Request{Name: "flag", Token: "holder", TTL: time.Minute}
	if g, err := s.Acquire(ctx, hold); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	if n := mustDo(t, srv, "EXISTS", flag); n != "0" {
		t.Fatalf("flag set by an uncontended acquire")
	}
	w := store.Request{Name: "flag", Token: "waiter", TTL: 30 * time.Second, Queue: true, QueueTTL: time.Minute}
	_, stop, err := s.WatchGrant(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if g, err := s.Acquire(ctx, w); err != nil || g.Acquired {
		t.Fatalf("Acquire(waiter) = %+v, %v; want refused", g, err)
	}
	fttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", flag))
	wttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", wkey))
	if wttl <= 0 || fttl <= wttl {
		t.Fatalf("PTTL flag %d, waiters %d; want the flag to outlive the set", fttl, wttl)
	}
	// A registered waiter gives up: its registration goes, the flag stays
	// (a later release finds the set empty).
	if err := s.Release(ctx, w); err != nil {
		t.Fatalf("Release by the registered waiter = %v", err)
	}
	if n := mustDo(t, srv, "EXISTS", wkey); n != "0" {
		t.Fatalf("registration kept after the waiter's Release")
	}
	if err := s.Release(ctx, w); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("second Release by the waiter = %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, hold); err != nil {
		t.Fatal(err)
	}
	if n := mustDo(t, srv, "EXISTS", flag, "lock:flag"); n != "0" {
		t.Errorf("flag or lock key left after the release that found no waiter (EXISTS = %s)", n)
	}
}

// TestFairQueueExpiryToppedUpRarely checks that a fair-lock waiter's
// repeated attempts do not rewrite the queue keys' expiry every time: the
// first registration sets it (queue TTL plus a minute), and later ones
// leave it until it falls below queue TTL plus half a minute.
func TestFairQueueExpiryToppedUpRarely(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	hold := store.Request{Name: "fq", Token: "holder", TTL: time.Minute, Mode: store.ModeFair}
	if g, err := s.Acquire(ctx, hold); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	w := store.Request{Name: "fq", Token: "waiter", TTL: 30 * time.Second, Mode: store.ModeFair, Queue: true, QueueTTL: 10 * time.Second}
	if g, err := s.Acquire(ctx, w); err != nil || g.Acquired {
		t.Fatalf("Acquire(waiter) = %+v, %v; want refused", g, err)
	}
	qkey := s.AuxKey("fq", "fair:queue")
	if ttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", qkey)); ttl <= 60_000 || ttl > 70_000 {
		t.Fatalf("queue PTTL after the first registration = %d ms, want about 70 000", ttl)
	}
	mustDo(t, srv, "CONFIG", "RESETSTAT")
	for range 3 {
		if g, err := s.Acquire(ctx, w); err != nil || g.Acquired {
			t.Fatalf("Acquire(waiter) again = %+v, %v; want refused", g, err)
		}
	}
	if n := prototest.CallsByCommand(t, srv)["pexpire"]; n != 0 {
		t.Errorf("%d PEXPIRE calls for 3 refreshes within seconds of the first, want none", n)
	}
	// Below queue TTL plus half a minute, a refresh tops it up.
	mustDo(t, srv, "PEXPIRE", qkey, "35000")
	if g, err := s.Acquire(ctx, w); err != nil || g.Acquired {
		t.Fatalf("Acquire(waiter) again = %+v, %v; want refused", g, err)
	}
	if ttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", qkey)); ttl <= 60_000 {
		t.Errorf("queue PTTL after a refresh at 35 s = %d ms, want it topped up to about 70 000", ttl)
	}
}

// TestMutexFenceMatchesCounter checks, over many new names (the clock
// path), that the fence key holds exactly the fence the grant returned, and
// that the slot's fence mark is at least that fence.
func TestMutexFenceMatchesCounter(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	for i := range 2000 {
		name := "m" + strconv.Itoa(i)
		req := store.Request{Name: name, Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire %s = %+v, %v", name, g, err)
		}
		if got := mustDo(t, srv, "GET", s.AuxKey(name, "fence")); got != strconv.FormatInt(g.Fence, 10) {
			t.Fatalf("%s: fence %d, fence key %q; want equal", name, g.Fence, got)
		}
		if m, _ := strconv.ParseInt(mustDo(t, srv, "ZSCORE", s.MarkKey(name), "m"), 10, 64); m < g.Fence {
			t.Fatalf("%s: fence %d, slot mark %d; want the mark at least the fence", name, g.Fence, m)
		}
	}
}

// TestMutexProposedFloor checks the fence floor store/redlock proposes
// (store.WithFenceFloor): a name without a counter takes it when it is
// above the node's clock floor by at most 100 ms, and the node's own floor
// otherwise; a name whose counter exists issues last + 1 whatever is
// proposed.
func TestMutexProposedFloor(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	now, _, _ := strings.Cut(mustDo(t, srv, "TIME"), "\n")
	sec, err := strconv.ParseInt(now, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	floor := sec * 1_000_000 // at or below the node's floor for the next seconds
	acquire := func(name string, proposed int64) int64 {
		t.Helper()
		req := store.Request{Name: name, Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex}
		g, err := s.Acquire(redisproto.WithFenceFloor(ctx, proposed), req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v", name, g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
		return g.Fence
	}
	// Whole seconds ahead of the floor read above: more than 100 ms ahead of
	// the node's clock unless the test took seconds to get here.
	if f := acquire("far", floor+30_000_000); f >= floor+30_000_000 || f < floor {
		t.Errorf("fence with a floor proposed 30 s ahead = %d, want the node's own, in [%d, %d)", f, floor, floor+30_000_000)
	}
	if f := acquire("below", 1); f < floor {
		t.Errorf("fence with a floor proposed at 1 = %d, want the node's own, at least %d", f, floor)
	}
	// Just ahead of the node's clock floor: taken as is. 90 ms ahead of a
	// probe's fence stays ahead unless 90 ms pass between the two calls (a
	// loaded machine): then try again on another name.
	var near int64
	var name string
	for i := range 5 {
		name = "near" + strconv.Itoa(i)
		near = acquire("probe"+strconv.Itoa(i), 0) + 90_000
		if f := acquire(name, near); f == near {
			break
		} else if i == 4 {
			t.Fatalf("fence with a floor proposed 90 ms ahead = %d, want %d (5 tries)", f, near)
		}
	}
	if got := mustDo(t, srv, "GET", s.AuxKey(name, "fence")); got != strconv.FormatInt(near, 10) {
		t.Errorf("counter = %s, want %d", got, near)
	}
	// The name is known now: INCR, whatever is proposed.
	if f := acquire(name, near+80_000); f != near+1 {
		t.Errorf("fence of a known name with a floor proposed = %d, want %d", f, near+1)
	}
}

// TestMutexFenceFromAMarkAhead: a fresh name whose slot's mark stands above
// the clock floor (fences of the slot issued from a clock since stepped
// back, or written back from a node whose clock is ahead) is issued the
// mark + 1, in every pattern, and the fence key and the mark hold it.
func TestMutexFenceFromAMarkAhead(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	for i, m := range []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeWrite, store.ModeFair, store.ModeSemaphore, store.ModeElection} {
		name := "{ahead}" + m.String()
		ahead := int64(9_000_000_000_000_000) + int64(i)*1000
		mustDo(t, srv, "ZADD", s.MarkKey(name), strconv.FormatInt(ahead, 10), "m")
		req := store.Request{Name: name, Token: "t", TTL: 10 * time.Second, Mode: m, Limit: 1}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired || g.Fence != ahead+1 {
			t.Fatalf("%v: Acquire with the mark at %d = %+v, %v; want fence %d", m, ahead, g, err, ahead+1)
		}
		if got := mustDo(t, srv, "GET", s.AuxKey(name, "fence")); got != strconv.FormatInt(ahead+1, 10) {
			t.Errorf("%v: fence key = %s, want %d", m, got, ahead+1)
		}
		if got := mustDo(t, srv, "ZSCORE", s.MarkKey(name), "m"); got != strconv.FormatInt(ahead+1, 10) {
			t.Errorf("%v: mark = %s, want %d", m, got, ahead+1)
		}
		if ttl := pttl(t, srv, s.AuxKey(name, "fence")); ttl <= 0 {
			t.Errorf("%v: fence key PTTL = %d, want the hold's TTL plus the retention", m, ttl)
		}
	}
}

// TestBrokenFenceStateFailsTheGrant: a fence key that holds no integer or
// is of another type, or a slot mark of another type (written by hand, or
// by another program under dlock's prefix), fails a mutex acquire with an
// error that says so, on the fast path and with a record, and leaves no
// hold: the lock key the script's first call set is deleted, the broken
// key left as it was. (issue in clock_lib.lua returns the error, and
// mutex_acquire.lua undoes its grant; until 2026-12 a pcall around issue
// did.)
func TestBrokenFenceStateFailsTheGrant(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	for _, tt := range []struct {
		name  string
		key   func(name string) string
		write []string // the command writing the broken key, after its name
		want  string   // in the error
	}{
		{"fence-not-integer", func(n string) string { return s.AuxKey(n, "fence") }, []string{"SET", "", "x"}, "holds no integer"},
		{"fence-hash", func(n string) string { return s.AuxKey(n, "fence") }, []string{"HSET", "", "f", "1"}, "WRONGTYPE"},
		{"mark-string", s.MarkKey, []string{"SET", "", "x"}, "WRONGTYPE"},
	} {
		for _, holder := range []string{"", "me"} {
			name := tt.name + "-" + holder
			key := tt.key(name)
			cmd := append([]string{tt.write[0], key}, tt.write[2:]...)
			mustDo(t, srv, cmd...)
			before := mustDo(t, srv, "DUMP", key)
			req := store.Request{Name: name, Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex, Holder: holder}
			g, err := s.Acquire(ctx, req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: Acquire = %+v, %v; want an error with %q", name, g, err, tt.want)
			}
			if n := mustDo(t, srv, "EXISTS", "lock:"+name); n != "0" {
				t.Errorf("%s: the lock key is left (EXISTS = %s)", name, n)
			}
			if after := mustDo(t, srv, "DUMP", key); after != before {
				t.Errorf("%s: the broken key changed", name)
			}
			// Once the key is gone, the name is granted.
			mustDo(t, srv, "DEL", key)
			if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired || g.Fence < 1 {
				t.Errorf("%s: Acquire after the key is gone = %+v, %v", name, g, err)
			}
		}
	}
}

// TestNewNameFenceIsTheClockFloor: a grant on a new name issues exactly the
// clock floor, the server's time in ms × 1000, between two TIME reads
// around the acquire. clock_lib cuts the floor from TIME's reply as a string
// (seconds, then the microseconds' first three digits, zero-padded to six);
// 300 grants meet microsecond parts below 100 000, where a padding mistake
// would be off by a power of ten.
func TestNewNameFenceIsTheClockFloor(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	floor := func() int64 {
		t.Helper()
		r := strings.Fields(mustDo(t, srv, "TIME"))
		if len(r) != 2 {
			t.Fatalf("TIME = %q", r)
		}
		sec, _ := strconv.ParseInt(r[0], 10, 64)
		usec, _ := strconv.ParseInt(r[1], 10, 64)
		return (sec*1000 + usec/1000) * 1000
	}
	for i := range 300 {
		req := store.Request{Name: "floor-" + strconv.Itoa(i), Token: "a", TTL: 10 * time.Second, Mode: store.ModeMutex}
		lo := floor()
		g, err := s.Acquire(ctx, req)
		hi := floor()
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v", g, err)
		}
		if g.Fence < lo || g.Fence > hi || g.Fence%1000 != 0 {
			t.Fatalf("%s: fence %d, want a multiple of 1000 in [%d, %d] (server ms × 1000)", req.Name, g.Fence, lo, hi)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
}
