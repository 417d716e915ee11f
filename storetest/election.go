package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// The election suite: store.ModeElection on the store (the leader's value
// kept with the hold, term = fence, store.Elector), one leader at a time
// among concurrent candidates with strictly increasing terms, a paused
// leader fenced out by its successor's term, and observers that see the
// changes in order.

func init() { register("Election", store.ModeElection, testElection) }

func electionReq(name, value string, ttl time.Duration) store.Request {
	return store.Request{Name: name, Token: newToken(), TTL: ttl, Mode: store.ModeElection, Value: value}
}

func elector(t *testing.T, s store.Store) store.Elector {
	t.Helper()
	el, ok := s.(store.Elector)
	if !ok {
		t.Fatalf("%T supports ModeElection but does not implement store.Elector", s)
	}
	return el
}

func testElection(t *testing.T, h Harness) {
	t.Run("StoreLeader", func(t *testing.T) {
		parallel(t)
		electionStoreLeader(t, h.New(t))
	})
	t.Run("OneLeaderAtATime", func(t *testing.T) {
		parallel(t)
		electionOneLeader(t, h)
	})
	t.Run("PausedLeaderFencedOut", func(t *testing.T) {
		parallel(t)
		electionPaused(t, h.New(t))
	})
	t.Run("ObserveEveryPacedChange", func(t *testing.T) {
		parallel(t)
		electionObservePaced(t, h)
	})
	t.Run("ObserveInOrder", func(t *testing.T) {
		parallel(t)
		electionObserveBurst(t, h)
	})
	t.Run("ObservePushedWhileNobodyLeads", func(t *testing.T) {
		parallel(t)
		electionObservePushed(t, h)
	})
	t.Run("ObserveExpiry", func(t *testing.T) {
		parallel(t)
		electionObserveExpiry(t, h.New(t))
	})
	t.Run("ResignAndCampaign", func(t *testing.T) {
		parallel(t)
		electionResign(t, h.New(t))
	})
}

// electionStoreLeader checks the store's side: the leader's value and
// term, the first value kept on a retry, ErrNoLeader when nobody leads
// (also while a mutex holds the name) and after release.
func electionStoreLeader(t *testing.T, s store.Store) {
	ctx := testContext(t)
	el := elector(t, s)
	name := lockName(t)
	if ld, err := el.Leader(ctx, name); !errors.Is(err, store.ErrNoLeader) {
		t.Errorf("Leader(%q) before any campaign = %+v, %v; want ErrNoLeader", name, ld, err)
	}
	req := electionReq(name, "node-a:8080", longTTL)
	g := mustAcquire(t, s, req)
	ld, err := el.Leader(ctx, name)
	if err != nil || ld.Value != "node-a:8080" || ld.Term != g.Fence || ld.TTL <= 0 || ld.TTL > longTTL+clockSlack {
		t.Errorf("Leader(%q) = %+v, %v; want value node-a:8080, term %d, TTL in (0, %v]", name, ld, err, g.Fence, longTTL)
	}
	retry := req
	retry.Value = "other"
	if g2 := mustAcquire(t, s, retry); g2.Fence != g.Fence {
		t.Errorf("retried Acquire fence = %d, want %d (the same grant)", g2.Fence, g.Fence)
	}
	if ld, _ := el.Leader(ctx, name); ld.Value != "node-a:8080" {
		t.Errorf("Leader after a retried Acquire with another value = %q, want the first value node-a:8080", ld.Value)
	}
	other := electionReq(name, "node-b", longTTL)
	if g := mustRefuse(t, s, other); g.Held != store.ModeElection {
		t.Errorf("refusal while a leader leads: Held = %v, want election", g.Held)
	}
	mustRelease(t, s, req)
	if ld, err := el.Leader(ctx, name); !errors.Is(err, store.ErrNoLeader) {
		t.Errorf("Leader(%q) after resignation = %+v, %v; want ErrNoLeader", name, ld, err)
	}
	m := mutexReq(name, newToken(), longTTL)
	mustAcquire(t, s, m)
	if ld, err := el.Leader(ctx, name); !errors.Is(err, store.ErrNoLeader) {
		t.Errorf("Leader(%q) while a mutex holds the name = %+v, %v; want ErrNoLeader", name, ld, err)
	}
	mustRelease(t, s, m)
	g3 := mustAcquire(t, s, other)
	if g3.Fence <= g.Fence {
		t.Errorf("next leader's term = %d, want > %d", g3.Fence, g.Fence)
	}
	mustRelease(t, s, other)
}

// leaderChecker records who believes it leads and reports overlaps and
// terms that do not increase in the order leaders entered.
type leaderChecker struct {
	mu         sync.Mutex
	leading    int
	lastTerm   int64
	violations []string
}

func (c *leaderChecker) enter(who int, term int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leading > 0 {
		c.violations = append(c.violations, fmt.Sprintf("candidate %d elected (term %d) while %d leader(s) led", who, term, c.leading))
	}
	if term <= c.lastTerm {
		c.violations = append(c.violations, fmt.Sprintf("candidate %d elected with term %d after term %d", who, term, c.lastTerm))
	}
	c.leading++
	c.lastTerm = max(c.lastTerm, term)
}

func (c *leaderChecker) leave() {
	c.mu.Lock()
	c.leading--
	c.mu.Unlock()
}

// electionOneLeader runs 8 candidates (on two stores of the backend) that
// campaign, lead briefly and resign, each a fixed number of times, and
// checks that no two ever lead together, that terms strictly increase and
// that every campaign succeeds.
func electionOneLeader(t *testing.T, h Harness) {
	const candidates, rounds = 8, 6
	name := lockName(t)
	s := h.New(t)
	peer := peerStore(t, h, s)
	c := &leaderChecker{}
	var failures errs
	var wg sync.WaitGroup
	for i := range candidates {
		on := s
		if i%2 == 1 {
			on = peer
		}
		l := newLocker(t, on, dlock.WithTTL(longTTL), dlock.WithBackoff(5*time.Millisecond, 200*time.Millisecond))
		e := l.Election(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
				lease, err := e.Campaign(ctx, fmt.Sprintf("candidate-%d", i))
				cancel()
				if err != nil {
					failures.add(fmt.Errorf("candidate %d round %d: Campaign = %v", i, r, err))
					return
				}
				c.enter(i, lease.Fence())
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				c.leave()
				rctx, rcancel := context.WithTimeout(context.Background(), waitTimeout)
				if err := e.Resign(rctx); err != nil {
					failures.add(fmt.Errorf("candidate %d round %d: Resign = %v", i, r, err))
				}
				rcancel()
			}
		}()
	}
	wg.Wait()
	failures.report(t)
	for _, v := range c.violations {
		t.Error(v)
	}
}

// fencedRegister is the protected resource: it accepts a write only with a
// term at least the highest it has accepted.
type fencedRegister struct {
	mu   sync.Mutex
	term int64
}

func (r *fencedRegister) write(term int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if term < r.term {
		return false
	}
	r.term = term
	return true
}

// pausingStore stalls every Extend while paused, as a leader process
// stopped by SIGSTOP or a long GC pause does not renew.
type pausingStore struct {
	store.Store
	mu      sync.Mutex
	resumed chan struct{} // nil while running
}

func (p *pausingStore) pause() {
	p.mu.Lock()
	p.resumed = make(chan struct{})
	p.mu.Unlock()
}

func (p *pausingStore) resume() {
	p.mu.Lock()
	close(p.resumed)
	p.resumed = nil
	p.mu.Unlock()
}

func (p *pausingStore) Extend(ctx context.Context, reqs []store.Request) []error {
	p.mu.Lock()
	ch := p.resumed
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return p.Store.Extend(ctx, reqs)
}

func (p *pausingStore) SupportsLockDelay() bool { return store.SupportsLockDelay(p.Store) }

type pausingElector struct {
	*pausingStore
	store.Elector
}

// electionPaused pauses a leader past its TTL: another candidate is
// elected with a higher term, the resource refuses the old leader's
// writes from then on, and the old leader's Done closes.
func electionPaused(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	const ttl = 500 * time.Millisecond
	ps := &pausingStore{Store: s}
	la := newLocker(t, pausingElector{ps, elector(t, s)}, dlock.WithTTL(ttl))
	lb := newLocker(t, s, dlock.WithTTL(ttl))
	reg := &fencedRegister{}

	a, err := la.Election(name).Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign(a) = %v", err)
	}
	if !reg.write(a.Fence()) {
		t.Fatalf("first leader's write with term %d refused", a.Fence())
	}
	ps.pause()
	b, err := lb.Election(name).Campaign(ctx, "b")
	ps.resume()
	if err != nil {
		t.Fatalf("Campaign(b) while the leader is paused = %v", err)
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("new leader's term %d, want > the paused leader's %d", b.Fence(), a.Fence())
	}
	if !reg.write(b.Fence()) {
		t.Errorf("new leader's write with term %d refused", b.Fence())
	}
	if reg.write(a.Fence()) {
		t.Errorf("the paused leader's write with term %d was accepted after term %d", a.Fence(), b.Fence())
	}
	if !waitClosed(a.Done()) {
		t.Fatalf("the paused leader's Done did not close within %v of its resumption", waitTimeout)
	}
	if !errors.Is(a.Err(), dlock.ErrLeaseLost) {
		t.Errorf("paused leader's Err = %v, want ErrLeaseLost", a.Err())
	}
	if isClosed(b.Done()) {
		t.Errorf("the new leader's lease ended: %v", b.Err())
	}
	if ld, err := lb.Election(name).Leader(ctx); err != nil || ld.Value != "b" || ld.Term != b.Fence() {
		t.Errorf("Leader = %+v, %v; want b with term %d", ld, err, b.Fence())
	}
}

// nextLeader receives from ch until want reports true, failing t after
// waitTimeout; it returns every value received.
func nextLeader(t *testing.T, ch <-chan store.Leader, want func(store.Leader) bool) []store.Leader {
	t.Helper()
	var seen []store.Leader
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		select {
		case ld, ok := <-ch:
			if !ok {
				t.Fatalf("Observe channel closed; seen %+v", seen)
			}
			seen = append(seen, ld)
			if want(ld) {
				return seen
			}
		case <-timer.C:
			t.Fatalf("no awaited leadership change within %v; seen %+v", waitTimeout, seen)
		}
	}
}

// electionObservePaced makes five leaders take turns, each change waiting
// until the observer (on another store of the backend) has seen it, and
// checks that the observer saw exactly every change, in order.
func electionObservePaced(t *testing.T, h Harness) {
	ctx := testContext(t)
	name := lockName(t)
	s := h.New(t)
	lo := newLocker(t, peerStore(t, h, s))
	obs := lo.Election(name).Observe(ctx)
	nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term == 0 })
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	for i := range 5 {
		e := l.Election(name)
		value := fmt.Sprintf("leader-%d", i)
		lease, err := e.Campaign(ctx, value)
		if err != nil {
			t.Fatalf("Campaign(%s) = %v", value, err)
		}
		seen := nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term != 0 })
		if len(seen) != 1 || seen[0].Value != value || seen[0].Term != lease.Fence() {
			t.Errorf("observed %+v after %s won term %d; want exactly that leader", seen, value, lease.Fence())
		}
		if err := e.Resign(ctx); err != nil {
			t.Fatalf("Resign = %v", err)
		}
		seen = nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term == 0 })
		if len(seen) != 1 {
			t.Errorf("observed %+v after %s resigned; want exactly no leader", seen, value)
		}
	}
}

// electionObserveBurst changes leaders quickly and checks that the
// observer's terms strictly increase, every observed leader was a real
// one, and the observer ends on the last leader.
func electionObserveBurst(t *testing.T, h Harness) {
	ctx := testContext(t)
	name := lockName(t)
	s := h.New(t)
	lo := newLocker(t, peerStore(t, h, s))
	octx, cancel := context.WithCancel(ctx)
	obs := lo.Election(name).Observe(octx)
	nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term == 0 })
	values := map[int64]string{}
	var got []store.Leader
	done := make(chan struct{})
	var last store.Leader
	var lastMu sync.Mutex
	go func() {
		defer close(done)
		for ld := range obs {
			got = append(got, ld)
			lastMu.Lock()
			last = ld
			lastMu.Unlock()
		}
	}()
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	var final *dlock.Lease
	for i := range 20 {
		e := l.Election(name)
		value := fmt.Sprintf("leader-%d", i)
		lease, err := e.Campaign(ctx, value)
		if err != nil {
			t.Fatalf("Campaign(%s) = %v", value, err)
		}
		values[lease.Fence()] = value
		if i == 19 {
			final = lease
			break
		}
		if err := e.Resign(ctx); err != nil {
			t.Fatalf("Resign = %v", err)
		}
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		lastMu.Lock()
		ld := last
		lastMu.Unlock()
		if ld.Term == final.Fence() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("observer did not reach the last leader (term %d) within %v; last seen %+v", final.Fence(), waitTimeout, ld)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	var prev int64
	for _, ld := range got {
		if ld.Term == 0 {
			continue
		}
		if ld.Term <= prev {
			t.Errorf("observed term %d after term %d; want strictly increasing (seen %+v)", ld.Term, prev, got)
		}
		prev = ld.Term
		if v, ok := values[ld.Term]; !ok || v != ld.Value {
			t.Errorf("observed leader %+v, which no campaign won", ld)
		}
	}
	t.Logf("20 leaders in a burst, %d leadership values observed", len(got))
}

// electionObserveExpiry lets a leader's hold run out without renewal and
// checks that the observer sees that nobody leads.
func electionObserveExpiry(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	lo := newLocker(t, s)
	obs := lo.Election(name).Observe(ctx)
	nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term == 0 })
	// Long enough for the observer to see the leader before it expires,
	// on a loaded machine.
	const ttl = 2 * time.Second
	req := electionReq(name, "short", ttl)
	start := time.Now()
	g := mustAcquire(t, s, req)
	nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term == g.Fence })
	nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term == 0 })
	if el := time.Since(start); el < ttl-clockSlack {
		t.Errorf("observer saw no leader %v after a %v leadership began; want at least its TTL", el, ttl)
	} else {
		t.Logf("expiry of a %v leadership observed after %v", ttl, el)
	}
}

// electionResign checks the Election handle: Campaign while leading with
// the same value returns the same lease, with another value is invalid;
// Resign frees the name for another candidate at once; Resign when not
// leading is ErrNotHeld.
func electionResign(t *testing.T, s store.Store) {
	ctx := testContext(t)
	name := lockName(t)
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	e := l.Election(name)
	lease, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatalf("Campaign = %v", err)
	}
	if again, err := e.Campaign(ctx, "v"); err != nil || again != lease {
		t.Errorf("Campaign while leading = %p, %v; want the current lease %p", again, err, lease)
	}
	if _, err := e.Campaign(ctx, "w"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Campaign with another value while leading = %v, want ErrInvalid", err)
	}
	other := l.Election(name)
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = other.Campaign(tctx, "x")
	cancel()
	if !errors.Is(err, dlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Campaign while another leads, until ctx ends = %v; want ErrLocked and DeadlineExceeded", err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("Resign = %v", err)
	}
	if !isClosed(lease.Done()) || lease.Err() != nil {
		t.Errorf("after Resign: Done closed %v, Err %v; want closed, nil", isClosed(lease.Done()), lease.Err())
	}
	if err := e.Resign(ctx); !errors.Is(err, store.ErrNotHeld) {
		t.Errorf("second Resign = %v, want ErrNotHeld", err)
	}
	tctx, cancel = context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	next, err := other.Campaign(tctx, "x")
	if err != nil {
		t.Fatalf("Campaign after the leader resigned = %v", err)
	}
	if next.Fence() <= lease.Fence() {
		t.Errorf("term after resignation %d, want > %d", next.Fence(), lease.Fence())
	}
	if _, err := other.Campaign(ctx, string(make([]byte, store.MaxValueLen+1))); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Campaign with a %d-byte value = %v, want ErrInvalid", store.MaxValueLen+1, err)
	}
}

// electionObservePushed checks that an observer waiting while nobody leads
// is woken by the store's push when a leader is elected, not by a re-read
// of its own: Observe re-reads on its own only after 30s without a push,
// and each new leader must arrive within waitTimeout (10s). The observer's
// store counts its Watch wake-ups and leadership reads, for the log.
func electionObservePushed(t *testing.T, h Harness) {
	ctx := testContext(t)
	name := lockName(t)
	s := h.New(t)
	peer := peerStore(t, h, s)
	cs := &countingElector{Store: peer, el: elector(t, peer)}
	lo := newLocker(t, cs)
	obs := lo.Election(name).Observe(ctx)
	nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term == 0 })
	l := newLocker(t, s, dlock.WithTTL(longTTL))
	for i := range 3 {
		e := l.Election(name)
		value := fmt.Sprintf("leader-%d", i)
		wakes, reads := cs.wakes.Load(), cs.reads.Load()
		start := time.Now()
		lease, err := e.Campaign(ctx, value)
		if err != nil {
			t.Fatalf("Campaign(%s) = %v", value, err)
		}
		nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term == lease.Fence() })
		t.Logf("leader %d observed %v after its campaign began (%d Watch wake-ups, %d leadership reads since)",
			i, time.Since(start).Round(time.Millisecond), cs.wakes.Load()-wakes, cs.reads.Load()-reads)
		if err := e.Resign(ctx); err != nil {
			t.Fatalf("Resign = %v", err)
		}
		nextLeader(t, obs, func(ld store.Leader) bool { return ld.Term == 0 })
	}
}

// countingElector is a Store and Elector that counts leadership reads and
// the wake-ups of its Watch channels.
type countingElector struct {
	store.Store
	el           store.Elector
	wakes, reads atomic.Int64
}

func (c *countingElector) Leader(ctx context.Context, name string) (store.Leader, error) {
	c.reads.Add(1)
	return c.el.Leader(ctx, name)
}

// Watch forwards the store's wake-ups, counting them.
func (c *countingElector) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	in, stop, err := c.Store.Watch(ctx, name, mode)
	if err != nil {
		return nil, nil, err
	}
	out := make(chan struct{}, 1)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-in:
			}
			c.wakes.Add(1)
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			stop()
			close(quit)
			<-done
		})
	}, nil
}
