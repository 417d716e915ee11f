// Package memory is an in-process [dlock.Store]: the same semantics as the
// Valkey store without a network. It backs `dlock serve` when no Redis is
// given and serves as a fake in users' unit tests. Locks are local to the
// process; fences stay monotonic across restarts of the process through the
// same hybrid clock floor the Valkey store uses (see [Store]).
package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

var (
	_ dlock.Store        = (*Store)(nil)
	_ dlock.Inspector    = (*Store)(nil)
	_ dlock.Pinger       = (*Store)(nil)
	_ dlock.GrantWatcher = (*Store)(nil)
	_ dlock.Elector      = (*Store)(nil)
)

// Store is an in-memory lock store. The zero value is not usable; call New.
// It supports every [dlock.Mode]. Expired holds and queue entries are
// dropped lazily, on the next operation on their lock; a fair lock whose
// holder expired is handed to its head waiter then.
//
// A name is one lock (see [dlock.Coexist]): each pattern keeps its own
// state (holders, queue), and a request is refused while another pattern
// holds the name. The patterns share the name's fence counter. When a name
// frees, the waiters of every pattern are woken and a fair lock's queue is
// served first.
type Store struct {
	retention time.Duration // see WithFenceRetention
	mu        sync.Mutex
	locks     map[key]*lock
	fences    map[string]int64
	issued    int // fences issued since the last prune
	watchers  map[key]map[chan struct{}]struct{}
	grants    map[grantKey]chan dlock.Grant
}

// key names the state of one pattern of one lock name. ModeWrite shares
// the state of ModeRead.
type key struct {
	mode dlock.Mode
	name string
}

type grantKey struct {
	name, token string
}

func keyOf(name string, m dlock.Mode) key {
	if m == dlock.ModeWrite {
		m = dlock.ModeRead
	}
	return key{mode: m, name: name}
}

type holder struct {
	token   string
	expires time.Time
	fence   int64
	write   bool   // read-write lock: the writer
	value   string // election: the leader's value
}

// waiter is a queue entry: a fair-lock ticket or a writer's intent.
type waiter struct {
	token   string
	ticket  int64
	expires time.Time
	ttl     time.Duration // lease length to grant on handoff
}

type lock struct {
	mode    dlock.Mode // the key's mode
	holders []*holder  // reentrant: one per acquisition of the owner
	owner   string     // reentrant
	queue   []*waiter  // by ticket
	ticket  int64      // last ticket issued
	limit   int        // semaphore
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{
		retention: DefaultFenceRetention,
		locks:     make(map[key]*lock),
		fences:    make(map[string]int64),
		watchers:  make(map[key]map[chan struct{}]struct{}),
		grants:    make(map[grantKey]chan dlock.Grant),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// An Option configures a [Store] made by [New].
type Option func(*Store)

// DefaultFenceRetention is [WithFenceRetention]'s default.
const DefaultFenceRetention = 24 * time.Hour

// WithFenceRetention sets how long a lock name's fence counter is kept after
// its last grant; default a day. Each name has one counter, so a workload
// that locks many distinct names keeps one map entry per name for this
// long. Once a counter is forgotten, the name's next fence is the clock
// floor, above every earlier fence unless the wall clock stepped back
// meanwhile: a shorter retention trades that protection for memory. A
// value under a second counts as a second.
func WithFenceRetention(d time.Duration) Option {
	return func(s *Store) { s.retention = max(d, time.Second) }
}

// nextFence issues the fence after last: max(last+1, wall-clock µs floor), so
// that a restarted process still issues fences above earlier ones.
func nextFence(last int64, now time.Time) int64 {
	return max(last+1, now.UnixMilli()*1000)
}

// issue records and returns the next fence of name. Caller holds s.mu.
func (s *Store) issue(name string, now time.Time) int64 {
	f := nextFence(s.fences[name], now)
	s.fences[name] = f
	if s.issued++; s.issued >= max(1024, len(s.fences)) {
		s.pruneFences(now)
	}
	return f
}

// pruneFences forgets counters whose last fence is below the clock floor of
// the retention ago (WithFenceRetention), so that unique lock names do not
// pile up. The clock floor of nextFence is then above them, so forgetting
// them cannot make a fence go down (unless the clock steps back that far).
// Caller holds s.mu.
func (s *Store) pruneFences(now time.Time) {
	s.issued = 0
	floor := now.Add(-s.retention).UnixMilli() * 1000
	for name, f := range s.fences {
		if f < floor {
			delete(s.fences, name)
		}
	}
}

// live returns the lock at k with expired holders and queue entries removed,
// a fair lock handed to its head waiter if it was free, or nil when nothing
// is left. Caller holds s.mu.
func (s *Store) live(k key, now time.Time) *lock {
	lk := s.locks[k]
	if lk == nil {
		return nil
	}
	lk.holders = slices.DeleteFunc(lk.holders, func(h *holder) bool { return !now.Before(h.expires) })
	lk.queue = slices.DeleteFunc(lk.queue, func(w *waiter) bool { return !now.Before(w.expires) })
	return s.settle(k, lk, now)
}

// settle hands a free fair lock to its head waiter and drops a lock with
// nothing left. Caller holds s.mu.
func (s *Store) settle(k key, lk *lock, now time.Time) *lock {
	if k.mode == dlock.ModeFair && len(lk.holders) == 0 && len(lk.queue) > 0 && !s.heldByOther(k, now) {
		w := lk.queue[0]
		lk.queue = lk.queue[1:]
		f := s.issue(k.name, now)
		lk.holders = append(lk.holders, &holder{token: w.token, expires: now.Add(w.ttl), fence: f})
		g := dlock.Grant{Acquired: true, Fence: f, Count: 1}
		if ch := s.grants[grantKey{k.name, w.token}]; ch != nil {
			select {
			case ch <- g:
			default:
			}
		} else {
			s.wakeLocked(k)
		}
	}
	if len(lk.holders) == 0 && len(lk.queue) == 0 {
		delete(s.locks, k)
		return nil
	}
	return lk
}

// heldMode is the mode of the lock's holders: ModeWrite for a read-write
// lock while its writer holds it.
func (lk *lock) heldMode() dlock.Mode {
	if lk.mode == dlock.ModeRead && lk.writer() != nil {
		return dlock.ModeWrite
	}
	return lk.mode
}

// otherHold reports the hold of a pattern other than k's on k.name, if
// any: its mode and remaining time. Caller holds s.mu.
func (s *Store) otherHold(k key, now time.Time) (dlock.Mode, time.Duration, bool) {
	for _, m := range modes {
		if m == k.mode {
			continue
		}
		if lk := s.live(key{m, k.name}, now); lk != nil && len(lk.holders) > 0 {
			return lk.heldMode(), lk.remaining(now), true
		}
	}
	return 0, 0, false
}

// freed wakes the waiters of every pattern of name once it may have become
// free, after serving a fair lock's queue (whose head is then the holder).
// Caller holds s.mu.
func (s *Store) freed(name string, now time.Time) {
	s.live(key{dlock.ModeFair, name}, now)
	for _, m := range modes {
		s.wakeLocked(key{m, name})
	}
}

func (s *Store) heldByOther(k key, now time.Time) bool {
	_, _, held := s.otherHold(k, now)
	return held
}

func (lk *lock) find(token string) *holder {
	for _, h := range lk.holders {
		if h.token == token {
			return h
		}
	}
	return nil
}

func (lk *lock) writer() *holder {
	for _, h := range lk.holders {
		if h.write {
			return h
		}
	}
	return nil
}

func (lk *lock) queued(token string) int {
	return slices.IndexFunc(lk.queue, func(w *waiter) bool { return w.token == token })
}

// enqueue adds token to the queue or refreshes its entry, and returns its
// position.
func (lk *lock) enqueue(req dlock.Request, now time.Time) int {
	if i := lk.queued(req.Token); i >= 0 {
		lk.queue[i].expires = now.Add(req.QueueTTL)
		lk.queue[i].ttl = req.TTL
		return i
	}
	lk.ticket++
	lk.queue = append(lk.queue, &waiter{token: req.Token, ticket: lk.ticket, expires: now.Add(req.QueueTTL), ttl: req.TTL})
	return len(lk.queue) - 1
}

func (lk *lock) dequeue(token string) bool {
	if i := lk.queued(token); i >= 0 {
		lk.queue = slices.Delete(lk.queue, i, i+1)
		return true
	}
	return false
}

// remaining is the longest remaining hold.
func (lk *lock) remaining(now time.Time) time.Duration {
	var d time.Duration
	for _, h := range lk.holders {
		d = max(d, h.expires.Sub(now))
	}
	return d
}

// soonest is the shortest remaining hold.
func (lk *lock) soonest(now time.Time) time.Duration {
	d := time.Duration(-1)
	for _, h := range lk.holders {
		if r := h.expires.Sub(now); d < 0 || r < d {
			d = r
		}
	}
	return max(d, 0)
}

// extendAll pushes the expiry of every holder out to at least t (a
// reentrant hold has one expiry).
func (lk *lock) extendAll(t time.Time) {
	for _, h := range lk.holders {
		if h.expires.Before(t) {
			h.expires = t
		}
	}
}

func invalid(field, reason string) error {
	return &dlock.InvalidError{Field: field, Reason: reason}
}

func check(req dlock.Request) error {
	if req.Mode > dlock.ModeElection {
		return fmt.Errorf("%w: memory store mode %v", dlock.ErrNotSupported, req.Mode)
	}
	if req.Name == "" {
		return invalid("name", "must not be empty")
	}
	if req.Token == "" {
		return invalid("token", "must not be empty")
	}
	if req.TTL <= 0 {
		return invalid("ttl", "must be positive")
	}
	if req.Mode == dlock.ModeSemaphore && req.Limit < 1 {
		return invalid("limit", "must be at least 1")
	}
	if req.Queue && req.QueueTTL <= 0 {
		return invalid("queueTTL", "must be positive")
	}
	return nil
}

// Acquire implements [dlock.Store].
func (s *Store) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, error) {
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, err
	}
	if err := check(req); err != nil {
		return dlock.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	k := keyOf(req.Name, req.Mode)
	lk := s.live(k, now)
	if lk == nil || lk.find(req.Token) == nil {
		if held, left, ok := s.otherHold(k, now); ok {
			// A name is one lock: refused, keeping a queued caller's place.
			g := dlock.Grant{RetryAfter: left, Held: held}
			if req.Queue && (req.Mode == dlock.ModeFair || req.Mode == dlock.ModeWrite) {
				if lk == nil {
					lk = &lock{mode: k.mode}
					s.locks[k] = lk
				}
				g.Position = lk.enqueue(req, now)
			}
			return g, nil
		}
	}
	switch req.Mode {
	case dlock.ModeReentrant:
		return s.acquireReentrant(k, lk, req, now), nil
	case dlock.ModeRead:
		return s.acquireRead(k, lk, req, now), nil
	case dlock.ModeWrite:
		return s.acquireWrite(k, lk, req, now)
	case dlock.ModeFair:
		return s.acquireFair(k, lk, req, now), nil
	case dlock.ModeSemaphore:
		return s.acquireSemaphore(k, lk, req, now)
	}
	// The mutex, and the election (a mutex that keeps the leader's value).
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.expires = now.Add(req.TTL)
			return dlock.Grant{Acquired: true, Fence: h.fence, Count: 1}, nil
		}
		return dlock.Grant{RetryAfter: lk.remaining(now), Held: k.mode}, nil
	}
	f := s.issue(req.Name, now)
	h := &holder{token: req.Token, expires: now.Add(req.TTL), fence: f}
	if k.mode == dlock.ModeElection {
		h.value = req.Value
		s.wakeLocked(k) // observers see the new leader
	}
	s.locks[k] = &lock{mode: k.mode, holders: []*holder{h}}
	return dlock.Grant{Acquired: true, Fence: f, Count: 1}, nil
}

// Leader implements [dlock.Elector].
func (s *Store) Leader(ctx context.Context, name string) (dlock.Leader, error) {
	if err := ctx.Err(); err != nil {
		return dlock.Leader{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	lk := s.live(key{dlock.ModeElection, name}, now)
	if lk == nil || len(lk.holders) == 0 {
		return dlock.Leader{}, dlock.ErrNoLeader
	}
	h := lk.holders[0]
	return dlock.Leader{Value: h.value, Term: h.fence, TTL: h.expires.Sub(now)}, nil
}

// acquireReentrant grants the owner another acquisition under its own
// token; the hold keeps its first fence and one expiry.
func (s *Store) acquireReentrant(k key, lk *lock, req dlock.Request, now time.Time) dlock.Grant {
	owner := cmp.Or(req.Owner, req.Token)
	if lk == nil {
		f := s.issue(req.Name, now)
		s.locks[k] = &lock{mode: k.mode, owner: owner, holders: []*holder{{token: req.Token, expires: now.Add(req.TTL), fence: f}}}
		return dlock.Grant{Acquired: true, Fence: f, Count: 1}
	}
	if lk.find(req.Token) == nil {
		if lk.owner != owner {
			return dlock.Grant{RetryAfter: lk.remaining(now), Held: dlock.ModeReentrant}
		}
		lk.holders = append(lk.holders, &holder{token: req.Token, expires: lk.holders[0].expires, fence: lk.holders[0].fence})
	}
	lk.extendAll(now.Add(req.TTL))
	return dlock.Grant{Acquired: true, Fence: lk.holders[0].fence, Count: len(lk.holders)}
}

// acquireRead grants a reader its own hold at the current fence unless a
// writer holds the lock or waits for it. A reader whose Owner is the token
// of the holding writer is let in beside it (a downgrade).
func (s *Store) acquireRead(k key, lk *lock, req dlock.Request, now time.Time) dlock.Grant {
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.expires = now.Add(req.TTL)
			return dlock.Grant{Acquired: true, Fence: h.fence, Count: 1}
		}
		w := lk.writer()
		beside := w != nil && req.Owner != "" && w.token == req.Owner
		if !beside && (w != nil || len(lk.queue) > 0) {
			ra := lk.remaining(now)
			if ra == 0 && len(lk.queue) > 0 {
				ra = lk.queue[0].expires.Sub(now)
			}
			return dlock.Grant{RetryAfter: ra, Held: lk.heldMode()}
		}
	} else {
		lk = &lock{mode: k.mode}
		s.locks[k] = lk
	}
	f := s.fences[req.Name]
	if f == 0 {
		f = s.issue(req.Name, now)
	}
	lk.holders = append(lk.holders, &holder{token: req.Token, expires: now.Add(req.TTL), fence: f})
	return dlock.Grant{Acquired: true, Fence: f, Count: 1}
}

// acquireWrite grants the writer a new fence when nobody holds the lock and
// no earlier writer waits; otherwise a queued writer keeps (or takes) its
// place. A writer whose Owner is the token of a reader holding the lock is
// refused with ErrUpgrade.
func (s *Store) acquireWrite(k key, lk *lock, req dlock.Request, now time.Time) (dlock.Grant, error) {
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.expires = now.Add(req.TTL)
			return dlock.Grant{Acquired: true, Fence: h.fence, Count: 1}, nil
		}
		if req.Owner != "" {
			if h := lk.find(req.Owner); h != nil && !h.write {
				return dlock.Grant{}, dlock.ErrUpgrade
			}
		}
		ahead := len(lk.queue) > 0 && lk.queue[0].token != req.Token
		if len(lk.holders) > 0 || ahead {
			held := lk.heldMode()
			if len(lk.holders) == 0 {
				held = dlock.ModeWrite // refused by a writer queued ahead: the request's own mode
			}
			g := dlock.Grant{RetryAfter: lk.remaining(now), Position: len(lk.queue), Held: held}
			if req.Queue {
				g.Position = lk.enqueue(req, now)
			} else if i := lk.queued(req.Token); i >= 0 {
				g.Position = i
			}
			return g, nil
		}
		lk.dequeue(req.Token)
	} else {
		lk = &lock{mode: k.mode}
		s.locks[k] = lk
	}
	f := s.issue(req.Name, now)
	lk.holders = append(lk.holders, &holder{token: req.Token, expires: now.Add(req.TTL), fence: f, write: true})
	return dlock.Grant{Acquired: true, Fence: f, Count: 1}, nil
}

// acquireFair grants the lock to the caller when it is free and nobody is
// queued (live has already handed a free lock to the head); otherwise a
// queued caller keeps (or takes) its place in ticket order.
func (s *Store) acquireFair(k key, lk *lock, req dlock.Request, now time.Time) dlock.Grant {
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.expires = now.Add(req.TTL)
			return dlock.Grant{Acquired: true, Fence: h.fence, Count: 1}
		}
		g := dlock.Grant{RetryAfter: lk.remaining(now), Position: len(lk.queue), Held: dlock.ModeFair}
		if req.Queue {
			g.Position = lk.enqueue(req, now)
		} else if i := lk.queued(req.Token); i >= 0 {
			g.Position = i
		}
		return g
	}
	f := s.issue(req.Name, now)
	s.locks[k] = &lock{mode: k.mode, holders: []*holder{{token: req.Token, expires: now.Add(req.TTL), fence: f}}}
	return dlock.Grant{Acquired: true, Fence: f, Count: 1}
}

// acquireSemaphore grants one of req.Limit permits, each with a new fence.
// A limit other than the held permits' is a *dlock.LimitError.
func (s *Store) acquireSemaphore(k key, lk *lock, req dlock.Request, now time.Time) (dlock.Grant, error) {
	if lk != nil {
		if h := lk.find(req.Token); h != nil {
			h.expires = now.Add(req.TTL)
			return dlock.Grant{Acquired: true, Fence: h.fence, Count: 1}, nil
		}
		if len(lk.holders) > 0 && lk.limit != req.Limit {
			return dlock.Grant{}, &dlock.LimitError{Name: req.Name, Held: lk.limit, Asked: req.Limit}
		}
		if len(lk.holders) >= req.Limit {
			return dlock.Grant{RetryAfter: lk.soonest(now), Held: dlock.ModeSemaphore}, nil
		}
	} else {
		lk = &lock{mode: k.mode}
		s.locks[k] = lk
	}
	lk.limit = req.Limit
	f := s.issue(req.Name, now)
	lk.holders = append(lk.holders, &holder{token: req.Token, expires: now.Add(req.TTL), fence: f})
	return dlock.Grant{Acquired: true, Fence: f, Count: 1}, nil
}

// Extend implements [dlock.Store]. A reentrant hold's expiry is pushed out,
// never in. Queue entries are refreshed by Acquire, not Extend.
func (s *Store) Extend(ctx context.Context, reqs []dlock.Request) []error {
	errs := make([]error, len(reqs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for i, req := range reqs {
		lk := s.live(keyOf(req.Name, req.Mode), now)
		var h *holder
		if lk != nil {
			h = lk.find(req.Token)
		}
		switch {
		case h == nil:
			errs[i] = dlock.ErrNotHeld
		case req.Mode == dlock.ModeReentrant:
			lk.extendAll(now.Add(req.TTL))
		default:
			h.expires = now.Add(req.TTL)
		}
	}
	return errs
}

// Release implements [dlock.Store]. Releasing a fair lock hands it to the
// live head waiter, which alone is woken. Releasing a queued token drops
// its place.
func (s *Store) Release(ctx context.Context, req dlock.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	k := keyOf(req.Name, req.Mode)
	lk := s.live(k, now)
	if lk == nil {
		return dlock.ErrNotHeld
	}
	if i := slices.IndexFunc(lk.holders, func(h *holder) bool { return h.token == req.Token }); i >= 0 {
		// Wake waiters when someone may now get in: the lock is free, a
		// writer left readers behind after a downgrade, or a permit freed.
		wake := lk.holders[i].write || k.mode == dlock.ModeSemaphore
		lk.holders = slices.Delete(lk.holders, i, i+1)
		free := len(lk.holders) == 0
		if s.settle(k, lk, now) != nil && k.mode == dlock.ModeFair && len(lk.holders) > 0 {
			return nil // handed over: settle woke the new holder alone
		}
		switch {
		case free:
			s.freed(req.Name, now)
		case wake:
			s.wakeLocked(k)
		}
		return nil
	}
	if lk.dequeue(req.Token) {
		if k.mode == dlock.ModeRead {
			s.wakeLocked(k) // a withdrawn writer intent may let readers in
		}
		s.settle(k, lk, now)
		return nil
	}
	return dlock.ErrNotHeld
}

// Watch implements [dlock.Store]. Releases wake watchers; expiry does not
// (holds expire lazily), so waiters rely on their timer at RetryAfter.
func (s *Store) Watch(ctx context.Context, name string, mode dlock.Mode) (<-chan struct{}, func(), error) {
	k := keyOf(name, mode)
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	set := s.watchers[k]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		s.watchers[k] = set
	}
	set[ch] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			set := s.watchers[k]
			delete(set, ch)
			if len(set) == 0 {
				delete(s.watchers, k)
			}
		})
	}
	return ch, stop, nil
}

// WatchGrant implements [dlock.GrantWatcher] for the fair lock: the channel
// receives the Grant when a release or expiry hands the lock to req.Token.
func (s *Store) WatchGrant(ctx context.Context, req dlock.Request) (<-chan dlock.Grant, func(), error) {
	if req.Mode != dlock.ModeFair {
		return nil, nil, fmt.Errorf("%w: memory store grant watch for mode %v", dlock.ErrNotSupported, req.Mode)
	}
	gk := grantKey{req.Name, req.Token}
	ch := make(chan dlock.Grant, 1)
	s.mu.Lock()
	s.grants[gk] = ch
	s.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.grants[gk] == ch {
				delete(s.grants, gk)
			}
		})
	}
	return ch, stop, nil
}

func (s *Store) wakeLocked(k key) {
	for ch := range s.watchers[k] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// modes lists the keys' modes in the order State looks at them.
var modes = []dlock.Mode{dlock.ModeMutex, dlock.ModeReentrant, dlock.ModeRead, dlock.ModeFair, dlock.ModeSemaphore, dlock.ModeElection}

// State implements [dlock.Inspector]. When several patterns of name have
// state, it describes the first in mode order.
func (s *Store) State(ctx context.Context, name string) (dlock.State, error) {
	if err := ctx.Err(); err != nil {
		return dlock.State{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, m := range modes {
		if lk := s.live(key{m, name}, now); lk != nil {
			return s.stateLocked(name, lk, now), nil
		}
	}
	return dlock.State{Name: name, Fence: s.fences[name]}, nil
}

func (s *Store) stateLocked(name string, lk *lock, now time.Time) dlock.State {
	st := dlock.State{
		Name:    name,
		Mode:    lk.mode,
		Holders: len(lk.holders),
		TTL:     lk.remaining(now),
		Fence:   s.fences[name],
		Queue:   len(lk.queue),
		Limit:   lk.limit,
	}
	switch {
	case lk.mode == dlock.ModeReentrant && len(lk.holders) > 0:
		st.Holders = 1 // one owner, however many acquisitions
	case lk.mode == dlock.ModeRead && lk.writer() != nil:
		st.Mode = dlock.ModeWrite
	}
	return st
}

// List implements [dlock.Inspector]: every lock with a holder or a waiter,
// by name and mode.
func (s *Store) List(ctx context.Context) ([]dlock.State, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	keys := make([]key, 0, len(s.locks))
	for k := range s.locks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.mode, b.mode))
	})
	var out []dlock.State
	for _, k := range keys {
		if lk := s.live(k, now); lk != nil {
			out = append(out, s.stateLocked(k.name, lk, now))
		}
	}
	return out, nil
}

// Ping implements [dlock.Pinger]; the memory store is always reachable.
func (s *Store) Ping(ctx context.Context) error { return ctx.Err() }

// SupportsLockDelay implements [dlock.LockDelayer]: holds end at their TTL
// by the process's clock.
func (s *Store) SupportsLockDelay() bool { return true }
