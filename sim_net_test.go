package dlock_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/memsnap"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// This file is the faulty network of the simulation (see sim_test.go): a
// simNet in front of one store/memory Store, and one simLink per simulated
// process. A link is a store.Store whose calls travel as flights: the
// request reaches the store after a delay (or never), may be applied twice,
// and the reply comes back after another delay (or is lost). Flights are
// independent goroutines, so the store applies a link's requests in one
// order and the caller hears the replies in another. A request usually
// reaches the store within its Locker's op timeout or never; in profiles
// with late deliveries, some land seconds past it while the caller was
// told at once that the call failed (a connection reset with the request
// still in a buffer). A link can also go down for a while: calls made
// meanwhile fail fast, unapplied, and replies arriving meanwhile are lost.
// Grants and wake-ups the store pushes are delivered late. The store
// itself can go back to an earlier snapshot of its state (a restart from a
// snapshot, a failover to a replica that lagged), after a downtime in
// which requests that reach it are lost. Everything runs on synctest's
// virtual clock.
//
// The net also keeps the model the invariant checker compares leases with:
// what the store holds for each (name, token) after every request it
// applied, with the time it was granted and when it expires.

var (
	errSimDown    = fmt.Errorf("%w: sim: link down", dlock.ErrUnavailable)
	errSimLost    = fmt.Errorf("%w: sim: reply lost", dlock.ErrUnavailable)
	errSimReset   = fmt.Errorf("%w: sim: connection reset", dlock.ErrUnavailable)
	errSimRestart = fmt.Errorf("%w: sim: store restarting", dlock.ErrUnavailable)
)

// simFlight is what the network does with one call.
type simFlight struct {
	out     time.Duration // until the request reaches the store
	applied bool          // the request reaches the store at all
	twice   bool          // the store applies it a second time, gap later
	gap     time.Duration
	back    time.Duration // from the store back to the caller (for a push: its delay)
	lost    bool          // the reply never comes: the call fails after out+back
	// reset, when positive, is when the caller is told the call failed
	// (a connection reset), while the request flies on: a late delivery.
	reset time.Duration
}

// simCall describes a call to the plan that decides its flight.
type simCall struct {
	link *simLink
	from string // who called: a worker ("p1/w2"), or the Locker itself ("p1 renewal", "p1 locker")
	op   string // acquire, extend, release, leader, state, list, ping, grant, wake
	reqs []dlock.Request
}

// simWhoKey is the context key of a worker's name: the Locker passes the
// caller's context values on to the store, so the trace tells a worker's
// calls from the Locker's own (renewals, background releases).
type simWhoKey struct{}

func (c simCall) ttl() time.Duration {
	if len(c.reqs) == 0 {
		return 0
	}
	return c.reqs[0].TTL
}

// simKey names one hold in the model.
type simKey struct{ name, token string }

// simHold is what the store holds for one (name, token), by the model.
type simHold struct {
	mode    dlock.Mode
	granted time.Time
	expires time.Time
	// regranted is when the store last granted the token (an acquire
	// applied again, a handoff): the request whose grant its lease took
	// was sent no later.
	regranted time.Time
	// reach is the latest end of the hold that a request the store
	// applied asked for, counted from when it was sent: its send plus
	// its TTL (for a handoff, the handoff plus its TTL).
	reach time.Time
	fence int64 // of its grant
	// minUntil and maxUntil are the ends of the hold's MinHold and
	// MaxHold (zero: none), as its grant's request set them; released is
	// when the store applied a release that its MinHold kept it through.
	minUntil, maxUntil time.Time
	released           time.Time
}

// newSimHold is the model's hold of a grant of req at now with fence f:
// its record's bounds as the store keeps them (a MinHold only for the
// exclusive modes that keep one).
func newSimHold(req dlock.Request, now time.Time, f int64) *simHold {
	h := &simHold{mode: req.Mode, granted: now, fence: f}
	if req.MinHold > 0 && (req.Mode == dlock.ModeMutex || req.Mode == dlock.ModeFair || req.Mode == dlock.ModeElection) {
		h.minUntil = now.Add(req.MinHold)
	}
	if req.MaxHold > 0 {
		h.maxUntil = now.Add(req.MaxHold)
	}
	return h
}

// simNet is the network and the store's model. Its mutex orders every
// application of a request with the model's update for it.
type simNet struct {
	inner *memory.Store
	start time.Time
	prof  simProfile
	seed  uint64
	// script, when set, decides the flights its ok result claims, instead
	// of the profile's dice (the directed scenario tests).
	script func(c simCall) (simFlight, bool)
	// spin, when set, is told of a livelock (see simLink.guard).
	spin func(msg string)
	// stallBroken, when set, is told of a stalled scheduler that did not
	// hold (see simNet.stallScheduler).
	stallBroken func(msg string)
	// stallSem lets one goroutine at a time begin a scheduler stall: it
	// waits for the bubble to block (synctest.Wait), which two may not do
	// at once. A channel made in the bubble: waiting on it blocks durably.
	stallSem chan struct{}
	wg       sync.WaitGroup // flights and deliveries still on their way, stalls still to end

	mu     sync.Mutex
	holds  map[simKey]*simHold
	queued map[simKey]time.Duration // a fair waiter's lease TTL, granted on handoff
	// released is when the store applied a release of each hold while it
	// held it (whether or not a min hold kept it after).
	released map[simKey]time.Time
	// resumes and kept count the resumes the store confirmed and the
	// releases a min hold kept, for the round's log.
	resumes, kept int
	trace         []string // ring of the last traceCap events
	next          int

	rewinds   int              // how many times the store went back to a snapshot
	downUntil time.Time        // the store restarts: requests reaching it are lost
	fences    map[string]int64 // the highest fence issued on each name
	everIss   map[string]map[int64]bool
	// badFences are the new grants whose fence was not above every fence
	// the store issued on their name before: name and message, for the
	// checker (see issued).
	badFences [][2]string
}

// simSnapshot is the state of the store and of the model at one moment.
type simSnapshot struct {
	at     time.Time
	store  any
	holds  map[simKey]simHold
	queued map[simKey]time.Duration
}

// snapshot copies the store's state and the model's.
func (n *simNet) snapshot() *simSnapshot {
	n.mu.Lock()
	defer n.mu.Unlock()
	sn := &simSnapshot{at: time.Now(), store: memsnap.Take(n.inner), holds: make(map[simKey]simHold, len(n.holds)), queued: maps.Clone(n.queued)}
	for k, h := range n.holds {
		sn.holds[k] = *h
	}
	n.lockedLogf("store snapshot taken")
	return sn
}

// rewind puts the store and the model back to sn, as a restart from that
// snapshot does, and keeps the store down for down: requests that reach
// it meanwhile are lost.
func (n *simNet) rewind(sn *simSnapshot, down time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	memsnap.Restore(n.inner, sn.store)
	n.holds = make(map[simKey]*simHold, len(sn.holds))
	for k, h := range sn.holds {
		n.holds[k] = &h
	}
	n.queued = maps.Clone(sn.queued)
	n.rewinds++
	n.downUntil = time.Now().Add(down)
	n.lockedLogf("STORE REWOUND to its snapshot of %.3fs, down for %v", sn.at.Sub(n.start).Seconds(), down)
}

// takeBadFences returns the bad fences found since the last call.
func (n *simNet) takeBadFences() [][2]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.badFences
	n.badFences = nil
	return b
}

// epoch is the number of rewinds so far: a lease whose acquire began in an
// earlier epoch may have lost its hold to a rewind.
func (n *simNet) epoch() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rewinds
}

// storeDown reports whether the store is restarting, and logs the request
// lost to it. Caller holds n.mu.
func (n *simNet) storeDown(from, op string, reqs []dlock.Request) bool {
	if !time.Now().Before(n.downUntil) {
		return false
	}
	n.lockedLogf("%s %s %s: lost, the store is restarting", from, op, reqsString(reqs))
	return true
}

// issued checks that a fence the store just issued with a new grant of
// name is above every fence it issued on name before, whatever it lived
// through; of a handoff (pushed), that it was never issued before: the
// model hears of a handoff when the push is forwarded, after the store
// issued it, and possibly after a later one. Caller holds n.mu.
func (n *simNet) issued(name string, fence int64, what string, handoff bool) {
	if n.everIss[name] == nil {
		n.everIss[name] = make(map[int64]bool)
	}
	again := n.everIss[name][fence]
	n.everIss[name][fence] = true
	if last := n.fences[name]; again || fence <= last && !handoff {
		n.badFences = append(n.badFences, [2]string{name, fmt.Sprintf("(c) the store issued fence %d to %s, not above its fence %d issued before on the name, or issued before (rewinds so far: %d)", fence, what, last, n.rewinds)})
	}
	n.fences[name] = max(n.fences[name], fence)
}

const traceCap = 4096

func newSimNet(seed uint64, prof simProfile) *simNet {
	return &simNet{
		inner:    memory.New(),
		start:    time.Now(),
		prof:     prof,
		seed:     seed,
		holds:    make(map[simKey]*simHold),
		queued:   make(map[simKey]time.Duration),
		released: make(map[simKey]time.Time),
		fences:   make(map[string]int64),
		everIss:  make(map[string]map[int64]bool),
		stallSem: make(chan struct{}, 1),
	}
}

// since is the virtual time of the round.
func (n *simNet) since() time.Duration { return time.Since(n.start) }

// logf records one event of the round in the trace.
func (n *simNet) logf(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lockedLogf(format, args...)
}

// lockedLogf is logf for a caller that holds n.mu.
func (n *simNet) lockedLogf(format string, args ...any) {
	line := fmt.Sprintf("%9.3fs ", n.since().Seconds()) + fmt.Sprintf(format, args...)
	if len(n.trace) < traceCap {
		n.trace = append(n.trace, line)
		return
	}
	n.trace[n.next] = line
	n.next = (n.next + 1) % traceCap
}

// tail returns the last max events that mention name (every event when
// name is empty), oldest first, leaving out the refusals that mention none
// of focus (tokens, workers): waiters retry often, and their refusals
// would fill it.
func (n *simNet) tail(name string, focus []string, max int) []string { //nolint:revive // redefines-builtin-id: max is the documented cap; the builtin is not used here
	n.mu.Lock()
	defer n.mu.Unlock()
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`)
	all := append(append([]string(nil), n.trace[n.next:]...), n.trace[:n.next]...)
	var out []string
	for i := len(all) - 1; i >= 0 && len(out) < max; i-- {
		if name != "" && !re.MatchString(all[i]) && !strings.Contains(all[i], simProcessStall) {
			continue
		}
		if strings.Contains(all[i], ": refused (") && !slices.ContainsFunc(focus, func(f string) bool {
			return strings.Contains(all[i], f)
		}) {
			continue
		}
		out = append(out, all[i])
	}
	slices.Reverse(out)
	return out
}

// simProcessStall marks the trace's events that every name's trace shows.
const simProcessStall = "(process stall)"

// short is a token as traces and failures show it.
func short(token string) string { return token[:min(len(token), 6)] }

func reqString(r dlock.Request) string {
	return fmt.Sprintf("%s %s tok=%s ttl=%v", r.Mode, r.Name, short(r.Token), r.TTL)
}

// live returns the model's hold of k at now.
func (n *simNet) live(k simKey, now time.Time) *simHold {
	if h := n.holds[k]; h != nil && now.Before(h.expires) {
		return h
	}
	return nil
}

// regranted returns when the store last granted name to token, and the
// reach of that hold, by the model (zero: it does not hold it).
func (n *simNet) regranted(name, token string) (time.Time, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h := n.live(simKey{name, token}, time.Now()); h != nil {
		return h.regranted, h.reach
	}
	return time.Time{}, time.Time{}
}

// left returns how long the store still holds name for token, by the
// model, and when that hold was granted.
func (n *simNet) left(name, token string) (time.Duration, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if h := n.live(simKey{name, token}, now); h != nil {
		return h.expires.Sub(now), h.granted
	}
	return 0, time.Time{}
}

// setExpiry sets k's expiry to now+ttl, capped by its MaxHold; a
// reentrant hold has one expiry for all of its holders, which only moves
// out (as store/memory does).
func (n *simNet) setExpiry(k simKey, h *simHold, now time.Time, ttl time.Duration) {
	e := now.Add(ttl)
	if h.mode != dlock.ModeReentrant {
		if !h.maxUntil.IsZero() && h.maxUntil.Before(e) {
			e = h.maxUntil
		}
		h.expires = e
		return
	}
	for ok, o := range n.holds {
		if ok.name == k.name && o.mode == dlock.ModeReentrant && now.Before(o.expires) {
			e = later(e, o.expires)
		}
	}
	h.expires = e
	for ok, o := range n.holds {
		if ok.name == k.name && o.mode == dlock.ModeReentrant && now.Before(o.expires) {
			o.expires = e
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// acquire applies req, sent at sent, to the store and the model.
func (n *simNet) acquire(from string, req dlock.Request, sent time.Time) (store.Grant, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.storeDown(from, "acquire", []dlock.Request{req}) {
		return store.Grant{}, errSimRestart
	}
	now := time.Now()
	g, err := n.inner.Acquire(context.Background(), req)
	k := simKey{req.Name, req.Token}
	switch {
	case err != nil:
		n.lockedLogf("%s applied acquire %s: %v", from, reqString(req), err)
		return g, err
	case g.Acquired:
		h := n.live(k, now)
		if h == nil || h.fence != g.Fence {
			// New (another fence: the store's hold of the token ended,
			// as a handover not claimed within its window does, before
			// the model's).
			h = newSimHold(req, now, g.Fence)
			n.holds[k] = h
			if n.newFence(req) {
				n.issued(req.Name, g.Fence, fmt.Sprintf("%s tok=%s", req.Mode, short(req.Token)), false)
			}
		}
		h.regranted = now
		h.reach = later(h.reach, sent.Add(req.TTL))
		n.setExpiry(k, h, now, req.TTL)
		delete(n.queued, k)
		n.lockedLogf("%s applied acquire %s: granted fence=%d", from, reqString(req), g.Fence)
	default:
		if req.Queue {
			n.queued[k] = req.TTL
		}
		n.lockedLogf("%s applied acquire %s: refused (held %s, retry %v, pos %d)", from, reqString(req), g.Held, g.RetryAfter, g.Position)
	}
	return g, nil
}

// resume applies a resume of req, sent at sent, to the store and the
// model: a repeat by the holder, which extends the hold to the TTL the
// store answers (capped by its MaxHold) and grants nothing.
func (n *simNet) resume(from string, req dlock.Request, sent time.Time) (store.Grant, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.storeDown(from, "resume", []dlock.Request{req}) {
		return store.Grant{}, errSimRestart
	}
	now := time.Now()
	g, err := n.inner.Resume(context.Background(), req)
	k := simKey{req.Name, req.Token}
	if h := n.live(k, now); err == nil && (h == nil || h.fence != g.Fence) {
		// A hold the model did not see granted: the store handed a fair
		// lock to a queue place the token left (a late request of its
		// acquire), with nobody watching for the push. It was granted
		// when its fence was issued; its bounds are what the store said.
		n.issued(req.Name, g.Fence, fmt.Sprintf("%s tok=%s (handed over unwatched)", req.Mode, short(req.Token)), true)
		h = &simHold{mode: req.Mode, granted: simFenceTime(g.Fence), expires: now.Add(g.TTL), fence: g.Fence}
		h.regranted = h.granted
		if g.MaxHoldLeft > 0 {
			h.maxUntil = now.Add(g.MaxHoldLeft)
		}
		n.holds[k] = h
	}
	if h := n.live(k, now); h != nil && err == nil {
		n.resumes++
		n.setExpiry(k, h, now, g.TTL)
		h.reach = later(h.reach, sent.Add(g.TTL))
	}
	n.lockedLogf("%s applied resume %s: fence=%d ttl=%v maxHoldLeft=%v %v", from, reqString(req), g.Fence, g.TTL, g.MaxHoldLeft, err)
	return g, err
}

// fenceOf returns the fence of the live hold of name by token, by the
// model (0: none).
func (n *simNet) fenceOf(name, token string) int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h := n.live(simKey{name, token}, time.Now()); h != nil {
		return h.fence
	}
	return 0
}

// releasedAt returns when the store first applied a release of name by
// token while it held it (zero: never), by the model.
func (n *simNet) releasedAt(name, token string) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.released[simKey{name, token}]
}

// newFence reports whether a new grant of req comes with a new fence: not
// a reader's (readers share the current fence), nor a re-entry of a held
// reentrant lock (it shares the hold's). Caller holds n.mu.
func (n *simNet) newFence(req dlock.Request) bool {
	switch req.Mode {
	case dlock.ModeRead:
		return false
	case dlock.ModeReentrant:
		now := time.Now()
		for k, h := range n.holds {
			if k.name == req.Name && k.token != req.Token && h.mode == dlock.ModeReentrant && now.Before(h.expires) {
				return false
			}
		}
	}
	return true
}

// extend applies reqs, sent at sent, to the store and the model.
func (n *simNet) extend(from string, reqs []dlock.Request, sent time.Time) []error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.storeDown(from, "extend", reqs) {
		errs := make([]error, len(reqs))
		for i := range errs {
			errs[i] = errSimRestart
		}
		return errs
	}
	now := time.Now()
	errs := n.inner.Extend(context.Background(), reqs)
	for i, req := range reqs {
		k := simKey{req.Name, req.Token}
		if h := n.live(k, now); h != nil && errs[i] == nil {
			n.setExpiry(k, h, now, req.TTL)
			h.reach = later(h.reach, sent.Add(req.TTL))
		}
		n.lockedLogf("%s applied extend %s: %v", from, reqString(req), errs[i])
	}
	return errs
}

// release applies req to the store and the model.
func (n *simNet) release(from string, req dlock.Request) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.storeDown(from, "release", []dlock.Request{req}) {
		return errSimRestart
	}
	err := n.inner.Release(context.Background(), req)
	if err == nil {
		k := simKey{req.Name, req.Token}
		if n.live(k, time.Now()) != nil {
			if _, ok := n.released[k]; !ok {
				n.released[k] = time.Now()
			}
		}
		if h := n.live(k, time.Now()); h != nil && time.Now().Before(h.minUntil) {
			// Kept by its MinHold: it ends when that does.
			h.expires, h.released = h.minUntil, time.Now()
			n.kept++
			n.lockedLogf("%s applied release %s: kept until %.3fs by its min hold", from, reqString(req), h.minUntil.Sub(n.start).Seconds())
			return nil
		}
		delete(n.holds, k)
		delete(n.queued, k)
	}
	n.lockedLogf("%s applied release %s: %v", from, reqString(req), err)
	return err
}

// handoff records a fair lock the store handed to req.Token inside
// another request (a release, or an expiry it noticed).
func (n *simNet) handoff(to *simLink, req dlock.Request, g store.Grant) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	k := simKey{req.Name, req.Token}
	ttl, ok := n.queued[k]
	if !ok {
		ttl = req.TTL
	}
	delete(n.queued, k)
	if h := n.live(k, now); h == nil || h.fence != g.Fence {
		// Not the grant of an acquire the model saw.
		n.issued(req.Name, g.Fence, fmt.Sprintf("%s tok=%s (handed over)", req.Mode, short(req.Token)), true)
	}
	h := newSimHold(req, now, g.Fence)
	h.regranted, h.reach = now, now.Add(ttl)
	n.holds[k] = h
	n.setExpiry(k, h, now, ttl)
	n.lockedLogf("%s handed %s %s tok=%s fence=%d ttl=%v by the store", to, req.Mode, req.Name, short(req.Token), g.Fence, ttl)
}

// simLink is one simulated process's connection to the store: a
// store.Store (with every optional interface store/memory has that the
// Locker uses) whose calls fly over the simNet.
type simLink struct {
	net *simNet
	id  int

	// maxOut bounds how long a request takes to reach the store (0: no
	// bound), but for the late deliveries of profiles that have them
	// (simProfile.late), which land past it.
	maxOut time.Duration

	mu      sync.Mutex
	rngs    map[string]*rand.Rand // the dice of each caller's flights
	outages [][2]time.Duration    // [from, to) in round time: the link is down
	instant time.Duration         // the virtual time of the last call
	calls   int                   // calls made at instant

	// renewals counts the calls of the Locker's scheduler (its renewals'
	// Extend calls), made on the link, whether or not they reach the
	// store: a stalled scheduler makes none.
	renewals atomic.Int64
}

var (
	_ store.Store        = (*simLink)(nil)
	_ store.GrantWatcher = (*simLink)(nil)
	_ store.Elector      = (*simLink)(nil)
	_ store.LockDelayer  = (*simLink)(nil)
	_ store.Inspector    = (*simLink)(nil)
	_ store.Pinger       = (*simLink)(nil)
	_ store.Resumer      = (*simLink)(nil)
)

// link returns process id's link, with outages drawn for a round of length
// d.
func (n *simNet) link(id int, d time.Duration) *simLink {
	k := &simLink{net: n, id: id, rngs: make(map[string]*rand.Rand)}
	rng := k.rng("outages")
	for range rng.IntN(n.prof.outages + 1) {
		from := time.Duration(rng.Int64N(int64(d)))
		k.outages = append(k.outages, [2]time.Duration{from, from + time.Duration(rng.Int64N(int64(n.prof.outageMax)+1))})
	}
	return k
}

// rng returns the dice of caller's flights: one source per caller keeps
// each caller's faults the same from run to run, whatever the order in
// which callers that run at the same virtual instant make their calls.
// Caller holds k.mu, or k is not shared yet.
func (k *simLink) rng(caller string) *rand.Rand {
	r := k.rngs[caller]
	if r == nil {
		h := fnv.New64a()
		fmt.Fprintf(h, "p%d %s", k.id, caller)
		r = rand.New(rand.NewPCG(k.net.seed, h.Sum64()))
		k.rngs[caller] = r
	}
	return r
}

func (k *simLink) String() string { return fmt.Sprintf("p%d", k.id) }

// cut takes the link down from now for d.
func (k *simLink) cut(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.net.since()
	k.outages = append(k.outages, [2]time.Duration{now, now + d})
}

func (k *simLink) down() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.net.since()
	for _, o := range k.outages {
		if now >= o[0] && now < o[1] {
			return true
		}
	}
	return false
}

// plan decides the flight of c: by the net's script if it claims c,
// otherwise by the profile's dice.
func (k *simLink) plan(c simCall) simFlight {
	c.link = k
	if k.net.script != nil {
		if f, ok := k.net.script(c); ok {
			return f
		}
	}
	p := k.net.prof
	k.mu.Lock()
	defer k.mu.Unlock()
	rng := k.rng(c.from + " " + c.op)
	leg := func() time.Duration {
		if rng.Float64() < p.slow {
			return time.Duration(rng.Int64N(int64(p.slowMax) + 1))
		}
		return time.Duration(rng.Int64N(int64(p.delay) + 1))
	}
	f := simFlight{out: leg(), back: leg(), applied: true}
	if c.op == "grant" || c.op == "wake" {
		f.back = time.Duration(rng.Int64N(int64(p.pushDelay) + 1))
		return f
	}
	if rng.Float64() < p.dup {
		f.twice, f.gap = true, leg()/4
	}
	if rng.Float64() < p.drop {
		f.lost, f.applied = true, rng.IntN(2) == 0
	}
	if k.maxOut > 0 {
		f.out = min(f.out, k.maxOut)
		f.gap = min(f.gap, k.maxOut-f.out)
	}
	if p.late > 0 && rng.Float64() < p.late {
		// The caller hears of a failure at once; the request lands
		// past the op timeout.
		f.reset = leg() + time.Millisecond
		f.out = k.maxOut + time.Millisecond + time.Duration(rng.Int64N(int64(p.lateMax)+1))
		f.applied, f.twice, f.lost = true, false, true
	}
	return f
}

// call makes one flight for c: apply runs (on the store) when the request
// arrives, and call returns when the reply does, or at once with ctx's
// error when ctx ends first (the flight goes on: the request may still be
// applied later).
func (k *simLink) call(ctx context.Context, c simCall, apply func(from string)) error {
	c.from, _ = ctx.Value(simWhoKey{}).(string)
	switch {
	case c.from != "":
	case c.op == "extend":
		c.from = k.String() + " renewal"
		k.renewals.Add(1)
	default:
		c.from = k.String() + " locker"
	}
	k.guard(c)
	if k.down() {
		k.net.logf("%s %s %s: link down", c.from, c.op, reqsString(c.reqs))
		// Refused after a local round trip: a call that failed in no time
		// at all would let a retry loop spin in one virtual instant.
		time.Sleep(simRefused)
		return errSimDown
	}
	f := k.plan(c)
	arrived := make(chan struct{})
	k.net.wg.Add(1)
	go func() {
		defer k.net.wg.Done()
		defer close(arrived)
		time.Sleep(f.out)
		if !f.applied {
			k.net.logf("%s %s %s: request lost", c.from, c.op, reqsString(c.reqs))
		} else {
			apply(c.from)
			if f.twice {
				time.Sleep(f.gap)
				k.net.logf("%s %s %s: duplicated", c.from, c.op, reqsString(c.reqs))
				apply(c.from)
			}
		}
		time.Sleep(f.back)
	}()
	var reset <-chan time.Time
	if f.reset > 0 {
		t := time.NewTimer(f.reset)
		defer t.Stop()
		reset = t.C
	}
	select {
	case <-reset:
		k.net.logf("%s %s %s: connection reset (the request lands %v after its send)", c.from, c.op, reqsString(c.reqs), f.out)
		return errSimReset
	case <-arrived:
		if f.lost || k.down() {
			k.net.logf("%s %s %s: reply lost", c.from, c.op, reqsString(c.reqs))
			return errSimLost
		}
		return nil
	case <-ctx.Done():
		k.net.logf("%s %s %s: caller gave up: %v", c.from, c.op, reqsString(c.reqs), ctx.Err())
		return ctx.Err()
	}
}

// simRefused is how long a call over a link that is down takes to fail.
const simRefused = time.Millisecond

// simSpin is how many calls one link may make in one virtual instant
// before the net calls it a livelock.
const simSpin = 10000

// guard reports a livelock, a loop of calls that never lets virtual time
// advance, and then breaks it by making each further call of the instant
// take a while.
func (k *simLink) guard(c simCall) {
	k.mu.Lock()
	now := k.net.since()
	if now != k.instant {
		k.instant, k.calls = now, 0
	}
	k.calls++
	n := k.calls
	k.mu.Unlock()
	if n < simSpin {
		return
	}
	if n == simSpin && k.net.spin != nil {
		k.net.spin(fmt.Sprintf("%s made %d calls at %.3fs without letting time pass (the last: %s %s)", k, n, now.Seconds(), c.op, reqsString(c.reqs)))
	}
	time.Sleep(simRefused)
}

func reqsString(reqs []dlock.Request) string {
	s := make([]string, len(reqs))
	for i, r := range reqs {
		s[i] = reqString(r)
	}
	return "[" + strings.Join(s, "; ") + "]"
}

// Acquire implements store.Store.
func (k *simLink) Acquire(ctx context.Context, req dlock.Request) (store.Grant, error) {
	var g store.Grant
	var err error
	sent := time.Now()
	if e := k.call(ctx, simCall{op: "acquire", reqs: []dlock.Request{req}}, func(from string) { g, err = k.net.acquire(from, req, sent) }); e != nil {
		return store.Grant{}, e
	}
	return g, err
}

// Extend implements store.Store.
func (k *simLink) Extend(ctx context.Context, reqs []dlock.Request) []error {
	var errs []error
	sent := time.Now()
	if e := k.call(ctx, simCall{op: "extend", reqs: reqs}, func(from string) { errs = k.net.extend(from, reqs, sent) }); e != nil {
		// The flight may still write errs: answer with a slice of our own.
		failed := make([]error, len(reqs))
		for i := range failed {
			failed[i] = e
		}
		return failed
	}
	return errs
}

// Resume implements store.Resumer.
func (k *simLink) Resume(ctx context.Context, req dlock.Request) (store.Grant, error) {
	var g store.Grant
	var err error
	sent := time.Now()
	if e := k.call(ctx, simCall{op: "resume", reqs: []dlock.Request{req}}, func(from string) { g, err = k.net.resume(from, req, sent) }); e != nil {
		return store.Grant{}, e
	}
	return g, err
}

// Release implements store.Store.
func (k *simLink) Release(ctx context.Context, req dlock.Request) error {
	var err error
	if e := k.call(ctx, simCall{op: "release", reqs: []dlock.Request{req}}, func(from string) { err = k.net.release(from, req) }); e != nil {
		return e
	}
	return err
}

// Watch implements store.Store; wake-ups are delivered late.
func (k *simLink) Watch(ctx context.Context, name string, mode dlock.Mode) (<-chan struct{}, func(), error) {
	if k.down() {
		return nil, nil, errSimDown
	}
	in, stop, err := k.net.inner.Watch(ctx, name, mode)
	if err != nil {
		return nil, nil, err
	}
	out := make(chan struct{}, 1)
	return out, forward(k, in, stop, func(struct{}) {
		k.deliver(simCall{op: "wake", reqs: []dlock.Request{{Name: name, Mode: mode}}}, func() {
			select {
			case out <- struct{}{}:
			default:
			}
		})
	}), nil
}

// WatchGrant implements store.GrantWatcher; grants are recorded in the
// model when the store makes them and delivered late.
func (k *simLink) WatchGrant(ctx context.Context, req dlock.Request) (<-chan store.Grant, func(), error) {
	if k.down() {
		return nil, nil, errSimDown
	}
	in, stop, err := k.net.inner.WatchGrant(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	out := make(chan store.Grant, 1)
	return out, forward(k, in, stop, func(g store.Grant) {
		k.net.handoff(k, req, g)
		k.deliver(simCall{op: "grant", reqs: []dlock.Request{req}}, func() {
			select {
			case out <- g:
			default:
			}
		})
	}), nil
}

// forward runs fn for every value the store pushes on in until the
// returned stop is called; stop also stops the store's watch.
func forward[T any](k *simLink, in <-chan T, stop func(), fn func(T)) func() {
	quit := make(chan struct{})
	k.net.wg.Add(1)
	go func() {
		defer k.net.wg.Done()
		for {
			select {
			case v := <-in:
				fn(v)
			case <-quit:
				select {
				case v := <-in:
					fn(v) // made before the stop: the model must know of it
				default:
				}
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			stop()
			close(quit)
		})
	}
}

// deliver runs send after the push delay the plan gives c.
func (k *simLink) deliver(c simCall, send func()) {
	d := k.plan(c).back
	k.net.wg.Add(1)
	go func() {
		defer k.net.wg.Done()
		time.Sleep(d)
		send()
	}()
}

// Leader implements store.Elector.
func (k *simLink) Leader(ctx context.Context, name string) (dlock.Leader, error) {
	var ld dlock.Leader
	var err error
	if e := k.call(ctx, simCall{op: "leader"}, func(string) { ld, err = k.net.inner.Leader(context.Background(), name) }); e != nil {
		return dlock.Leader{}, e
	}
	return ld, err
}

// State implements store.Inspector.
func (k *simLink) State(ctx context.Context, name string) (store.State, error) {
	var st store.State
	var err error
	if e := k.call(ctx, simCall{op: "state"}, func(string) { st, err = k.net.inner.State(context.Background(), name) }); e != nil {
		return store.State{}, e
	}
	return st, err
}

// List implements store.Inspector.
func (k *simLink) List(ctx context.Context) ([]store.State, error) {
	var sts []store.State
	var err error
	if e := k.call(ctx, simCall{op: "list"}, func(string) { sts, err = k.net.inner.List(context.Background()) }); e != nil {
		return nil, e
	}
	return sts, err
}

// Ping implements store.Pinger.
func (k *simLink) Ping(ctx context.Context) error {
	return k.call(ctx, simCall{op: "ping"}, func(string) {})
}

// SupportsLockDelay implements store.LockDelayer: the memory store ends
// holds by its own clock.
func (k *simLink) SupportsLockDelay() bool { return k.net.inner.SupportsLockDelay() }
