package dlock_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/fence"
	"github.com/dlock-dev/dlock/store"
)

// This file is the invariant checker of the simulation (see sim_test.go).
// The workload registers every lease it gets; the checker looks at all of
// them on every holder action and on every tick of its own goroutine, in
// virtual time, and reports the first broken invariant of a round (with
// -sim.all, and in the directed scenarios, the first of each invariant on
// each name):
//
//	(a) no two holds of a name are valid (Err() == nil && TTL() > 0) at
//	    once when one of them is exclusive (mutex, reentrant, write, fair,
//	    election, each name of a multi-lock), and no more permits than the
//	    limit;
//	(b) a valid lease's TTL() never exceeds what the store still holds for
//	    its token, by the net's model of the store, and a lease whose
//	    validity ended never becomes valid again;
//	(c) fences increase per name: an exclusive grant's fence is above every
//	    fence handed out before it, and a holder that sees its lease valid
//	    never has a write refused by the name's fenced register;
//	(d) once a lease with a lock-delay d ended without a release made while
//	    it was valid (lost, run out, or released too late), nothing that
//	    cannot share the name with it (see store.Coexist) is granted the
//	    name before its validity ended plus d;
//	(e) an acquire whose ctx ended returns within twice the op timeout (one
//	    for the call in flight, one for the release that leaves nothing
//	    behind, as Mutex.Lock documents; and the 1/32 the Locker's shared
//	    expiries may add to each) plus simSlack;
//	(f) a lease with a max hold d (WithMaxHold) is never valid past d
//	    after the store last granted it its token (the request whose
//	    grant it took was sent no later), so an auto-renewed holder that
//	    goes on and on loses it in time; with (a) and (b), never while
//	    another holds the name; and no request of its holder asks the
//	    store to hold it past that (sent at s with TTL t: s+t, less its
//	    lock-delay);
//	(g) once the store applied the release of a hold with a min hold d
//	    (WithMinHold) before its grant plus d, nothing that cannot share the
//	    name with it is granted the name before its grant plus d: judged by
//	    the min hold the workload asked for, so a Locker that did not send
//	    it to the store fails.
//
// A resumed lease (Locker.Resume after its process "restarts") is a hold
// of its own for the checker, with its predecessor's token and fence: its
// fence is not asked to rise, and it is judged by (a), (b), (d) and (f)
// like every lease (for (f), against the max hold the store keeps: the
// lease's plus its drift margin).
//
// The checker also holds the simulation to its own word (s): a process
// whose scheduler is stalled (see simNet.stallScheduler) sends no renewal
// and its scheduler makes no pass over its leases until the stall ends,
// so that what a lease does past its validity is checked with the
// scheduler not having noticed.
//
// When the store goes back to an earlier snapshot (the profiles with
// rewinds), a lease cannot hold through the store losing its state: (a),
// (b), (d), (f) and the fenced writes of (c) are not asked of a hold whose
// acquire began before the last rewind, nor a reader's fence of (c) after
// any rewind (readers share the current fence, which the rewind took
// back). Fences are still checked as the store issues them: every new
// grant of an exclusive kind or a permit gets a fence above every fence
// the store issued on the name before, whatever it lived through.
//
// Failures name the seed, the virtual time, the name, the holds with their
// fences and tokens, and end with the net's trace of the name.

// simSlack is what (e) allows beyond the op timeouts: the Locker's own work
// takes no virtual time, so this only covers timer granularity.
const simSlack = 5 * time.Millisecond

// simLimit is every semaphore's number of permits.
const simLimit = 2

// simLease is what the checker reads of a hold: a *dlock.Lease, or a
// *dlock.MultiLease for each of its names.
type simLease interface {
	Err() error
	TTL() time.Duration
	Token() string
}

// simHeld is one registered hold of one name.
type simHeld struct {
	who     string // process/worker
	name    string
	mode    dlock.Mode // ModeMutex for the names of a Multi
	multi   bool
	fence   int64
	reentry bool          // a reentrant re-entry: part of an earlier hold
	resumed bool          // taken back by Locker.Resume: part of an earlier hold
	minHold time.Duration // WithMinHold; 0: none
	delay   time.Duration // lock-delay
	maxHold time.Duration // WithMaxHold; 0: none
	extra   time.Duration // the lock-delay the store adds to its TTL (a Multi's too, which (d) leaves out)
	lease   simLease
	granted time.Time // by the store, per the model
	epoch   int       // the net's rewinds when its acquire began (see rewound)

	net      *simNet
	validEnd time.Time // the end of validity, as last seen
	clean    bool      // released while valid
	over     bool      // seen invalid: it never becomes valid again
}

func (h *simHeld) kind() string {
	if h.multi {
		return "multi"
	}
	return h.mode.String()
}

func (h *simHeld) String() string {
	return fmt.Sprintf("{%s %s %s fence=%d tok=%s ttl=%v err=%v granted@%s}",
		h.who, h.kind(), h.name, h.fence, short(h.lease.Token()), h.lease.TTL(), h.lease.Err(), h.at(h.granted))
}

func (h *simHeld) exclusive() bool { return !h.mode.Shared() }

// rewound reports whether the store went back to a snapshot since h's
// acquire began: its hold may be gone. Caller holds no lock of h.net.
func (h *simHeld) rewound() bool { return h.epoch < h.net.epoch() }

// sameHold reports whether two leases are one hold: re-entries of a
// reentrant lock share its fence, and a resumed lease is its token's hold.
func sameHold(x, y *simHeld) bool {
	return x == y || x.mode == dlock.ModeReentrant && y.mode == dlock.ModeReentrant && x.fence == y.fence ||
		x.name == y.name && x.lease.Token() == y.lease.Token()
}

// at formats t as round time; the zero time is "?".
func (h *simHeld) at(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return fmt.Sprintf("%.3fs", t.Sub(h.net.start).Seconds())
}

// simChecker checks the invariants over the registered holds.
type simChecker struct {
	t      testing.TB
	net    *simNet
	replay string // how to replay the failure
	all    bool   // report the first failure of each invariant on each name, not only the first

	mu      sync.Mutex
	held    map[string][]*simHeld
	maxAny  map[string]int64 // highest fence registered, any kind
	maxExcl map[string]int64 // highest fence of an exclusive grant
	regs    map[string]*fence.Register[string]
	failed  bool
	seen    map[string]bool // invariant and name of each failure reported
	off     bool            // checking stopped (the Lockers are closing)
}

func newSimChecker(t testing.TB, net *simNet, replay string) *simChecker {
	c := &simChecker{
		t: t, net: net, replay: replay,
		held:    make(map[string][]*simHeld),
		maxAny:  make(map[string]int64),
		maxExcl: make(map[string]int64),
		regs:    make(map[string]*fence.Register[string]),
		seen:    make(map[string]bool),
	}
	net.spin = func(msg string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.failf("", "(e) livelock: %s", msg)
	}
	net.stallBroken = func(msg string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.failf("", "(s) %s", msg)
	}
	return c
}

// failing reports whether a failure was found (the workload then stops).
func (c *simChecker) failing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// stop ends checking (before the Lockers close, which ends every lease).
func (c *simChecker) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = true
}

// failf reports the first failure of the round, which then stops; with
// c.all, the round goes on and failf reports the first failure of each
// invariant on each name. Caller holds c.mu.
func (c *simChecker) failf(name, format string, args ...any) {
	key := format[:min(3, len(format))] + " " + name
	if c.failed || c.seen[key] {
		return
	}
	c.seen[key] = true
	c.failed = !c.all
	msg := fmt.Sprintf(format, args...)
	c.net.logf("CHECK %s: %s", name, msg)
	// The trace is the name's, with the refusals of the tokens involved;
	// for (e), the calls of the worker whose acquire it is.
	of, focus := name, simTokRE.FindAllString(msg, -1)
	if m := simWhoRE.FindStringSubmatch(msg); m != nil {
		of, focus = m[1], []string{m[1] + " "}
	}
	tail := 80
	if len(c.seen) > 1 {
		tail = 8 // the first failure's trace tells the story
	}
	c.t.Errorf("seed=%d profile=%s t=%.3fs name=%s: %s\nreplay: %s\n"+
		"trace of %s (p1/w2 is worker 2 of process 1; \"applied\" is when the store ran a request; refusals only of %q):\n%s",
		c.net.seed, c.net.prof.name, c.net.since().Seconds(), name, msg, c.replay,
		of, focus, strings.Join(c.net.tail(of, focus, tail), "\n"))
}

var (
	simTokRE = regexp.MustCompile(`tok=[0-9a-f]+`)
	simWhoRE = regexp.MustCompile(`^\(e\) (p[0-9]+/w[0-9]+) `) // the worker whose acquire (e) is about
)

// add registers a hold the workload just got and checks (c) and (d) for
// its grant, then (a) and (b). A lease returned already ended is left out.
func (c *simChecker) add(h *simHeld) {
	h.net = c.net
	_, h.granted = c.net.left(h.name, h.lease.Token())
	if h.granted.IsZero() {
		h.granted = time.Now() // unknown to the model: at the latest now
	}
	c.net.logf("%s got %s %s fence=%d tok=%s ttl=%v (store granted@%s)", h.who, h.kind(), h.name, h.fence, short(h.lease.Token()), h.lease.TTL(), h.at(h.granted))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		return
	}
	c.checkLocked(h.name)
	if !valid(h.lease) {
		// Returned already ended (a Multi whose first name ran out while
		// it took the others): it tells the truth, and never holds.
		return
	}
	if !h.reentry && !h.resumed && !h.rewound() {
		switch {
		case h.mode == dlock.ModeRead && h.fence < c.maxExcl[h.name] && c.net.epoch() == 0:
			c.failf(h.name, "(c) reader %v got fence %d below the exclusive fence %d granted before", h, h.fence, c.maxExcl[h.name])
		case h.mode == dlock.ModeSemaphore && h.fence <= c.maxExcl[h.name]:
			c.failf(h.name, "(c) permit %v got fence %d, not above the exclusive fence %d granted before", h, h.fence, c.maxExcl[h.name])
		case h.exclusive() && h.fence <= c.maxAny[h.name]:
			c.failf(h.name, "(c) exclusive %v got fence %d, not above the fence %d granted before", h, h.fence, c.maxAny[h.name])
		}
	}
	if !h.reentry {
		c.maxAny[h.name] = max(c.maxAny[h.name], h.fence)
		if h.exclusive() {
			c.maxExcl[h.name] = max(c.maxExcl[h.name], h.fence)
		}
	}
	for _, o := range c.held[h.name] {
		if o.delay > 0 && o.over && !o.clean && !sameHold(o, h) && !o.rewound() && !h.rewound() && !store.Coexist(o.mode, h.mode) && h.granted.Before(o.validEnd.Add(o.delay)) {
			c.failf(h.name, "(d) %v granted at %s, before %v (lock-delay %v, validity ended %s, not released in time) let the name go at %s",
				h, h.at(h.granted), o, o.delay, o.at(o.validEnd), o.at(o.validEnd.Add(o.delay)))
		}
		if o.minHold <= 0 || sameHold(o, h) || o.rewound() || h.rewound() || store.Coexist(o.mode, h.mode) {
			continue
		}
		// The store counts the min hold from its grant, which its fence
		// dates (to the millisecond; a handover is known to the model
		// only when it is pushed, later).
		g := earliestTime(o.granted, simFenceTime(o.fence))
		if rel := c.net.releasedAt(o.name, o.lease.Token()); !rel.IsZero() && rel.Before(h.granted) && h.granted.Before(g.Add(o.minHold-time.Millisecond)) {
			c.failf(h.name, "(g) %v granted at %s, before %v (min hold %v, released at %s) let the name go at %s",
				h, h.at(h.granted), o, o.minHold, o.at(rel), o.at(g.Add(o.minHold)))
		}
	}
	c.held[h.name] = append(c.held[h.name], h)
	c.checkLocked(h.name)
}

// forgot records that h's lease was forgotten (its process "died"): its
// validity ended now, whatever TTL it had left.
func (c *simChecker) forgot(h *simHeld) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.validEnd, h.over = time.Now(), true
}

// resuming records that h's hold is about to be resumed by a lease whose
// max hold is maxHold (see simWorker.restart): the requests for the hold
// are judged by that bound from now on.
func (c *simChecker) resuming(h *simHeld, maxHold time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if maxHold > 0 {
		h.maxHold = maxHold
	}
}

// resumed records that h's hold goes on as a resumed lease: h's own end
// is then no loss for (d), the resumed lease answers for the hold.
func (c *simChecker) resumed(h *simHeld) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.clean = true
}

// simFenceTime is when the store issued fence, by its clock floor: a
// fence is max(last + 1, its clock in ms * 1000), so it is at most the
// issue's millisecond.
func simFenceTime(fence int64) time.Time { return time.UnixMilli(fence / 1000) }

func earliestTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// failed2 reports a failure found outside the checker's own checks.
func (c *simChecker) failed2(name, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failf(name, "%s", msg)
}

// action is a holder's step: every invariant is checked, and a valid
// exclusive holder writes its fence to the name's fenced register.
func (c *simChecker) action(h *simHeld) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		return
	}
	c.checkAllLocked()
	if !h.exclusive() || !valid(h.lease) {
		return
	}
	reg := c.regs[h.name]
	if reg == nil {
		reg = new(fence.Register[string])
		c.regs[h.name] = reg
	}
	if err := reg.Write(h.fence, h.who); err != nil && !h.rewound() {
		last, f := reg.Read()
		c.failf(h.name, "(c) %v sees its lease valid, but its write was refused: %v (written last by %s with fence %d)", h, err, last, f)
	}
}

// releasing is called right before the workload releases h: a release
// made after the lease's validity ended counts as a loss for (d).
func (c *simChecker) releasing(h *simHeld) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		return
	}
	c.checkLocked(h.name)
	h.clean = valid(h.lease)
}

// returned checks (e) for the acquire what (say "Mutex.Lock n1") of who on
// name, whose ctx ended at ctxEnd.
func (c *simChecker) returned(who, name, what string, ctxEnd time.Time, opTimeout time.Duration, err error) {
	now := time.Now()
	c.net.logf("%s %s returned: %v", who, what, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if limit := ctxEnd.Add(2*(opTimeout+opTimeout/32) + simSlack); !c.off && now.After(limit) {
		c.failf(name, "(e) %s %s returned %v after its ctx ended at %.3fs; the op timeout is %v; it returned %q",
			who, what, now.Sub(ctxEnd), ctxEnd.Sub(c.net.start).Seconds(), opTimeout, err)
	}
}

// run checks every name every period of virtual time, until the returned
// stop is called.
func (c *simChecker) run(every time.Duration) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				c.mu.Lock()
				if !c.off {
					c.checkAllLocked()
				}
				c.mu.Unlock()
			case <-quit:
				return
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

func (c *simChecker) checkAllLocked() {
	for _, b := range c.net.takeBadFences() {
		c.failf(b[0], "%s", b[1])
	}
	for name := range c.held {
		c.checkLocked(name)
	}
}

func valid(ls simLease) bool { return ls.Err() == nil && ls.TTL() > 0 }

// checkLocked checks (a) and (b) on name, follows each hold's validity and
// forgets the holds that can no longer matter. Caller holds c.mu.
func (c *simChecker) checkLocked(name string) {
	now := time.Now()
	var live []*simHeld
	keep := c.held[name][:0]
	for _, h := range c.held[name] {
		ttl := h.lease.TTL()
		if h.lease.Err() == nil && ttl > 0 {
			if h.over {
				c.failf(name, "(b) %v is valid again after its validity ended", h)
			}
			live = append(live, h)
			h.validEnd = now.Add(ttl)
			if left, _ := c.net.left(name, h.lease.Token()); ttl > left && !h.rewound() {
				c.failf(name, "(b) %v has TTL %v but the store holds it for %v more", h, ttl, left)
			}
			if g, _ := c.net.regranted(name, h.lease.Token()); h.maxHold > 0 && !g.IsZero() && h.validEnd.After(g.Add(h.maxHold)) && !h.rewound() {
				c.failf(name, "(f) %v is valid until %s, past its max hold %v from its grant at %s", h, h.at(h.validEnd), h.maxHold, h.at(g))
			}
		} else {
			h.over = true
		}
		if g, reach := c.net.regranted(name, h.lease.Token()); h.maxHold > 0 && !g.IsZero() && reach.After(g.Add(h.maxHold+h.extra)) && !h.rewound() {
			c.failf(name, "(f) %v asked the store to hold it until %s, past its max hold %v (lock-delay %v) from its grant at %s", h, h.at(reach), h.maxHold, h.extra, h.at(g))
		}
		if !h.over || h.delay > 0 && !h.clean && now.Before(h.validEnd.Add(h.delay)) || h.minHold > 0 && now.Before(h.granted.Add(h.minHold)) {
			keep = append(keep, h)
		}
	}
	clear(c.held[name][len(keep):])
	c.held[name] = keep
	live = slices.DeleteFunc(live, (*simHeld).rewound)
	permits := 0
	for i, x := range live {
		if x.mode == dlock.ModeSemaphore {
			permits++
		}
		for _, y := range live[i+1:] {
			if (x.exclusive() || y.exclusive()) && !sameHold(x, y) {
				c.failf(name, "(a) two holds valid at once: %v and %v", x, y)
			}
		}
	}
	if permits > simLimit {
		c.failf(name, "(a) %d permits valid at once, limit %d: %v", permits, simLimit, live)
	}
}
