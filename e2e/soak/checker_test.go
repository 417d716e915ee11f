package soak

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

// window is how long finished holds and grants are kept for comparison
// with later ones. Every hold is shorter (TTLs and holds of a few seconds,
// waits of at most waitMax) and every acquire call returns within it.
const window = int64(60e9)

// hold is one grant's valid critical section: from the acquire's return to
// the earlier of leaving the section and the end of the lease's validity as
// its holder knew it (TTL from the acquire's send, extended by confirmed
// renewals). Both ends are conservative, so an overlap of two holds is one
// the store allowed, not one a slow holder made.
type hold struct {
	name, holder, mode string
	limit              int
	start, end         int64 // CLOCK_MONOTONIC (wire.Now)
}

func exclusive(mode string) bool { return mode != "read" && mode != "semaphore" }

// conflict reports whether two holds of one name by different holders may
// not overlap: shared kinds coexist only with their own kind.
func conflict(a, b hold) bool {
	if a.holder == b.holder {
		return false
	}
	return exclusive(a.mode) || exclusive(b.mode) || a.mode != b.mode
}

type grantRec struct {
	invoke, ret, fence int64
	excl               bool
	who                string
	kind               string
	// unreleased: its holder's release was not confirmed (the store did not
	// answer), so the hold may live on until its TTL and the same owner's
	// next reentrant acquire re-enters it, with its fence.
	unreleased bool
}

// reentry reports whether g may share p's fence: g re-entered p's hold,
// whose release was not confirmed.
func reentry(p, g grantRec) bool {
	return p.kind == "reentrant" && g.kind == "reentrant" && p.who == g.who && p.unreleased && p.fence == g.fence
}

type nameLog struct {
	done   []hold
	grants []grantRec
	floor  int64 // highest fence of a grant dropped from grants
}

// checker checks holds and grants online, keeping only a window of history
// per name, so its memory does not grow with the run.
type checker struct {
	mu      sync.Mutex
	names   map[string]*nameLog
	active  atomic.Int64 // holds in their section now
	grants  atomic.Int64
	holdsN  int64
	empty   int64 // grants whose validity had ended by the time they returned
	long    int64 // holds or acquires longer than the window (not checked)
	overlap int64
	semOver int64
	dups    int64
	order   int64
	// reentries: grants that re-entered a hold whose release was not confirmed
	reentries int64
	samples   []string
}

func newChecker() *checker { return &checker{names: map[string]*nameLog{}} }

func (c *checker) log(name string) *nameLog {
	n := c.names[name]
	if n == nil {
		n = &nameLog{}
		c.names[name] = n
	}
	return n
}

func (c *checker) sample(format string, args ...any) {
	if len(c.samples) < 20 {
		c.samples = append(c.samples, fmt.Sprintf(format, args...))
	}
}

// granted checks a grant's fence against every grant of the name that
// returned before it was asked for: an exclusive grant's fence must be
// higher than all of them, a shared one's not lower; and no two exclusive
// grants share a fence.
func (c *checker) granted(name string, g grantRec) {
	c.grants.Add(1)
	c.active.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.ret-g.invoke > window/2 {
		c.long++
		return
	}
	n := c.log(name)
	now := wire.Now()
	kept := n.grants[:0]
	for _, p := range n.grants {
		if p.ret < now-window {
			n.floor = max(n.floor, p.fence)
			continue
		}
		kept = append(kept, p)
	}
	n.grants = kept
	if g.fence < n.floor || (g.excl && g.fence == n.floor) {
		c.order++
		c.sample("%s: %s grant fence %d not above a fence %d granted over a minute before", name, g.who, g.fence, n.floor)
	}
	for _, p := range n.grants {
		if reentry(p, g) {
			c.reentries++
			continue
		}
		if g.excl && p.excl && p.fence == g.fence {
			c.dups++
			c.sample("%s: %s (%s) and %s (%s) both granted fence %d", name, p.who, p.kind, g.who, g.kind, g.fence)
		}
		if p.ret < g.invoke && (g.fence < p.fence || (g.excl && g.fence == p.fence)) {
			c.order++
			c.sample("%s: %s (%s) granted fence %d after %s's (%s) %d had returned", name, g.who, g.kind, g.fence, p.who, p.kind, p.fence)
		}
		if g.ret < p.invoke && (p.fence < g.fence || (p.excl && p.fence == g.fence)) {
			c.order++
			c.sample("%s: %s (%s) granted fence %d after %s's (%s) %d had returned", name, p.who, p.kind, p.fence, g.who, g.kind, g.fence)
		}
	}
	n.grants = append(n.grants, g)
}

// unreleased marks who's reentrant grant of name with fence as one whose
// release the store did not confirm.
func (c *checker) unreleased(name, who string, fence int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.log(name)
	for i := range n.grants {
		if p := &n.grants[i]; p.kind == "reentrant" && p.who == who && p.fence == fence {
			p.unreleased = true
		}
	}
}

// finished checks a hold against the finished holds of its name it
// overlaps (every pair is checked by whichever finishes last) and, for a
// semaphore, that no point had more holders than permits.
func (c *checker) finished(h hold) {
	c.active.Add(-1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdsN++
	if h.end <= h.start {
		c.empty++
		return
	}
	if h.end-h.start > window/2 {
		c.long++
		return
	}
	n := c.log(h.name)
	now := wire.Now()
	kept := n.done[:0]
	for _, o := range n.done {
		if o.end >= now-window {
			kept = append(kept, o)
		}
	}
	n.done = append(kept, h) //nolint:gocritic // appendAssign: kept shares n.done's array (filter in place)
	var sem []hold
	for _, o := range n.done[:len(n.done)-1] {
		if h.start >= o.end || o.start >= h.end {
			continue
		}
		if conflict(h, o) {
			c.overlap++
			c.sample("%s: %s %s [%d,%d] overlaps %s %s [%d,%d] by %.1fms", h.name, h.holder, h.mode, h.start, h.end,
				o.holder, o.mode, o.start, o.end, float64(min(h.end, o.end)-max(h.start, o.start))/1e6)
		}
		if h.mode == "semaphore" && o.mode == "semaphore" {
			sem = append(sem, o)
		}
	}
	if h.mode != "semaphore" || len(sem) < h.limit {
		return
	}
	sem = append(sem, h)
	for _, p := range sem {
		in := 0
		for _, o := range sem {
			if o.start <= p.start && p.start < o.end {
				in++
			}
		}
		if in > h.limit {
			c.semOver++
			c.sample("%s: %d semaphore holders at once, limit %d", h.name, in, h.limit)
			return
		}
	}
}

// forget drops the kept history (at the end, before the heap is measured).
func (c *checker) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = map[string]*nameLog{}
}
