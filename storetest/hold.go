package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// The hold suite (issue 38): a hold's record (Request.Holder, Data and the
// grant time, shown in State.Owners and List), the bounds kept with the
// hold on the store (MinHold, MaxHold), taking a hold back by its token
// (store.Resumer) and an operator's force-release (store.ForceReleaser).
// It runs over every mode the store supports.

func init() { register("Hold", store.ModeMutex, testHold) }

// Durations of the hold suite: generous, so that the facts checked are
// orderings (refused while the window is certainly open, granted only
// after it), never how fast a store answers.
const (
	holdMinHold = 3 * time.Second // a MinHold the suite waits out
	holdMaxHold = 3 * time.Second // a MaxHold the suite waits out
	holdShort   = time.Second     // a TTL the suite lets run out
)

// holdTest is one test of the hold suite, given the store and the modes
// it supports, and the optional interfaces it needs beyond store.Inspector.
type holdTest struct {
	name  string
	needs holdNeeds
	fn    func(t *testing.T, h Harness, s store.Store, modes []store.Mode)
}

// holdNeeds tells which of store.Resumer and store.ForceReleaser a test
// calls.
type holdNeeds int

const (
	needsResumer holdNeeds = 1 << iota
	needsForceReleaser
	// needsMinHold: the test keeps a name past a release by its MinHold,
	// which a store may refuse (store.SupportsMinHold, the PostgreSQL
	// advisory store): there the test checks the refusal instead.
	needsMinHold
)

var holdTests = []holdTest{
	{"Record", 0, holdRecord},
	{"RecordLimits", 0, holdRecordLimits},
	{"RecordGoneAfterRelease", 0, holdRecordGoneAfterRelease},
	{"RecordGoneAfterExpiry", 0, holdRecordGoneAfterExpiry},
	{"Invalid", 0, holdInvalid},
	{"RepeatKeepsRecord", 0, holdRepeatKeepsRecord},
	{"FairHandoffRecord", 0, holdFairHandoffRecord},
	{"MinHold", needsMinHold, holdMinHoldKeeps},
	{"MinHoldLateRequests", needsMinHold, holdMinHoldLateRequests},
	{"MinHoldPassed", needsMinHold, holdMinHoldPassed},
	{"MinHoldShared", 0, holdMinHoldShared},
	{"MinHoldMulti", needsMinHold, holdMinHoldMulti},
	{"MaxHold", 0, holdMaxHoldCaps},
	{"Resume", needsResumer, holdResume},
	{"ResumeMaxHold", needsResumer, holdResumeMaxHold},
	{"ResumeRefused", needsResumer, holdResumeRefused},
	{"ResumeExpired", needsResumer, holdResumeExpired},
	{"ForceRelease", needsForceReleaser, holdForceRelease},
	{"ForceReleaseMinHold", needsForceReleaser | needsMinHold, holdForceReleaseMinHold},
	{"ForceReleaseQueue", needsForceReleaser, holdForceReleaseQueue},
}

func testHold(t *testing.T, h Harness) {
	modes := supportedModes(h)
	for _, ht := range holdTests {
		t.Run(ht.name, func(t *testing.T) {
			parallel(t)
			s := h.New(t)
			needHolds(t, h, s, ht.needs)
			ht.fn(t, h, s, modes)
		})
	}
}

// supportedModes returns the modes of allModes that h supports.
func supportedModes(h Harness) []store.Mode {
	var modes []store.Mode
	for _, m := range allModes {
		if h.supports(m) {
			modes = append(modes, m)
		}
	}
	return modes
}

// needHolds checks that s implements what issue 38 asks of every store:
// store.Inspector (with State.Owners), store.Resumer and
// store.ForceReleaser; needs names those the calling test uses. A store
// without one fails the test, but for Resumer on a harness with NoResume
// (the HTTP store), whose tests that need it are skipped.
func needHolds(t *testing.T, h Harness, s store.Store, needs holdNeeds) {
	t.Helper()
	_, iok := s.(store.Inspector)
	_, rok := s.(store.Resumer)
	_, fok := s.(store.ForceReleaser)
	if !iok {
		t.Fatalf("%T does not implement store.Inspector; every store must (State.Owners)", s)
	}
	if !fok {
		t.Fatalf("%T does not implement store.ForceReleaser; every store must", s)
	}
	switch {
	case rok && h.NoResume:
		t.Fatalf("%T implements store.Resumer but its harness says NoResume", s)
	case !rok && !h.NoResume:
		t.Fatalf("%T does not implement store.Resumer; every store must", s)
	case !rok && needs&needsResumer != 0:
		t.Skipf("%T cannot resume a hold (Harness.NoResume)", s)
	}
	if needs&needsMinHold != 0 && !store.SupportsMinHold(s) {
		checkMinHoldRefused(t, s)
		t.Skipf("%T keeps no MinHold (store.SupportsMinHold false): its refusal is checked, the rest skipped", s)
	}
}

// checkMinHoldRefused checks that a store which says it keeps no MinHold
// refuses an Acquire with one by an error wrapping store.ErrNotSupported,
// and takes nothing: the same name is then granted to another token.
func checkMinHoldRefused(t *testing.T, s store.Store) {
	t.Helper()
	req := crossReq(lockName(t), store.ModeMutex, longTTL)
	req.MinHold = holdMinHold
	g, err := s.Acquire(testContext(t), req)
	if !errors.Is(err, store.ErrNotSupported) {
		if err == nil && g.Acquired {
			mustRelease(t, s, req)
		}
		t.Fatalf("Acquire with a MinHold on a store without MinHold = %+v, %v; want an error wrapping store.ErrNotSupported", g, err)
	}
	other := crossReq(req.Name, store.ModeMutex, longTTL)
	mustAcquire(t, s, other)
	mustRelease(t, s, other)
}

// holdsOf is how many holds the suite takes in mode m to see one record
// per hold: two readers, two permits, one of each other mode.
func holdsOf(m store.Mode) int {
	if m == store.ModeRead || m == store.ModeSemaphore {
		return 2
	}
	return 1
}

// recorded is a hold the suite took with a record, and the window of the
// test's clock in which the store granted it.
type recorded struct {
	req           store.Request
	fence         int64
	before, after time.Time
}

// holdSet is what takeRecorded took: one record per hold, and every
// request to release (a reentrant hold's re-entry too).
type holdSet struct {
	recs []recorded
	reqs []store.Request
}

// release releases every request of hs, failing t unless each is released.
func (hs holdSet) release(t *testing.T, s store.Store) {
	t.Helper()
	for _, req := range hs.reqs {
		mustRelease(t, s, req)
	}
}

// takeRecorded acquires holdsOf(m) holds of name in mode m, each with its
// own Holder and Data, and a re-entry for a reentrant hold (whose record
// must stay the first one's).
func takeRecorded(t *testing.T, s store.Store, name string, m store.Mode, ttl time.Duration) holdSet {
	t.Helper()
	var hs holdSet
	owner := newToken()
	for i := range holdsOf(m) {
		req := crossReq(name, m, ttl)
		req.Holder = fmt.Sprintf("host-%d.example/%d ✓", i, 4000+i)
		req.Data = fmt.Sprintf(`{"job":%d,"mode":%q}`, i, m)
		if m == store.ModeReentrant {
			req.Owner = owner
		}
		before := time.Now()
		g := mustAcquire(t, s, req)
		hs.recs = append(hs.recs, recorded{req: req, fence: g.Fence, before: before, after: time.Now()})
		hs.reqs = append(hs.reqs, req)
	}
	if m == store.ModeReentrant {
		again := hs.reqs[0]
		again.Token, again.Holder, again.Data = newToken(), "re-entry", "not recorded"
		if g := mustAcquire(t, s, again); g.Count != 2 || g.Fence != hs.recs[0].fence {
			t.Errorf("reentrant re-entry = %+v, want Count 2 and fence %d", g, hs.recs[0].fence)
		}
		hs.reqs = append(hs.reqs, again)
	}
	return hs
}

// mustState returns State(name), failing t on an error.
func mustState(t *testing.T, in store.Inspector, name string) store.State {
	t.Helper()
	st, err := in.State(testContext(t), name)
	if err != nil {
		t.Fatalf("State(%q) = %v", name, err)
	}
	if len(st.Owners) != st.Holders {
		t.Errorf("State(%q): %d Owners for %d Holders (%+v); want one per hold", name, len(st.Owners), st.Holders, st.Owners)
	}
	return st
}

// checkOwners checks that owners shows exactly the holds of want, each
// with its Owner, Data, Fence and a Since within its grant window (by the
// store's clock, to the millisecond).
func checkOwners(t *testing.T, what string, owners []store.Holder, want []recorded) {
	t.Helper()
	if len(owners) != len(want) {
		t.Errorf("%s: Owners = %+v, want %d entries (one per hold)", what, owners, len(want))
		return
	}
	left := slices.Clone(owners)
	for _, w := range want {
		i := slices.IndexFunc(left, func(h store.Holder) bool { return h.Owner == w.req.Holder })
		if i < 0 {
			t.Errorf("%s: Owners = %+v, want an entry for %q", what, owners, w.req.Holder)
			continue
		}
		h := left[i]
		left = slices.Delete(left, i, i+1)
		if h.Data != w.req.Data || h.Fence != w.fence {
			t.Errorf("%s: Owners entry %+v, want Data %q and Fence %d", what, h, w.req.Data, w.fence)
		}
		lo, hi := w.before.Truncate(time.Millisecond).Add(-clockSlack), w.after.Add(clockSlack)
		if h.Since.Before(lo) || h.Since.After(hi) {
			t.Errorf("%s: Owners entry %q Since = %v, want the grant's time, in [%v, %v]", what, h.Owner, h.Since, lo, hi)
		}
	}
}

// holdRecord: every hold shows its record in State.Owners and List, one
// entry per reader and per permit, one for a reentrant hold (the first
// acquisition's record), never the token.
func holdRecord(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	in := s.(store.Inspector)
	for _, m := range modes {
		name := lockName(t)
		held := takeRecorded(t, s, name, m, longTTL)
		st := mustState(t, in, name)
		checkOwners(t, fmt.Sprintf("State of a %v hold", m), st.Owners, held.recs)
		checkListed(t, in, st)
		for _, req := range held.reqs {
			if strings.Contains(fmt.Sprintf("%+v", st), req.Token) {
				t.Errorf("State of a %v hold = %+v: it shows a token", m, st)
			}
		}
		held.release(t, s)
	}
}

// holdRecordLimits: a Holder of store.MaxHolderLen bytes and Data of
// store.MaxDataLen bytes are kept whole.
func holdRecordLimits(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	in := s.(store.Inspector)
	for _, m := range modes {
		name := lockName(t)
		req := crossReq(name, m, longTTL)
		req.Holder = strings.Repeat("é", store.MaxHolderLen/2)
		req.Data = strings.Repeat("dä", store.MaxDataLen/3) + "d"
		before := time.Now()
		g := mustAcquire(t, s, req)
		r := recorded{req: req, fence: g.Fence, before: before, after: time.Now()}
		checkOwners(t, fmt.Sprintf("State of a %v hold with the longest record", m), mustState(t, in, name).Owners, []recorded{r})
		mustRelease(t, s, req)
	}
}

// holdRecordGoneAfterRelease: a released hold's record is gone, and the
// next hold, taken without a record, shows Owner "" (not the last one's).
func holdRecordGoneAfterRelease(t *testing.T, h Harness, s store.Store, modes []store.Mode) {
	in := s.(store.Inspector)
	for _, m := range modes {
		name := lockName(t)
		held := takeRecorded(t, s, name, m, longTTL)
		held.release(t, s)
		if st := mustState(t, in, name); st.Holders != 0 || len(st.Owners) != 0 {
			t.Errorf("State after the %v holds were released = %+v, want no holders and no Owners", m, st)
		}
		checkUnrecorded(t, h, s, in, name, m, held)
	}
}

// checkUnrecorded takes a hold of name in mode m without a record and
// checks that it shows as one Owner "" without Data (Since is not
// required: a store may write nothing for it), then releases it. With
// h.DefaultsHolder the Owner may be the store's own, but none of gone's.
func checkUnrecorded(t *testing.T, h Harness, s store.Store, in store.Inspector, name string, m store.Mode, gone holdSet) {
	t.Helper()
	req := crossReq(name, m, longTTL)
	mustAcquire(t, s, req)
	st := mustState(t, in, name)
	switch {
	case len(st.Owners) != 1 || st.Owners[0].Data != "":
		t.Errorf("State of a %v hold taken without a record = %+v; want one Owner without Data", m, st)
	case !h.DefaultsHolder && st.Owners[0].Owner != "":
		t.Errorf("State of a %v hold taken without a record = %+v; want Owner \"\"", m, st)
	case slices.ContainsFunc(gone.recs, func(r recorded) bool { return r.req.Holder == st.Owners[0].Owner }):
		t.Errorf("State of a %v hold taken without a record = %+v: it shows a gone hold's record", m, st)
	}
	mustRelease(t, s, req)
}

// holdRecordGoneAfterExpiry: a hold that ran out takes its record with it.
func holdRecordGoneAfterExpiry(t *testing.T, h Harness, s store.Store, modes []store.Mode) {
	in := s.(store.Inspector)
	names := make([]string, len(modes))
	held := make([]holdSet, len(modes))
	for i, m := range modes {
		names[i] = lockName(t)
		held[i] = takeRecorded(t, s, names[i], m, holdShort)
	}
	sleepUntil(time.Now().Add(holdShort + clockSlack))
	for i, m := range modes {
		waitFree(t, in, names[i])
		checkUnrecorded(t, h, s, in, names[i], m, held[i])
	}
}

// waitFree polls State(name) until it shows no holders, failing t after
// waitTimeout.
func waitFree(t *testing.T, in store.Inspector, name string) store.State {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		st := mustState(t, in, name)
		if st.Holders == 0 {
			if len(st.Owners) != 0 {
				t.Errorf("State(%q) without holders shows Owners %+v", name, st.Owners)
			}
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("State(%q) = %+v still held %v after its holds ran out", name, st, waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// badRecords are requests' record fields that Acquire must refuse, and
// the field its *store.InvalidError must name.
var badRecords = []struct {
	field string
	set   func(*store.Request)
}{
	{"holder", func(r *store.Request) { r.Holder = strings.Repeat("h", store.MaxHolderLen+1) }},
	{"holder", func(r *store.Request) { r.Holder = "host\xff/1" }},
	{"data", func(r *store.Request) { r.Data = strings.Repeat("d", store.MaxDataLen+1) }},
	{"data", func(r *store.Request) { r.Data = "bytes \xff\xfe" }},
	{"data", func(r *store.Request) { r.Data = "a\x00b" }},
	{"holder", func(r *store.Request) { r.Holder = "host\x00/1" }},
	{"minHold", func(r *store.Request) { r.MinHold = -time.Second }},
	{"maxHold", func(r *store.Request) { r.MaxHold = -time.Second }},
	{"minHold", func(r *store.Request) { r.MinHold, r.MaxHold = 2*time.Second, time.Second }},
}

// holdInvalid: a bad record is an *store.InvalidError naming the field,
// and changes nothing: a free name stays free with its fence, a held name
// keeps its record (a repeat by the holder with a bad record included).
func holdInvalid(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	in := s.(store.Inspector)
	for _, m := range modes {
		free := lockName(t)
		grantOnce(t, s, crossReq(free, store.ModeMutex, 0)) // gives the name a fence
		heldName := lockName(t)
		held := takeRecorded(t, s, heldName, m, longTTL)
		before := map[string]store.State{free: mustState(t, in, free), heldName: mustState(t, in, heldName)}
		for _, b := range badRecords {
			reqs := []store.Request{crossReq(free, m, longTTL), held.reqs[0]}
			for _, req := range reqs {
				b.set(&req)
				checkInvalid(t, s, req, b.field)
			}
		}
		for name, want := range before {
			got := mustState(t, in, name)
			got.TTL, want.TTL = 0, 0
			if !sameState(got, want) {
				t.Errorf("State(%q) after refused %v requests = %+v, want %+v (unchanged)", name, m, got, want)
			}
		}
		checkOwners(t, "the held name after refused requests", mustState(t, in, heldName).Owners, held.recs)
		held.release(t, s)
	}
	holdInvalidMulti(t, s, in)
}

// checkInvalid checks that Acquire(req) fails with an *store.InvalidError
// naming field.
func checkInvalid(t *testing.T, s store.Store, req store.Request, field string) {
	t.Helper()
	g, err := s.Acquire(testContext(t), req)
	if g.Acquired {
		s.Release(testContext(t), req) // so the next bad request meets the same state
	}
	var ie *store.InvalidError
	if !errors.As(err, &ie) || ie.Field != field || !errors.Is(err, store.ErrInvalid) || g.Acquired {
		t.Errorf("Acquire(mode %v, Holder %d bytes, Data %d bytes, MinHold %v, MaxHold %v) = %+v, %v; want an *store.InvalidError for %q",
			req.Mode, len(req.Holder), len(req.Data), req.MinHold, req.MaxHold, g, err, field)
	}
}

// holdInvalidMulti: on a store.MultiStore, AcquireMulti with one bad
// record takes no name.
func holdInvalidMulti(t *testing.T, s store.Store, in store.Inspector) {
	ms, ok := s.(store.MultiStore)
	names := multiNames(lockName(t), 2, true)
	if !ok || !ms.AtomicMulti(names) {
		return
	}
	token := newToken()
	reqs := []store.Request{mutexReq(names[0], token, longTTL), mutexReq(names[1], token, longTTL)}
	reqs[1].Data = strings.Repeat("d", store.MaxDataLen+1)
	mg, err := ms.AcquireMulti(testContext(t), reqs)
	var ie *store.InvalidError
	if !errors.As(err, &ie) || ie.Field != "data" || mg.Acquired {
		t.Errorf("AcquireMulti with Data of %d bytes = %+v, %v; want an *store.InvalidError for \"data\"", len(reqs[1].Data), mg, err)
	}
	for _, n := range names {
		if st := mustState(t, in, n); st.Holders != 0 {
			t.Errorf("State(%q) after a refused AcquireMulti = %+v, want free", n, st)
		}
	}
}

// holdRepeatKeepsRecord: an Acquire repeated by the holder with another
// record keeps the first record (and fence and grant time).
func holdRepeatKeepsRecord(t *testing.T, _ Harness, s store.Store, modes []store.Mode) {
	in := s.(store.Inspector)
	for _, m := range modes {
		name := lockName(t)
		held := takeRecorded(t, s, name, m, longTTL)
		for _, r := range held.recs {
			again := r.req
			again.Holder, again.Data = "someone else", "other data"
			if g := mustAcquire(t, s, again); g.Fence != r.fence {
				t.Errorf("repeated %v Acquire by the holder: fence %d, want %d", m, g.Fence, r.fence)
			}
		}
		checkOwners(t, fmt.Sprintf("State after repeated %v Acquires with another record", m), mustState(t, in, name).Owners, held.recs)
		held.release(t, s)
	}
}

// holdFairHandoffRecord: a fair lock handed to its queued head shows the
// waiter's own record once the waiter learns of its grant.
func holdFairHandoffRecord(t *testing.T, h Harness, s store.Store, _ []store.Mode) {
	if !h.supports(store.ModeFair) {
		t.Skip("mode fair is unsupported by this store")
	}
	in := s.(store.Inspector)
	name := lockName(t)
	a := takeRecorded(t, s, name, store.ModeFair, longTTL).recs[0]
	b := crossReq(name, store.ModeFair, longTTL)
	b.Queue, b.QueueTTL = true, longTTL
	b.Holder, b.Data = "waiter", "queued with a record"
	mustRefuse(t, s, b)
	before := time.Now()
	mustRelease(t, s, a.req)
	g, _ := acquireWhenFree(t, s, b)
	if g.Fence <= a.fence {
		t.Errorf("handed-over fair grant fence %d, want > %d", g.Fence, a.fence)
	}
	r := recorded{req: b, fence: g.Fence, before: before, after: time.Now()}
	checkOwners(t, "State of a fair lock handed to its waiter", mustState(t, in, name).Owners, []recorded{r})
	mustRelease(t, s, b)
}

// sameHolders reports whether a and b hold the same entries in any order
// (Since to the millisecond: stores keep it so).
func sameHolders(a, b []store.Holder) bool {
	if len(a) != len(b) {
		return false
	}
	used := make([]bool, len(b))
next:
	for _, x := range a {
		for i, y := range b {
			if !used[i] && x.Owner == y.Owner && x.Data == y.Data && x.Fence == y.Fence &&
				x.Since.Truncate(time.Millisecond).Equal(y.Since.Truncate(time.Millisecond)) {
				used[i] = true
				continue next
			}
		}
		return false
	}
	return true
}

// watchArmed watches name as a mutex waiter would: a refused mutex
// Acquire after the Watch arms it, and a wake-up before that is dropped.
func watchArmed(t *testing.T, s store.Store, name string) (<-chan struct{}, func()) {
	t.Helper()
	wake, stop, err := s.Watch(testContext(t), name, store.ModeMutex)
	if err != nil {
		t.Fatalf("Watch(%q) = %v", name, err)
	}
	mustRefuse(t, s, mutexReq(name, newToken(), longTTL))
	for len(wake) > 0 {
		<-wake
	}
	return wake, stop
}

// resumeOf returns the Resume request of a hold taken with req: the same
// name, token, mode (and reentrant owner, semaphore limit), a new TTL.
func resumeOf(req store.Request, ttl time.Duration) store.Request {
	return store.Request{Name: req.Name, Token: req.Token, Mode: req.Mode, Owner: req.Owner, Limit: req.Limit, Value: req.Value, TTL: ttl}
}
