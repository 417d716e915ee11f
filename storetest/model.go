package storetest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// The reference model of the lock semantics that RunModel checks stores
// against (model_run.go drives it). A world is one possible state of the
// store: the holds and queue places on each name. Time on a server store is
// only known within a window (an operation runs somewhere between its call
// and its reply, and expiry is judged by the server's clock), so an
// operation whose outcome depends on an expiry near the window may go
// either way: the model keeps every world consistent with the replies seen
// so far, and a reply that no world allows is a failure. Where the Store
// contract leaves an order open (a fair lock's queue served when another
// pattern frees the name, at once or at the queue's next operation) the
// model branches the same way.

// mHold is a hold of one name: one token, or the tokens of one reentrant
// owner (the acquisitions), each with its expiry window.
type mHold struct {
	toks     []string
	los, his []time.Duration
	mode     store.Mode
	owner    string
	fence    int64 // 0: handed over, not seen yet
	minFence int64 // a handed-over fence is above this
}

// mWaiter is a queue place: a fair ticket or a writer's intent.
type mWaiter struct {
	tok      string
	ttl      time.Duration // lease length on handoff (until its claim: at most to the place's expiry)
	enq      time.Duration // when it queued (earliest)
	minFence int64
	lo, hi   time.Duration
}

type mName struct {
	holds  []mHold
	fairQ  []mWaiter
	writeQ []mWaiter
	freeLo time.Duration // earliest time the name may have become free
}

type mWorld []mName

func (w mWorld) clone() mWorld {
	c := make(mWorld, len(w))
	for i, n := range w {
		c[i] = mName{freeLo: n.freeLo, fairQ: slices.Clone(n.fairQ), writeQ: slices.Clone(n.writeQ)}
		for _, h := range n.holds {
			h.toks, h.los, h.his = slices.Clone(h.toks), slices.Clone(h.los), slices.Clone(h.his)
			c[i].holds = append(c[i].holds, h)
		}
	}
	return c
}

func (w mWorld) key() string { return fmt.Sprintf("%+v", []mName(w)) }

// family groups the modes that share one lock state: readers and writers.
func family(m store.Mode) store.Mode {
	if m == store.ModeWrite {
		return store.ModeRead
	}
	return m
}

// mOp is one generated operation.
type mOp struct {
	kind  opKind
	name  int
	tok   string
	mode  store.Mode
	owner string
	ttl   time.Duration
	queue bool
	qttl  time.Duration
	sleep time.Duration
}

type opKind uint8

const (
	opAcquire opKind = iota
	opExtend
	opRelease
	opSleep
)

func (k opKind) String() string {
	return [...]string{"Acquire", "Extend", "Release", "Sleep"}[k]
}

func (op mOp) String() string {
	switch op.kind {
	case opAcquire:
		s := fmt.Sprintf("Acquire(name%d, %s, %v, ttl %v", op.name, short(op.tok), op.mode, op.ttl)
		if op.owner != "" {
			s += ", owner " + op.owner
		}
		if op.queue {
			s += fmt.Sprintf(", queue %v", op.qttl)
		}
		return s + ")"
	case opExtend:
		return fmt.Sprintf("Extend(name%d, %s, %v, ttl %v)", op.name, short(op.tok), op.mode, op.ttl)
	case opRelease:
		return fmt.Sprintf("Release(name%d, %s, %v)", op.name, short(op.tok), op.mode)
	}
	return fmt.Sprintf("Sleep(%v)", op.sleep)
}

func short(tok string) string { return tok[:min(6, len(tok))] }

// mObs is what the store answered.
type mObs struct {
	grant  store.Grant
	err    error
	s, e   time.Duration // the call's window on the test's clock
	maxFen int64         // the highest fence seen on the name before
	limit  int
	apart  bool // ModelConfig.ReentrantApart
	oneQ   bool // ModelConfig.OneQueue
}

// expiryStatus of a window [lo, hi] at an operation running in [s, e]:
// -1 surely alive, 1 surely expired, 0 either.
func expiryStatus(lo, hi, s, e, tol time.Duration) int {
	switch {
	case e+tol < lo:
		return -1
	case s > hi+tol:
		return 1
	}
	return 0
}

// expire returns the worlds that the passing of time up to an operation in
// [s, e] may have left of w on name n: each hold and queue place that is
// near its expiry is kept in some worlds and dropped in others.
func expire(w mWorld, n int, s, e, tol time.Duration) []mWorld {
	out := []mWorld{w}
	nm := w[n]
	type ent struct {
		kind int // 0 hold, 1 fair place, 2 intent
		i, j int // j: the acquisition of hold i
		st   int
	}
	var ents []ent
	for i, h := range nm.holds {
		for j := range h.toks {
			ents = append(ents, ent{0, i, j, expiryStatus(h.los[j], h.his[j], s, e, tol)})
		}
	}
	for i, q := range nm.fairQ {
		ents = append(ents, ent{1, i, 0, expiryStatus(q.lo, q.hi, s, e, tol)})
	}
	for i, q := range nm.writeQ {
		ents = append(ents, ent{2, i, 0, expiryStatus(q.lo, q.hi, s, e, tol)})
	}
	for _, en := range ents {
		if en.st < 0 {
			continue
		}
		var next []mWorld
		for _, x := range out {
			if en.st == 0 {
				next = append(next, x)
			}
			d := x.clone()
			drop(&d[n], en.kind, en.i, en.j)
			next = append(next, d)
		}
		out = next
	}
	for _, x := range out {
		compact(&x[n])
	}
	return out
}

// drop marks an entity dropped (compact removes it), keeping indexes.
func drop(nm *mName, kind, i, j int) {
	switch kind {
	case 0:
		h := &nm.holds[i]
		h.toks[j] = ""
		if !slices.ContainsFunc(h.toks, func(t string) bool { return t != "" }) {
			nm.freeLo = max(nm.freeLo, h.los[j])
		}
	case 1:
		nm.fairQ[i].tok = ""
	case 2:
		nm.writeQ[i].tok = ""
	}
}

func compact(nm *mName) {
	for i := range nm.holds {
		h := &nm.holds[i]
		for j := len(h.toks) - 1; j >= 0; j-- {
			if h.toks[j] == "" {
				h.removeAt(j)
			}
		}
	}
	nm.holds = slices.DeleteFunc(nm.holds, func(h mHold) bool { return len(h.toks) == 0 })
	nm.fairQ = slices.DeleteFunc(nm.fairQ, func(q mWaiter) bool { return q.tok == "" })
	nm.writeQ = slices.DeleteFunc(nm.writeQ, func(q mWaiter) bool { return q.tok == "" })
}

// promote hands a free name to its fair queue's head.
func promote(nm *mName, e time.Duration) {
	if len(nm.holds) > 0 || len(nm.fairQ) == 0 {
		return
	}
	q := nm.fairQ[0]
	nm.fairQ = nm.fairQ[1:]
	from := max(nm.freeLo, q.enq)
	// Held until the waiter's TTL from the handoff, but no longer than its
	// queue deadline (the claim window) until it claims the lock.
	lo, hi := min(from+q.ttl, q.lo), min(e+q.ttl, q.hi)
	nm.holds = append(nm.holds, mHold{toks: []string{q.tok}, los: []time.Duration{lo}, his: []time.Duration{hi}, mode: store.ModeFair, minFence: q.minFence})
}

// promotions returns w with the fair queue of name n served (forced) or
// both served and not (a pattern other than the fair lock freed the name:
// the queue is served at once or at its next operation).
func promotions(w mWorld, n int, forced bool, e time.Duration) []mWorld {
	nm := w[n]
	if len(nm.holds) > 0 || len(nm.fairQ) == 0 {
		return []mWorld{w}
	}
	p := w.clone()
	promote(&p[n], e)
	if forced {
		return []mWorld{p}
	}
	return []mWorld{w, p}
}

func (h *mHold) removeAt(j int) {
	h.toks, h.los, h.his = slices.Delete(h.toks, j, j+1), slices.Delete(h.los, j, j+1), slices.Delete(h.his, j, j+1)
}

func (nm *mName) findHold(tok string) int {
	return slices.IndexFunc(nm.holds, func(h mHold) bool { return slices.Contains(h.toks, tok) })
}

func findPlace(q []mWaiter, tok string) int {
	return slices.IndexFunc(q, func(w mWaiter) bool { return w.tok == tok })
}

// heldMode is the mode a refusal by nm's holds reports.
func (nm *mName) heldMode() (store.Mode, bool) {
	for _, h := range nm.holds {
		if h.mode == store.ModeWrite {
			return store.ModeWrite, true
		}
	}
	if len(nm.holds) > 0 {
		return nm.holds[0].mode, true
	}
	return 0, false
}

func (nm *mName) count(m store.Mode) int {
	n := 0
	for _, h := range nm.holds {
		if h.mode == m {
			n++
		}
	}
	return n
}

// enqueue adds or refreshes tok's place in q and returns its index.
func enqueue(q *[]mWaiter, op mOp, o mObs) int {
	if i := findPlace(*q, op.tok); i >= 0 {
		// A place refreshed with a shorter QueueTTL may keep its longer
		// lease (etcd leases cannot shrink): the contract is silent.
		w := &(*q)[i]
		w.lo, w.hi, w.ttl = min(w.lo, o.s+op.qttl), max(w.hi, o.e+op.qttl), op.ttl
		return i
	}
	*q = append(*q, mWaiter{tok: op.tok, ttl: op.ttl, enq: o.s, minFence: o.maxFen, lo: o.s + op.qttl, hi: o.e + op.qttl})
	return len(*q) - 1
}

// step applies op, answered by o, to world w (already expired and
// promoted for the operation's time) and returns the world after it, or
// why the reply is not what w predicts.
func step(w mWorld, op mOp, o mObs) (mWorld, string) {
	w = w.clone()
	nm := &w[op.name]
	switch op.kind {
	case opExtend:
		i := nm.findHold(op.tok)
		if i < 0 {
			if o.err != store.ErrNotHeld {
				return nil, fmt.Sprintf("Extend = %v, want ErrNotHeld (the token holds nothing)", o.err)
			}
			return w, ""
		}
		if o.err != nil {
			return nil, fmt.Sprintf("Extend = %v, want nil (the token holds a %v lock)", o.err, nm.holds[i].mode)
		}
		refresh(&nm.holds[i], op, o, o.apart)
		return w, ""
	case opRelease:
		if o.err != nil && o.err != store.ErrNotHeld {
			return nil, fmt.Sprintf("Release = %v, want nil or ErrNotHeld", o.err)
		}
		if i := nm.findHold(op.tok); i >= 0 {
			if o.err != nil {
				return nil, fmt.Sprintf("Release = %v, want nil (the token holds a %v lock)", o.err, nm.holds[i].mode)
			}
			h := &nm.holds[i]
			h.removeAt(slices.Index(h.toks, op.tok))
			if len(h.toks) == 0 {
				nm.holds = slices.Delete(nm.holds, i, i+1)
				nm.freeLo = max(nm.freeLo, o.s)
			}
			return w, ""
		}
		for _, q := range []*[]mWaiter{&nm.fairQ, &nm.writeQ} {
			if i := findPlace(*q, op.tok); i >= 0 {
				if o.err != nil {
					return nil, fmt.Sprintf("Release = %v, want nil (the token is queued)", o.err)
				}
				*q = slices.Delete(*q, i, i+1)
				return w, ""
			}
		}
		if o.err == nil {
			return nil, "Release = nil, want ErrNotHeld (the token holds nothing and is not queued)"
		}
		return w, ""
	}
	return acquire(w, op, o)
}

// refresh renews op.tok's acquisition of h to op.ttl. Whether a shorter
// TTL cuts a lease short is left open by the contract (etcd leases cannot
// shrink; ZooKeeper's TTLs are pushed out, never in), so the new expiry is
// anywhere from the new TTL to the later of the old and the new one. A
// reentrant hold has one expiry, pushed out, never in, unless apart.
func refresh(h *mHold, op mOp, o mObs, apart bool) {
	j := slices.Index(h.toks, op.tok)
	h.los[j], h.his[j] = o.s+op.ttl, max(h.his[j], o.e+op.ttl)
	if h.mode == store.ModeReentrant && apart {
		// Apart: each acquisition expires between its own TTL and the
		// hold's latest expiry (the others may or may not be pushed out).
		hi := slices.Max(h.his)
		for k := range h.toks {
			h.his[k] = hi
		}
		return
	}
	if h.mode == store.ModeReentrant {
		lo, hi := slices.Max(h.los), slices.Max(h.his)
		lo = max(lo, o.s+op.ttl)
		for k := range h.toks {
			h.los[k], h.his[k] = lo, hi
		}
	}
}

func acquire(w mWorld, op mOp, o mObs) (mWorld, string) {
	nm := &w[op.name]
	g := o.grant
	if o.err != nil {
		return nil, fmt.Sprintf("Acquire error %v, want a grant or a refusal", o.err)
	}
	slack := 0
	if o.oneQ {
		slack = len(nm.writeQ) // writer intents may queue ahead of fair waiters
	}
	refuse := func(held store.Mode, pos int) (mWorld, string) {
		if g.Acquired {
			return nil, fmt.Sprintf("Acquire granted (fence %d), want a refusal with Held %v", g.Fence, held)
		}
		if g.Held != held {
			return nil, fmt.Sprintf("Acquire refused with Held %v, want %v", g.Held, held)
		}
		if pos >= 0 && (g.Position < pos || g.Position > pos+slack) {
			return nil, fmt.Sprintf("Acquire refused at Position %d, want %d", g.Position, pos)
		}
		return w, ""
	}
	grantNew := func(h mHold) (mWorld, string) {
		if !g.Acquired {
			return nil, fmt.Sprintf("Acquire refused (Held %v), want a grant", g.Held)
		}
		if op.mode == store.ModeRead {
			if g.Fence < o.maxFen || g.Fence <= 0 {
				return nil, fmt.Sprintf("read grant fence %d, want at least %d (the last exclusive or permit fence)", g.Fence, max(o.maxFen, 1))
			}
		} else if g.Fence <= o.maxFen {
			return nil, fmt.Sprintf("%v grant fence %d, want > %d (every earlier fence of the name but readers')", op.mode, g.Fence, o.maxFen)
		}
		if op.mode == store.ModeReentrant && g.Count != 1 {
			return nil, fmt.Sprintf("new reentrant grant Count %d, want 1", g.Count)
		}
		h.toks, h.mode, h.owner, h.fence = []string{op.tok}, op.mode, op.owner, g.Fence
		h.los, h.his = []time.Duration{o.s + op.ttl}, []time.Duration{o.e + op.ttl}
		nm.holds = append(nm.holds, h)
		return w, ""
	}
	// The caller holds already: a retry, or a handed-over fair lock.
	if i := nm.findHold(op.tok); i >= 0 {
		h := &nm.holds[i]
		if !g.Acquired {
			return nil, fmt.Sprintf("Acquire by the holding token refused (Held %v), want the same grant", g.Held)
		}
		if h.fence == 0 {
			if g.Fence <= h.minFence {
				return nil, fmt.Sprintf("handed-over fair grant fence %d, want > %d (fences before the waiter queued)", g.Fence, h.minFence)
			}
			h.fence = g.Fence
		} else if g.Fence != h.fence {
			return nil, fmt.Sprintf("retried Acquire fence %d, want %d (the hold's)", g.Fence, h.fence)
		}
		if h.mode == store.ModeReentrant && g.Count != len(h.toks) {
			return nil, fmt.Sprintf("retried reentrant Acquire Count %d, want %d", g.Count, len(h.toks))
		}
		refresh(h, op, o, o.apart)
		return w, ""
	}
	// Another pattern holds the name.
	for _, h := range nm.holds {
		if family(h.mode) != family(op.mode) {
			held, _ := nm.heldMode()
			pos := -1
			if op.queue && op.mode == store.ModeFair {
				pos = enqueue(&nm.fairQ, op, o)
			}
			if op.queue && op.mode == store.ModeWrite {
				enqueue(&nm.writeQ, op, o)
			}
			return refuse(held, pos)
		}
	}
	if o.oneQ && !g.Acquired && len(nm.fairQ)+len(nm.writeQ) > 0 {
		// One queue for every pattern: a waiter of another pattern keeps a
		// newcomer out; the caller keeps or takes its own place.
		if op.queue && op.mode == store.ModeFair {
			enqueue(&nm.fairQ, op, o)
		}
		if op.queue && op.mode == store.ModeWrite {
			enqueue(&nm.writeQ, op, o)
		}
		return w, ""
	}
	switch op.mode {
	case store.ModeMutex, store.ModeElection:
		// An election is a mutex that keeps the leader's value.
		if len(nm.holds) > 0 {
			return refuse(op.mode, -1)
		}
	case store.ModeReentrant:
		if len(nm.holds) > 0 {
			h := &nm.holds[0]
			if h.owner != op.owner {
				return refuse(store.ModeReentrant, -1)
			}
			if !g.Acquired {
				return nil, fmt.Sprintf("re-entry by owner %s refused (Held %v), want a grant", op.owner, g.Held)
			}
			if g.Fence != h.fence {
				return nil, fmt.Sprintf("re-entry fence %d, want %d (the hold's)", g.Fence, h.fence)
			}
			h.toks = append(h.toks, op.tok)
			h.los, h.his = append(h.los, o.s+op.ttl), append(h.his, o.e+op.ttl)
			if g.Count != len(h.toks) {
				return nil, fmt.Sprintf("re-entry Count %d, want %d", g.Count, len(h.toks))
			}
			refresh(h, op, o, o.apart)
			return w, ""
		}
	case store.ModeRead:
		if held, ok := nm.heldMode(); ok && held == store.ModeWrite {
			return refuse(store.ModeWrite, -1)
		}
		if len(nm.writeQ) > 0 {
			return refuse(store.ModeRead, -1) // a waiting writer keeps new readers out
		}
	case store.ModeWrite:
		ahead := len(nm.writeQ) > 0 && nm.writeQ[0].tok != op.tok
		if len(nm.holds) > 0 || ahead {
			held, ok := nm.heldMode()
			if !ok {
				held = store.ModeWrite // refused by its own queue: the request's mode
			}
			if op.queue {
				enqueue(&nm.writeQ, op, o)
			}
			return refuse(held, -1)
		}
		if i := findPlace(nm.writeQ, op.tok); i >= 0 {
			nm.writeQ = slices.Delete(nm.writeQ, i, i+1)
		}
	case store.ModeFair:
		if len(nm.holds) > 0 || len(nm.fairQ) > 0 {
			pos := -1
			if op.queue {
				pos = enqueue(&nm.fairQ, op, o)
			}
			return refuse(store.ModeFair, pos)
		}
	case store.ModeSemaphore:
		if nm.count(store.ModeSemaphore) >= o.limit {
			return refuse(store.ModeSemaphore, -1)
		}
	}
	return grantNew(mHold{})
}

// empty reports whether no world has anything left on any name.
func emptyWorlds(ws []mWorld) bool {
	for _, w := range ws {
		for _, n := range w {
			if len(n.holds)+len(n.fairQ)+len(n.writeQ) > 0 {
				return false
			}
		}
	}
	return true
}

func describeWorld(w mWorld) string {
	var b strings.Builder
	for i, n := range w {
		fmt.Fprintf(&b, "name%d:", i)
		for _, h := range n.holds {
			var toks []string
			for j, t := range h.toks {
				toks = append(toks, fmt.Sprintf("%s until [%v, %v]", short(t), h.los[j], h.his[j]))
			}
			fmt.Fprintf(&b, " %v[%s] fence %d;", h.mode, strings.Join(toks, ", "), h.fence)
		}
		for _, q := range n.fairQ {
			fmt.Fprintf(&b, " fair-queued %s until [%v, %v];", short(q.tok), q.lo, q.hi)
		}
		for _, q := range n.writeQ {
			fmt.Fprintf(&b, " write-intent %s until [%v, %v];", short(q.tok), q.lo, q.hi)
		}
		b.WriteString(" ")
	}
	return b.String()
}
