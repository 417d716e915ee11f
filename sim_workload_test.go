package dlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// This file is the workload of the simulation (see sim_test.go): a few
// processes, each a Locker on its own link, whose workers take every
// pattern on a few names with random options (TTL, auto-renew,
// lock-delay), under ctx deadlines and cancels, and then hold: they write
// to the fenced register, extend (also twice at once with different TTLs),
// re-enter, work, stall past their TTL, "restart" (the Locker lets go of
// the lease without a word to the store, and the worker takes it back by
// its token with Locker.Resume), and release or abandon the lease. Some
// exclusive locks have a min hold, which keeps the name held after their
// release.
// When a process reports a lease loss, its Locker's scheduler may stall
// for up to a second, as under load (see simNet.stallScheduler): it
// renews nothing and ends no lease meanwhile, while its leases' validity
// still ends on time.

var (
	simNames   = []string{"n1", "n2", "n3"}
	simTTLs    = []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second}
	simExtends = []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second}
)

const (
	simProcs   = 3
	simWorkers = 3 // per process
)

// simProc is one simulated process: a Locker on its own link.
type simProc struct {
	id        int
	l         *dlock.Locker
	link      *simLink
	opTimeout time.Duration

	mu      sync.Mutex
	rng     *rand.Rand // the scheduler's stalls
	stalled bool       // its scheduler is stalled
}

func newSimProc(net *simNet, id int, dur time.Duration) (*simProc, error) {
	p := &simProc{id: id, link: net.link(id, dur), rng: rand.New(rand.NewPCG(net.seed, uint64(3000+id)))}
	p.opTimeout = 200*time.Millisecond + time.Duration(p.rng.Int64N(int64(800*time.Millisecond)))
	if net.prof.opTimeout > 0 {
		p.opTimeout = net.prof.opTimeout
	}
	p.link.maxOut = p.opTimeout
	// The observer stalls the scheduler: with the loss reports off its
	// loop, a slow observer no longer would. Not once the round is over
	// (the Lockers close), nor while it is stalled already.
	stall := func(ev dlock.Event) {
		if ev.Kind != dlock.EventLeaseLost {
			return
		}
		p.mu.Lock()
		d := time.Duration(0)
		if p.rng.Float64() < net.prof.schedStall {
			d = time.Duration(p.rng.Int64N(int64(time.Second)))
		}
		if p.stalled || net.since() >= dur {
			d = 0
		}
		if d > 0 {
			p.stalled = true
		}
		p.mu.Unlock()
		if d > 0 {
			net.logf("p%d stalls %v reporting the loss of %s %s fence=%d %s", id, d, ev.Mode, ev.Name, ev.Fence, simProcessStall)
			net.stallScheduler(p.l, p.link, d, func() {
				p.mu.Lock()
				p.stalled = false
				p.mu.Unlock()
			})
		}
	}
	l, err := dlock.New(p.link, dlock.WithTTL(time.Second), dlock.WithOpTimeout(p.opTimeout),
		dlock.WithBackoff(5*time.Millisecond, 250*time.Millisecond), dlock.WithObserver(stall))
	p.l = l
	return p, err
}

// simStall is a stall of a process's scheduler (see simNet.stallScheduler).
type simStall struct {
	net      *simNet
	st       *dlock.SchedulerStall
	link     *simLink
	renewals int64 // the link's renewal calls when it began
	start    time.Time
	once     sync.Once
	ended    func()
}

// stallScheduler stalls the scheduler of l, the Locker on link k, from now
// for d (0: until end is called), as a loaded machine or a long pause of
// its goroutine would: it makes no pass over its leases, so it renews
// none and ends none whose validity passed (their accessors still do:
// validity is truth), while the process's other goroutines go on. ended,
// when set, is called when the stall ends.
//
// When the stall ends, the net checks that it held (s): the scheduler made
// no pass over its leases and no renewal call went out on k meanwhile. It
// begins once every goroutine of the bubble is blocked (see
// dlock.StallScheduler), so a renewal the scheduler started before it has
// made its call by then.
func (n *simNet) stallScheduler(l *dlock.Locker, k *simLink, d time.Duration, ended func()) *simStall {
	n.stallSem <- struct{}{}
	st := dlock.StallScheduler(l)
	<-n.stallSem
	s := &simStall{net: n, st: st, link: k, renewals: k.renewals.Load(), start: time.Now(), ended: ended}
	if d > 0 {
		n.wg.Go(func() {
			time.Sleep(d)
			s.end()
		})
	}
	return s
}

// renewalsSent returns how many renewal calls went out on the stalled
// link since the stall began.
func (s *simStall) renewalsSent() int64 { return s.link.renewals.Load() - s.renewals }

// end ends the stall (once) and checks (s).
func (s *simStall) end() {
	s.once.Do(func() {
		sent := s.renewalsSent() // before the scheduler resumes
		looks := s.st.Resume()
		s.net.logf("%s scheduler resumes after %v: %d passes over its leases and %d renewal calls meanwhile %s",
			s.link, time.Since(s.start), looks, sent, simProcessStall)
		if s.ended != nil {
			s.ended()
		}
		if (looks != 0 || sent != 0) && s.net.stallBroken != nil {
			s.net.stallBroken(fmt.Sprintf("%s scheduler stalled at %.3fs for %v made %d passes over its leases and %d renewal calls, want none: the stall did not hold it",
				s.link, s.start.Sub(s.net.start).Seconds(), time.Since(s.start), looks, sent))
		}
	})
}

// simWorker is one goroutine of a process, taking locks until the round
// ends.
type simWorker struct {
	p   *simProc
	who string
	rng *rand.Rand
	ck  *simChecker
	net *simNet
	end time.Time
}

func (w *simWorker) run() {
	for time.Now().Before(w.end) && !w.ck.failing() {
		w.step()
		time.Sleep(time.Duration(w.rng.Int64N(int64(100 * time.Millisecond))))
	}
}

func (w *simWorker) pick(list []time.Duration) time.Duration { return list[w.rng.IntN(len(list))] }

// bg is the root of the worker's contexts: it carries its name to the
// trace (see simWhoKey).
func (w *simWorker) bg() context.Context {
	return context.WithValue(context.Background(), simWhoKey{}, w.who)
}

// callContext returns the ctx of one acquire: a deadline, or a cancel, up
// to 1.5s from now, and when it ends.
func (w *simWorker) callContext() (context.Context, time.Time, context.CancelFunc) {
	d := time.Duration(w.rng.Int64N(int64(1500 * time.Millisecond)))
	if w.rng.IntN(5) == 0 {
		ctx, cancel := context.WithCancel(w.bg())
		t := time.AfterFunc(d, cancel)
		return ctx, time.Now().Add(d), func() { t.Stop(); cancel() }
	}
	ctx, cancel := context.WithTimeout(w.bg(), d)
	return ctx, time.Now().Add(d), cancel
}

// simHoldable is a lease the workload holds: a *dlock.Lease or a
// *dlock.MultiLease.
type simHoldable interface {
	simLease
	Extend(ctx context.Context, ttl time.Duration) error
	Release(ctx context.Context) error
}

// simStep is one lock a worker takes: its name, options and ctx.
type simStep struct {
	name   string
	ttl    time.Duration
	auto   bool          // auto-renewed
	delay  time.Duration // lock-delay
	hold   time.Duration // max hold
	min    time.Duration // min hold
	opts   []dlock.Option
	ctx    context.Context
	ctxEnd time.Time
}

// step takes one lock of a random pattern and, when it gets it, holds it.
func (w *simWorker) step() {
	r := w.rng
	s := &simStep{name: simNames[r.IntN(len(simNames))], ttl: w.pick(simTTLs), auto: r.IntN(3) == 0}
	s.opts = []dlock.Option{dlock.WithTTL(s.ttl)}
	if s.auto {
		s.opts = append(s.opts, dlock.WithAutoRenew())
	}
	pattern := r.IntN(10)
	if r.Float64() < w.net.prof.fair {
		pattern = 2
	}
	if pattern != 9 && r.Float64() < w.net.prof.lockDelay {
		// Not on a Multi: a multi-lease ends as a whole, so the checker
		// could not tell which name's lease was lost.
		s.delay = time.Millisecond + time.Duration(r.Int64N(int64(s.ttl)))
		s.opts = append(s.opts, dlock.WithLockDelay(s.delay))
	}
	if r.IntN(3) == 0 {
		// A bounded watchdog: from half a TTL to three.
		s.hold = s.ttl/2 + time.Duration(r.Int64N(int64(5*s.ttl/2)))
		s.opts = append(s.opts, dlock.WithMaxHold(s.hold))
	}
	if (pattern <= 2 || pattern >= 7) && r.IntN(4) == 0 {
		// A min hold (mutex, fair, election, multi): from half a TTL to
		// three, at most the max hold.
		s.min = s.ttl/2 + time.Duration(r.Int64N(int64(5*s.ttl/2)))
		if s.hold > 0 {
			s.min = min(s.min, s.hold)
		}
		s.opts = append(s.opts, dlock.WithMinHold(s.min))
	}
	var cancel context.CancelFunc
	s.ctx, s.ctxEnd, cancel = w.callContext()
	defer cancel()
	l, name, opts := w.p.l, s.name, s.opts
	switch pattern {
	case 0:
		w.one(s, "Mutex.TryLock", l.Mutex(name, opts...).TryLock, nil, nil)
	case 1:
		w.one(s, "Mutex.Lock", l.Mutex(name, opts...).Lock, nil, nil)
	case 2:
		if f := l.Fair(name, opts...); r.IntN(5) == 0 {
			w.one(s, "Fair.TryLock", f.TryLock, nil, nil)
		} else {
			w.one(s, "Fair.Lock", f.Lock, nil, nil)
		}
	case 3:
		w.one(s, "Reentrant.Lock", l.Reentrant(name, opts...).Lock, nil, l.Reentrant(name, opts...))
	case 4:
		w.one(s, "RWMutex.RLock", l.RWMutex(name, opts...).RLock, nil, nil)
	case 5:
		w.one(s, "RWMutex.Lock", l.RWMutex(name, opts...).Lock, nil, nil)
	case 6:
		w.one(s, "Semaphore.Acquire", l.Semaphore(name, simLimit, opts...).Acquire, nil, nil)
	case 7:
		e := l.Election(name, opts...)
		w.one(s, "Election.Campaign", func(ctx context.Context) (*dlock.Lease, error) { return e.Campaign(ctx, w.who) }, e.Resign, nil)
	default:
		w.multi(s)
	}
}

// one takes a lock of a single-lease pattern with acquire (what names
// it), holds it (re-entering it with re, when set) and releases it with
// release (nil: Lease.Release).
func (w *simWorker) one(s *simStep, what string, acquire func(context.Context) (*dlock.Lease, error), release func(context.Context) error, re *dlock.Reentrant) {
	w.net.logf("%s %s %s ttl=%v auto=%v delay=%v maxHold=%v minHold=%v ctx ends %.3fs", w.who, what, s.name, s.ttl, s.auto, s.delay, s.hold, s.min, s.ctxEnd.Sub(w.net.start).Seconds())
	epoch := w.net.epoch()
	ls, err := acquire(s.ctx)
	w.ck.returned(w.who, s.name, what+" "+s.name, s.ctxEnd, w.p.opTimeout, err)
	if err != nil {
		return
	}
	h := &simHeld{who: w.who, name: s.name, mode: ls.Mode(), fence: ls.Fence(), delay: s.delay, maxHold: s.hold, minHold: s.min, extra: s.delay, lease: ls, epoch: epoch}
	w.ck.add(h)
	if release == nil {
		release = ls.Release
	}
	hd := &simHolding{x: ls, hs: []*simHeld{h}, release: release, shortest: s.ttl}
	if re == nil {
		hd.restart = func() bool { return w.restart(s, hd) }
	}
	w.hold(hd, s.ttl, s.auto, func() {
		if re != nil {
			w.reenter(re, ls, h)
		}
	})
}

// simHolding is what a worker holds: the lease, its registered holds, how
// it releases it, and, for a single lease that can be resumed, how its
// process "restarts" (see restart).
type simHolding struct {
	x       simHoldable
	hs      []*simHeld
	release func(context.Context) error
	restart func() bool
	// shortest is the shortest TTL any request for the hold asked: a
	// resume asks no longer (see Locker.Resume).
	shortest time.Duration
}

// restart stands for a process that dies holding hd's lease and comes
// back: the Locker lets go of the lease without a store call (Forget),
// and after a pause of up to a TTL the worker takes it back by name, token
// and mode with Locker.Resume. On success hd holds the resumed lease (a
// hold of its own for the checker, with the same token and fence); it
// reports whether the worker still holds anything.
func (w *simWorker) restart(s *simStep, hd *simHolding) bool {
	ls, h := hd.x.(*dlock.Lease), hd.hs[0]
	req := dlock.Request{Name: ls.Name(), Token: ls.Token(), Mode: ls.Mode()}
	if req.Mode == dlock.ModeSemaphore {
		req.Limit = simLimit
	}
	if err := ls.Forget(); err != nil {
		return false // lost already: the worker has nothing to take back
	}
	w.ck.forgot(h)
	w.net.logf("%s restarts holding %s %s fence=%d tok=%s", w.who, h.kind(), h.name, h.fence, short(req.Token))
	time.Sleep(time.Duration(w.rng.Int64N(int64(s.ttl))))
	opts := []dlock.Option{dlock.WithTTL(hd.shortest)}
	if s.auto {
		opts = append(opts, dlock.WithAutoRenew())
	}
	if s.delay > 0 {
		opts = append(opts, dlock.WithLockDelay(s.delay))
	}
	maxHold := time.Duration(0)
	if s.hold > 0 {
		// The store keeps the max hold plus its drift margin (the Lockers'
		// default factor 0.01): the bound a resumed lease learns.
		maxHold = s.hold + s.hold/100 + 2*time.Millisecond
	}
	w.ck.resuming(h, maxHold)
	ctx, end, cancel := w.callContext()
	defer cancel()
	epoch := w.net.epoch()
	got, err := w.p.l.Resume(ctx, req, opts...)
	w.ck.returned(w.who, h.name, "Locker.Resume "+h.name, end, w.p.opTimeout, err)
	if err != nil {
		return false
	}
	if f := w.net.fenceOf(h.name, req.Token); f != 0 && got.Fence() != f {
		// The hold's fence, by the model: the token's grant (a late
		// request of its acquire may have got it a new one).
		w.ck.failed2(h.name, fmt.Sprintf("(c) %s resumed %v with fence %d, want its hold's %d", w.who, h, got.Fence(), f))
	}
	h2 := &simHeld{who: w.who, name: h.name, mode: got.Mode(), fence: got.Fence(), resumed: true, delay: s.delay, maxHold: maxHold,
		minHold: h.minHold, extra: s.delay, lease: got, epoch: min(epoch, h.epoch)}
	w.ck.resumed(h)
	w.ck.add(h2)
	hd.x, hd.hs, hd.release = got, []*simHeld{h2}, got.Release
	return true
}

// multi takes two names with a Multi and holds them.
func (w *simWorker) multi(s *simStep) {
	i := w.rng.IntN(len(simNames))
	j := (i + 1 + w.rng.IntN(len(simNames)-1)) % len(simNames)
	names := []string{simNames[i], simNames[j]}
	m := w.p.l.Multi(names, s.opts...)
	lock, what := m.Lock, "Multi.Lock"
	if w.rng.IntN(3) == 0 {
		lock, what = m.TryLock, "Multi.TryLock"
	}
	w.net.logf("%s %s %v ttl=%v auto=%v maxHold=%v ctx ends %.3fs", w.who, what, names, s.ttl, s.auto, s.hold, s.ctxEnd.Sub(w.net.start).Seconds())
	epoch := w.net.epoch()
	ml, err := lock(s.ctx)
	w.ck.returned(w.who, names[0], what+" "+names[0]+","+names[1], s.ctxEnd, w.p.opTimeout, err)
	if err != nil {
		return
	}
	var hs []*simHeld
	for _, n := range ml.Names() {
		h := &simHeld{who: w.who, name: n, mode: dlock.ModeMutex, multi: true, fence: ml.Fence(n), maxHold: s.hold, minHold: s.min, extra: s.delay, lease: ml, epoch: epoch}
		w.ck.add(h)
		hs = append(hs, h)
	}
	w.hold(&simHolding{x: ml, hs: hs, release: ml.Release, shortest: s.ttl}, s.ttl, s.auto, func() {})
}

// hold runs a few holder steps on hd, then releases it (or, when it does
// not renew itself, sometimes abandons it).
func (w *simWorker) hold(hd *simHolding, ttl time.Duration, auto bool, reenter func()) {
	r := w.rng
	act := func() {
		for _, h := range hd.hs {
			w.ck.action(h)
		}
	}
	for range 1 + r.IntN(4) {
		if w.ck.failing() {
			break
		}
		act()
		x, hs := hd.x, hd.hs
		switch k := r.IntN(6); {
		case k == 5 && hd.restart != nil && r.IntN(2) == 0:
			if !hd.restart() {
				return
			}
		case k < 2 && w.net.prof.extends > 0:
			if k == 0 || w.net.prof.extends < 2 {
				ttl := w.extendTTL(x)
				hd.shortest = min(hd.shortest, ttl)
				w.extend(x, hs[0], ttl, w.extendTimeout())
				break
			}
			// Two extensions with different TTLs at once.
			a, b := w.extendTTL(x), w.extendTTL(x)
			hd.shortest = min(hd.shortest, a, b)
			ta, tb := w.extendTimeout(), w.extendTimeout()
			var wg sync.WaitGroup
			wg.Go(func() { w.extend(x, hs[0], a, ta) })
			w.extend(x, hs[0], b, tb)
			wg.Wait()
		case k == 2:
			if r.Float64() < w.net.prof.stall {
				d := ttl + time.Duration(r.Int64N(int64(ttl)))
				w.net.logf("%s stalls %v holding %s fence=%d", w.who, d, hs[0].name, hs[0].fence)
				time.Sleep(d)
			}
		case k == 3:
			reenter()
		default:
			time.Sleep(time.Duration(r.Int64N(int64(ttl / 2))))
		}
	}
	act()
	hs := hd.hs
	if !auto && r.IntN(8) == 0 {
		w.net.logf("%s abandons %s fence=%d", w.who, hs[0].name, hs[0].fence)
		return
	}
	for _, h := range hs {
		w.ck.releasing(h)
	}
	err := hd.release(w.bg())
	w.net.logf("%s released %s fence=%d: %v", w.who, hs[0].name, hs[0].fence, err)
}

// extendTTL picks the TTL of an extension of x: one longer than its
// current TTL, or any with the profile's shrink chance (a shorter one makes
// the lease lie until its reply comes: it would be most rounds' first
// failure).
func (w *simWorker) extendTTL(x simHoldable) time.Duration {
	if w.rng.Float64() < w.net.prof.shrink {
		return w.pick(simExtends)
	}
	var longer []time.Duration
	for _, d := range simExtends {
		if d > x.TTL() {
			longer = append(longer, d)
		}
	}
	if len(longer) == 0 {
		return simExtends[len(simExtends)-1]
	}
	return w.pick(longer)
}

func (w *simWorker) extendTimeout() time.Duration {
	return time.Duration(50+w.rng.IntN(500)) * time.Millisecond
}

// extend extends x to ttl under a deadline of timeout.
func (w *simWorker) extend(x simHoldable, h *simHeld, ttl, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(w.bg(), timeout)
	defer cancel()
	w.net.logf("%s Extend(%v) %s fence=%d tok=%s", w.who, ttl, h.name, h.fence, short(x.Token()))
	err := x.Extend(ctx, ttl)
	w.net.logf("%s Extend(%v) %s fence=%d: %v, TTL now %v", w.who, ttl, h.name, h.fence, err, x.TTL())
	w.ck.action(h)
}

// reenter takes the reentrant lock re again with a ctx that carries its
// holder's lease outer (h), holds the re-entry briefly, and releases it.
func (w *simWorker) reenter(re *dlock.Reentrant, outer *dlock.Lease, h *simHeld) {
	end := time.Now().Add(200 * time.Millisecond)
	ctx, cancel := context.WithDeadline(dlock.ContextWithLease(w.bg(), outer), end)
	defer cancel()
	in, err := re.Lock(ctx)
	w.ck.returned(w.who, h.name, "Reentrant.Lock (again) "+h.name, end, w.p.opTimeout, err)
	if err != nil {
		return
	}
	hin := &simHeld{who: w.who, name: h.name, mode: in.Mode(), fence: in.Fence(), reentry: in.Fence() == outer.Fence(), delay: h.delay, maxHold: h.maxHold, extra: h.extra, lease: in, epoch: h.epoch}
	w.ck.add(hin)
	w.ck.action(hin)
	time.Sleep(time.Duration(w.rng.Int64N(int64(50 * time.Millisecond))))
	w.ck.releasing(hin)
	err = in.Release(w.bg())
	w.net.logf("%s released re-entry %s: %v", w.who, h.name, err)
}
