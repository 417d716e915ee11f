package valkey_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// The clock-step tests scale docs/safety.md's Claim 3 ("Fences on
// Valkey/Redis") down: a clock-step bound J of a second and a retention
// ρ = 2J + L, L being the default FenceLeadBound (a second), so that a
// fence key expires seconds after its last hold rather than a minute.
const (
	scaledJ   = time.Second
	scaledRho = 2*scaledJ + redisproto.FenceLeadBound
	// stepHoldTTL is the TTL of the holds: short, so that a fence key
	// expires about scaledRho after the grant that created it.
	stepHoldTTL = 100 * time.Millisecond
)

// stepFleet is one node with the clock shim, a Store of this version with
// the scaled retention, and the version before 2026-11's scripts beside it
// on the same keys: a fleet in the middle of an upgrade.
type stepFleet struct {
	t    *testing.T
	srv  *testredis.Server
	s    *valkey.Store
	old  oldClient
	last map[string]int64 // the last fence issued on each name
	n    int
}

func newStepFleet(t *testing.T, rho time.Duration) *stepFleet {
	t.Helper()
	srv := testredis.Start(t, testredis.WithClockShim())
	s := dial(t, srv.URL(), valkey.WithFenceRetention(rho))
	return &stepFleet{t: t, srv: srv, s: s, old: oldClient{t, srv, s, loadOldScripts(t)}, last: map[string]int64{}}
}

// grantNew takes and releases name with this version, in mode, and
// returns the fence.
func (f *stepFleet) grantNew(name string, mode store.Mode) int64 {
	f.t.Helper()
	f.n++
	ctx := prototest.Context(f.t)
	req := store.Request{Name: name, Token: "new" + strconv.Itoa(f.n), TTL: stepHoldTTL, Mode: mode}
	g, err := f.s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		f.t.Fatalf("Acquire(%s, %v) = %+v, %v", name, mode, g, err)
	}
	if err := f.s.Release(ctx, req); err != nil {
		f.t.Fatal(err)
	}
	return g.Fence
}

// grantOld takes and releases name with the old version's mutex scripts,
// on the path that INCRs the counter it expects (keeping the key's expiry;
// a missing key it starts at the clock floor, kept a day), and returns the
// fence.
func (f *stepFleet) grantOld(name string) int64 {
	f.t.Helper()
	f.n++
	tok := "old" + strconv.Itoa(f.n)
	fence := f.old.acquire(store.ModeMutex, name, tok, "1")
	f.old.release(store.ModeMutex, name, tok)
	return fence
}

// rise fails the test unless fence is above every fence issued on name
// before it.
func (f *stepFleet) rise(name, who string, fence int64) {
	f.t.Helper()
	if fence <= f.last[name] {
		f.t.Fatalf("%s: %s grant's fence %d after %d (%v below; clock offset %v); want strictly increasing",
			name, who, fence, f.last[name], time.Duration(f.last[name]-fence)*time.Microsecond, f.srv.ClockOffset())
	}
	f.last[name] = fence
}

// awaitGone polls until name's fence key has expired.
func (f *stepFleet) awaitGone(name string) {
	f.t.Helper()
	key := f.s.AuxKey(name, "fence")
	deadline := time.Now().Add(15 * time.Second)
	for mustDo(f.t, f.srv, "EXISTS", key) != "0" {
		if time.Now().After(deadline) {
			f.t.Fatalf("fence key of %s still there 15 s on (PTTL %s)", name, mustDo(f.t, f.srv, "PTTL", key))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fourSteps grants name with this version (creating its fence key), then
// steps the node's clock back by step four times in quick succession, each
// step followed by a grant on name (of the old version, then of this one,
// alternating; the last is this version's), and checks that name's fences
// rise meanwhile: the steps all fall in one life of name's fence key.
func (f *stepFleet) fourSteps(name string, step time.Duration) {
	f.t.Helper()
	f.rise(name, "new", f.grantNew(name, store.ModeMutex))
	for i := range 4 {
		f.srv.StepClock(-step)
		if i%2 == 0 {
			f.rise(name, "old", f.grantOld(name))
		} else {
			f.rise(name, "new", f.grantNew(name, store.ModeMutex))
		}
	}
}

// TestClockStepsWhileTheFenceKeyLives is the reviewer's scenario on main
// 636d7c8: four steps back of the clock of 1 s each, every one within J
// (1 s here), 4 s in total, in quick succession while the name's fence key
// lives, in a fleet running the version before 2026-11 beside this one.
// The key holds fences 4 s ahead of the clock. On 636d7c8 every grant set
// the key's expiry to TTL + ρ from the stepped clock, so the key went
// about ρ after the last grant, when the clock was still 4 s − ρ − TTL
// behind those fences, and the old version, starting the name again at the
// clock floor, issued a fence below them (by about 0.9 s here). The key's
// expiry is now only ever raised, and it is by the server's clock: a step
// back while the key lives keeps it that much longer, until the clock is
// ρ past every fence it issued from the clock, so these steps leave no
// lead once the key is gone and the fences rise.
func TestClockStepsWhileTheFenceKeyLives(t *testing.T) {
	t.Parallel()
	f := newStepFleet(t, scaledRho)
	f.fourSteps("x", scaledJ)
	f.awaitGone("x")
	f.rise("x", "old, after the key expired,", f.grantOld("x"))
	f.rise("x", "new", f.grantNew("x", store.ModeMutex))
}

// TestClockStepsAddUpThroughTheMark is the negative control: four steps
// back of 1 s, each within J, 4 s in total, while the fence key of one
// name, y, lives; then the first grant of this version on another name of
// the same hash slot, x, which has no fence key, starts x from the slot's
// mark, 4 s ahead of the clock. Once x's key expires (ρ later, by the
// clock) the old version starts x at the clock floor, still about 0.9 s
// behind that fence: x's fences go down, although no step happened during
// any life of x's fence key. So Claim 3 bounds the total of the steps back
// within any 2ρ, not each step, nor the steps during one name's key's life.
func TestClockStepsAddUpThroughTheMark(t *testing.T) {
	t.Parallel()
	f := newStepFleet(t, scaledRho)
	start := time.Now()
	f.fourSteps("{slot}y", scaledJ)
	f.rise("{slot}x", "new, from the mark,", f.grantNew("{slot}x", store.ModeMutex))
	f.awaitGone("{slot}x")
	got := f.grantOld("{slot}x")
	elapsed := time.Since(start)
	if got > f.last["{slot}x"] {
		// Only a sequence slower than the 4 s of steps less ρ and the
		// TTL (the clock caught up meanwhile) gets here.
		t.Fatalf("{slot}x: the old version's grant after the key expired issued %d, above the fence %d before it, %v after the first grant: "+
			"want it below (four steps of %v, %v in total, more than J = %v)", got, f.last["{slot}x"], elapsed, scaledJ, 4*scaledJ, scaledJ)
	}
	t.Logf("{slot}x: the old version's fence %d is %v below the one before (%d); the sequence took %v",
		got, time.Duration(f.last["{slot}x"]-got)*time.Microsecond, f.last["{slot}x"], elapsed.Round(time.Millisecond))
}

// TestClockStepsWithinTheTotalBound: the two sequences above, with four
// steps of J/4 (J in total, within 2ρ), keep every name's fences rising
// in the mixed fleet, through the expiry of the fence key and the old
// version's start from the clock floor, as Claim 3 states.
func TestClockStepsWithinTheTotalBound(t *testing.T) {
	t.Parallel()
	t.Run("KeyLives", func(t *testing.T) {
		t.Parallel()
		f := newStepFleet(t, scaledRho)
		f.fourSteps("x", scaledJ/4)
		f.awaitGone("x")
		f.rise("x", "old, after the key expired,", f.grantOld("x"))
	})
	t.Run("ThroughTheMark", func(t *testing.T) {
		t.Parallel()
		f := newStepFleet(t, scaledRho)
		f.fourSteps("{slot}y", scaledJ/4)
		f.rise("{slot}x", "new, from the mark,", f.grantNew("{slot}x", store.ModeMutex))
		f.awaitGone("{slot}x")
		f.rise("{slot}x", "old, after the key expired,", f.grantOld("{slot}x"))
	})
}

// TestClockStepsBackAloneKeepFencesRising: this version alone, on a node
// that keeps its data, issues rising fences through any steps back of the
// clock, of any size and total: while the fence key lives (from the key)
// and once it is gone (from the slot's mark; the test deletes the key, as
// its expiry would), for the mutex and the write side of the read-write
// lock (docs/safety.md, Claim 1).
func TestClockStepsBackAloneKeepFencesRising(t *testing.T) {
	t.Parallel()
	f := newStepFleet(t, time.Second)
	for _, mode := range []store.Mode{store.ModeMutex, store.ModeWrite} {
		name := "{alone}" + mode.String()
		for _, step := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
			f.rise(name, "first", f.grantNew(name, mode))
			f.srv.StepClock(-step)
			f.rise(name, "while the key lives", f.grantNew(name, mode))
			mustDo(t, f.srv, "DEL", f.s.AuxKey(name, "fence"))
			f.srv.StepClock(-step)
			f.rise(name, "from the mark", f.grantNew(name, mode))
		}
	}
	t.Logf("clock offset %v at the end; fences rose throughout", f.srv.ClockOffset())
}
