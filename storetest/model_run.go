package storetest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"pgregory.net/rapid"
)

// ModelConfig tunes [RunModel].
type ModelConfig struct {
	// VirtualTime runs every sequence in a testing/synctest bubble, so that
	// time passes exactly as the sequence says and expiry is checked to the
	// nanosecond. Only for a store whose only clock is time.Now and that
	// starts no goroutines (store/memory).
	VirtualTime bool
	// Tolerance is how far from the TTL, on the test's clock, the store may
	// judge a hold or queue place expired: the clock reading of a server
	// (rounded to milliseconds) or of a store's own reaper. Default 50ms.
	Tolerance time.Duration
	// ReentrantApart lets the acquisitions of a reentrant hold expire
	// apart: each anywhere between its own TTL and the hold's latest
	// expiry (store/etcd leaves the owner's other acquisitions alone on a
	// re-entry; store/postgres pushes them out but not the new one). The
	// memory and Valkey stores give the hold one expiry, pushed out, never
	// in, which the model checks exactly without this option.
	ReentrantApart bool
	// OneQueue lets the store keep one queue for the waiters of every
	// pattern (store/zookeeper): a queued waiter of one pattern may keep out
	// newcomers of another, a fair waiter's Position may count the writer
	// intents ahead of it, and a fair Acquire may leave a free name to an
	// earlier waiter of another pattern.
	OneQueue bool
	// LazyHandoff lets a free name's fair queue wait even at a fair
	// Acquire by a caller that is not queued (store/postgres).
	LazyHandoff bool
	// Modes, when set, restricts the generated requests to these modes
	// (and the ones the store supports); NoQueue leaves out fair and writer
	// queue places. For stores whose divergences from the model are
	// reported and not fixed yet.
	Modes   []store.Mode
	NoQueue bool
	// Budget bounds the time spent generating new sequences; shrinking a
	// failure may take longer. Default 20s, or 2m with DLOCK_LONG set.
	Budget time.Duration
}

// modelLimit is the semaphore limit of the model's requests.
const modelLimit = 2

// modelNames is how many names a sequence uses.
const modelNames = 2

// RunModel checks the store h.New makes against a reference model of the
// lock semantics: rapid (pgregory.net/rapid) generates random sequences of
// Acquire (every supported mode; retries by the same token, reentrant
// re-entry by the same owner, fair and writer queue places), Extend,
// Release and time passing on two names, with short and long TTLs, runs
// them one at a time on one store and checks every reply (Acquired, Held,
// fair Position, reentrant Count, ErrNotHeld, fences strictly increasing
// per name for every new exclusive grant and permit, a retried Acquire's
// fence unchanged) against the model. At the end of each sequence it
// releases every token and checks that each name is then free in every
// mode (no queue place or intent left behind). A failure is shrunk by
// rapid to a short sequence, printed as one line per operation with the
// store's reply.
//
// Time on the store is only known within a window (see ModelConfig): an
// operation whose outcome depends on an expiry inside the window may go
// either way, and the model follows the reply.
func RunModel(t *testing.T, h Harness, cfg ModelConfig) {
	t.Helper()
	if h.New == nil {
		t.Fatal("storetest: Harness.New is nil")
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 50 * time.Millisecond
	}
	if cfg.Budget == 0 {
		cfg.Budget = 20 * time.Second
		if os.Getenv("DLOCK_LONG") != "" {
			cfg.Budget = 2 * time.Minute
		}
	}
	moreChecks.Do(func() {
		set := os.Getenv("RAPID_CHECKS") != ""
		flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
		if !set && flag.Lookup("rapid.checks") != nil {
			flag.Set("rapid.checks", "50000") // the budget ends the run first; calls after it return at once
		}
		if os.Getenv("RAPID_NOFAILFILE") == "" && flag.Lookup("rapid.nofailfile") != nil {
			flag.Set("rapid.nofailfile", "true") // no files in the store's package; the seed reproduces
		}
	})
	var modes []store.Mode
	for _, m := range allModes {
		if h.supports(m) && (cfg.Modes == nil || slices.Contains(cfg.Modes, m)) {
			modes = append(modes, m)
		}
	}
	s := h.New(t)
	var failed atomic.Bool
	var first string // the first failing sequence, as run
	defer func() {
		if t.Failed() && first != "" {
			// On a server store the replay rapid shrinks may not fail
			// again (timing): this is the failure as it happened.
			t.Logf("model: the first failing sequence, as run:\n%s", first)
		}
	}()
	start := time.Now()
	// The budget is kept on the real clock (a synctest bubble has its own):
	// once it is spent, new sequences stop at once and running ones stop
	// generating operations, unless a failure is being shrunk.
	var spent atomic.Bool
	budget := time.AfterFunc(cfg.Budget, func() { spent.Store(true) })
	defer budget.Stop()
	over := func() bool { return spent.Load() && !failed.Load() }
	runs, ops, worlds, unavailable := 0, 0, 0, 0
	rapid.Check(t, func(rt *rapid.T) {
		defer func() {
			if r := recover(); r != nil {
				failed.Store(true)
				panic(r)
			}
		}()
		if over() {
			return
		}
		runs++
		m := &modelRun{rt: rt, s: s, cfg: cfg, modes: modes, first: &first, over: over}
		if cfg.VirtualTime {
			rapid.SyncTest(rt, func(rt *rapid.T) {
				m.rt = rt
				m.run()
			})
		} else {
			m.run()
		}
		ops += m.ops
		unavailable += m.unavailable
		worlds = max(worlds, m.maxWorlds)
	})
	t.Logf("model: %d sequences, %d store operations (%d ErrUnavailable) in %v; at most %d possible states at once", runs, ops, unavailable, time.Since(start).Round(time.Millisecond), worlds)
}

var (
	moreChecks sync.Once
	digits     = regexp.MustCompile(`[0-9]+(\.[0-9]+)?[a-zµ]*`)
)

type modelTok struct {
	tok   string
	name  int
	mode  store.Mode
	owner string
}

type modelRun struct {
	rt     *rapid.T
	s      store.Store
	cfg    ModelConfig
	modes  []store.Mode
	ctx    context.Context
	start  time.Time
	names  [modelNames]string
	maxFen [modelNames]int64
	toks   []modelTok
	worlds []mWorld
	ops    int
	lines  []string
	first  *string // where the first failing run's lines go
	over   func() bool
	// unavailable counts operations that failed with ErrUnavailable.
	unavailable int
	// maxWorlds is the most possible states the model kept at once.
	maxWorlds int
}

func (m *modelRun) run() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m.ctx = ctx
	m.start = time.Now()
	for i := range m.names {
		m.names[i] = fmt.Sprintf("storetest-%s-%d-model%d", runID, nameSeq.Add(1), i)
	}
	m.worlds = []mWorld{make(mWorld, modelNames)}
	ttls, qttls, sleeps := realTTLs, realTTLs, realSleeps
	if m.cfg.VirtualTime {
		ttls, qttls, sleeps = virtualTTLs, virtualTTLs, virtualSleeps
	}
	pickToken := func(rt *rapid.T) (modelTok, bool) {
		if len(m.toks) == 0 {
			return modelTok{}, false
		}
		return m.toks[rapid.IntRange(0, len(m.toks)-1).Draw(rt, "token")], true
	}
	act := func(f func(*rapid.T)) func(*rapid.T) {
		return func(rt *rapid.T) {
			if !m.over() {
				f(rt)
			}
		}
	}
	m.rt.Repeat(map[string]func(*rapid.T){
		"acquire": act(func(rt *rapid.T) { m.do(m.drawAcquire(rt, ttls, qttls)) }),
		// Twice the weight: most of what can go wrong starts with one.
		"acquire again": act(func(rt *rapid.T) { m.do(m.drawAcquire(rt, ttls, qttls)) }),
		"extend": act(func(rt *rapid.T) {
			if tk, ok := pickToken(rt); ok {
				m.do(mOp{kind: opExtend, name: tk.name, tok: tk.tok, mode: tk.mode, owner: tk.owner, ttl: rapid.SampledFrom(ttls).Draw(rt, "ttl")})
			}
		}),
		"release": act(func(rt *rapid.T) {
			if tk, ok := pickToken(rt); ok {
				m.do(mOp{kind: opRelease, name: tk.name, tok: tk.tok, mode: tk.mode, owner: tk.owner})
			}
		}),
		"sleep": act(func(rt *rapid.T) { m.do(mOp{kind: opSleep, sleep: rapid.SampledFrom(sleeps).Draw(rt, "sleep")}) }),
	})
	// Give everything back, then every name must be free in every mode.
	for _, tk := range m.toks {
		m.do(mOp{kind: opRelease, name: tk.name, tok: tk.tok, mode: tk.mode, owner: tk.owner})
	}
	if !emptyWorlds(m.worlds) {
		m.keepFirst()
		m.rt.Fatalf("model: state left after releasing every token: %s", describeWorld(m.worlds[0]))
	}
	for i := range m.names {
		for _, md := range m.modes {
			tk := modelTok{tok: newToken(), name: i, mode: md}
			if md == store.ModeReentrant {
				tk.owner = "probe"
			}
			m.do(mOp{kind: opAcquire, name: i, tok: tk.tok, mode: md, owner: tk.owner, ttl: 20 * time.Second})
			m.do(mOp{kind: opRelease, name: i, tok: tk.tok, mode: md, owner: tk.owner})
		}
	}
}

var (
	virtualTTLs   = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second, time.Minute}
	virtualSleeps = []time.Duration{time.Millisecond, 100 * time.Millisecond, 299 * time.Millisecond, 300 * time.Millisecond, time.Second}
	realTTLs      = []time.Duration{120 * time.Millisecond, 20 * time.Second} // within a ZooKeeper session
	realSleeps    = []time.Duration{time.Millisecond, 5 * time.Millisecond, 60 * time.Millisecond, 200 * time.Millisecond}
	modelOwners   = []string{"owner-a", "owner-b"}
)

func (m *modelRun) drawAcquire(rt *rapid.T, ttls, qttls []time.Duration) mOp {
	name := rapid.IntRange(0, modelNames-1).Draw(rt, "name")
	var mine []modelTok
	for _, tk := range m.toks {
		if tk.name == name {
			mine = append(mine, tk)
		}
	}
	var tk modelTok
	if len(mine) > 0 && rapid.IntRange(0, 3).Draw(rt, "retry") == 0 {
		tk = mine[rapid.IntRange(0, len(mine)-1).Draw(rt, "retried")]
	} else {
		tk = modelTok{tok: newToken(), name: name, mode: rapid.SampledFrom(m.modes).Draw(rt, "mode")}
		if tk.mode == store.ModeReentrant {
			tk.owner = rapid.SampledFrom(modelOwners).Draw(rt, "owner")
		}
		m.toks = append(m.toks, tk)
	}
	op := mOp{kind: opAcquire, name: name, tok: tk.tok, mode: tk.mode, owner: tk.owner, ttl: rapid.SampledFrom(ttls).Draw(rt, "ttl")}
	if (tk.mode == store.ModeFair || tk.mode == store.ModeWrite) && !m.cfg.NoQueue {
		if op.queue = rapid.Bool().Draw(rt, "queue"); op.queue {
			op.qttl = rapid.SampledFrom(qttls).Draw(rt, "queueTTL")
		}
	}
	return op
}

func (m *modelRun) request(op mOp) store.Request {
	req := store.Request{Name: m.names[op.name], Token: op.tok, TTL: op.ttl, Mode: op.mode, Owner: op.owner, Queue: op.queue, QueueTTL: op.qttl}
	if op.mode == store.ModeSemaphore {
		req.Limit = modelLimit
	}
	if req.TTL == 0 {
		req.TTL = 20 * time.Second // Release: unused
	}
	return req
}

// do runs op on the store and keeps the worlds that allow its reply.
func (m *modelRun) do(op mOp) {
	if op.kind == opSleep {
		time.Sleep(op.sleep)
		m.logf("%v", op)
		return
	}
	m.ops++
	req := m.request(op)
	o := mObs{maxFen: m.maxFen[op.name], limit: modelLimit, apart: m.cfg.ReentrantApart, oneQ: m.cfg.OneQueue}
	o.s = time.Since(m.start)
	var reply string
	switch op.kind {
	case opAcquire:
		o.grant, o.err = m.s.Acquire(m.ctx, req)
		reply = fmt.Sprintf("%+v, %v", o.grant, o.err)
	case opExtend:
		o.err = m.s.Extend(m.ctx, []store.Request{req})[0]
		reply = fmt.Sprint(o.err)
	case opRelease:
		o.err = m.s.Release(m.ctx, req)
		reply = fmt.Sprint(o.err)
	}
	o.e = time.Since(m.start)
	if errors.Is(o.err, store.ErrUnavailable) {
		// Allowed now and then (a loaded machine, a redlock lease that ran
		// out while acquiring), never as a habit.
		if m.unavailable++; m.unavailable > 3 && m.unavailable*5 > m.ops {
			m.keepFirst()
			m.rt.Fatalf("model: %d of %d operations failed with ErrUnavailable, the last: %v", m.unavailable, m.ops, o.err)
		}
	}
	m.logf("%v = %s  [%v..%v]", op, reply, o.s, o.e)
	if o.grant.Acquired && op.mode != store.ModeRead {
		// A reader's fence is the current fence, at least the last
		// exclusive one; later grants are compared with those only.
		m.maxFen[op.name] = max(m.maxFen[op.name], o.grant.Fence)
	}
	tol := m.cfg.Tolerance
	if m.cfg.VirtualTime {
		tol = 0
	}
	var next []mWorld
	seen := map[string]bool{}
	var why []string
	keep := func(w mWorld) {
		if k := w.key(); !seen[k] {
			seen[k] = true
			next = append(next, w)
		}
	}
	for _, w := range m.worlds {
		for _, x := range expire(w, op.name, o.s, o.e, tol) {
			// A fair Acquire serves the fair queue first; other
			// operations may leave a free name's queue waiting.
			forced := op.mode == store.ModeFair && op.kind == opAcquire && !m.cfg.OneQueue && !m.cfg.LazyHandoff
			for _, y := range promotions(x, op.name, forced, o.e) {
				if errors.Is(o.err, store.ErrUnavailable) {
					// The store failed: an Acquire undone (redlock's undo
					// releases the token, even a hold it had before the
					// retry), an Extend or a Release done or not.
					keep(y)
					if op.kind == opAcquire {
						rel := op
						rel.kind = opRelease
						if z, reason := step(y, rel, mObs{s: o.s, e: o.e, maxFen: o.maxFen, limit: o.limit, apart: o.apart, oneQ: o.oneQ}); reason == "" {
							keep(z)
						}
					} else {
						ok := o
						ok.err = nil
						if z, reason := step(y, op, ok); reason == "" {
							keep(z)
						}
					}
					continue
				}
				z, reason := step(y, op, o)
				if reason != "" {
					why = append(why, reason+" — in world: "+describeWorld(y))
					continue
				}
				if op.kind != opRelease {
					keep(z)
					continue
				}
				// A release may free the name for the fair queue; a fair
				// hold's release hands it to the head (a release of
				// nothing hands nothing).
				handoff := op.mode == store.ModeFair && y[op.name].findHold(op.tok) >= 0
				for _, r := range promotions(z, op.name, handoff, o.e) {
					keep(r)
				}
			}
		}
	}
	if len(next) == 0 {
		slices.Sort(why)
		why = slices.Compact(why)
		m.logf("model: %v = %s does not match the model:\n  %s", op, reply, strings.Join(why[:min(len(why), 6)], "\n  "))
		m.keepFirst()
		// rapid shrinks while the message stays the same: no tokens,
		// fences or times in it.
		reason, _, _ := strings.Cut(why[0], " — ")
		m.rt.Fatalf("model: %v %v: %s", op.kind, op.mode, digits.ReplaceAllString(reason, "N"))
	}
	if len(next) > 4096 {
		m.rt.Fatalf("model: %d possible states after %v (the model branches too much)", len(next), op)
	}
	m.worlds = next
	m.maxWorlds = max(m.maxWorlds, len(next))
}

func (m *modelRun) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	m.lines = append(m.lines, line)
	m.rt.Logf("%s", line)
}

// keepFirst records the lines of the first run that fails.
func (m *modelRun) keepFirst() {
	if *m.first == "" {
		*m.first = "    " + strings.Join(m.lines, "\n    ")
	}
}
