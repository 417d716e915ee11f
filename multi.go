package dlock

import (
	"context"
	"errors"
	"fmt"
	"github.com/dlock-dev/dlock/store"
	"slices"
	"sync"
	"time"
)

// MaxMultiNames bounds the names of one [Multi].
const MaxMultiNames = 64

// Multi is an all-or-nothing exclusive lock on several names: it holds all
// of them or none. Each name is an exclusive hold ([ModeMutex]) of its own,
// with its own fence, so a Multi and a [Mutex] on one of its names exclude
// each other, and other libraries see the `lock:<name>` keys on Valkey.
//
// On a store that can take the names in one atomic operation ([MultiStore]:
// Valkey/Redis on one node, or a cluster when every name hashes to one slot,
// e.g. names sharing a {hash tag}) the names are taken, extended and
// released with one script each, all with one token: all or nothing, with
// no moment at which another client sees some of them held.
//
// Otherwise names are taken one by one in one global order (sorted
// bytewise), all with one token. A refusal releases the names already taken
// before the caller waits (undo on refusal), so a waiting Multi holds
// nothing and overlapping Multis never deadlock. Another client may briefly
// see some names of such a Multi held while it is still acquiring or
// undoing; it never holds some names past a failed acquire (a name whose
// release failed runs out at its TTL). Observers ([WithObserver]) get an
// acquire event for each name taken, undone ones included, matched by its
// release or loss. With [WithMinHold], names taken before a refusal stay
// held until their min hold ends, though released: the store keeps them.
type Multi struct {
	l     *Locker
	names []string
	cfg   config
	err   error
}

// Multi returns the multi-lock on names (1 to 64 distinct valid names; a
// repeated name counts once). Options override the Locker's defaults for
// every lease of it; a bad option or name is reported by TryLock and Lock.
func (l *Locker) Multi(names []string, opts ...Option) *Multi {
	m := &Multi{l: l, cfg: l.lockConfig(opts)}
	m.names = slices.Clone(names)
	slices.Sort(m.names)
	m.names = slices.Compact(m.names)
	switch {
	case len(m.names) == 0 || len(m.names) > MaxMultiNames:
		m.err = invalid("names", "must hold 1-64 names")
	default:
		for _, n := range m.names {
			if err := ValidName(n); err != nil {
				m.err = err
				break
			}
		}
	}
	return m
}

// Names returns the names of the lock, in the order they are taken.
func (m *Multi) Names() []string { return slices.Clone(m.names) }

// TryLock makes one attempt to take every name and does not wait. It
// returns the [MultiLease], or a [*LockedError] naming the first name found
// held (nothing is left held), a [*StoreError] when the store failed, an
// [*InvalidError] for a bad name or option, or [ErrClosed].
func (m *Multi) TryLock(ctx context.Context) (*MultiLease, error) {
	return m.take(ctx, false)
}

// Lock takes every name, waiting until all are free together or ctx ends.
// While waiting it holds none of them; it is woken by the store when the
// name that refused it last frees, with capped backoff and a timer at that
// name's expiry as the fallback. When ctx ends it returns an error
// matching both ctx.Err() and the last outcome ([ErrLocked], naming the
// held name, or [ErrUnavailable]) and leaves nothing held.
func (m *Multi) Lock(ctx context.Context) (*MultiLease, error) {
	return m.take(ctx, true)
}

func (m *Multi) take(ctx context.Context, wait bool) (*MultiLease, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	w := newWaiter(m.l.store, &m.cfg)
	defer w.close()
	p := &multiWait{m: m}
	err := run(ctx, w, p, m.names[0], !wait)
	return p.ml, err
}

// multiWait is the policy of a Multi's wait: a fresh token per attempt,
// so that a release behind a failed attempt that reaches the store late
// cannot free the next one's names, and every attempt undoes itself; the
// wait watches the name that refused it last.
type multiWait struct {
	m  *Multi
	ml *MultiLease // once held
}

func (p *multiWait) attempt(ctx context.Context, _ store.Grant) (bool, store.Grant, string, error) {
	ml, g, name, err := p.m.attempt(ctx, newToken())
	p.ml = ml
	return ml != nil, g, name, err
}

func (p *multiWait) arm(ctx context.Context, w *waiter, name string, err error) bool {
	return err == nil && w.watch(ctx, name, ModeMutex)
}

func (p *multiWait) delay(w *waiter, _ time.Time, g store.Grant, _ error) (time.Duration, bool) {
	return w.backoffDelay(g), false
}

func (p *multiWait) behind(context.Context) {} // every attempt undoes itself

func (m *Multi) check() error {
	if m.cfg.err != nil {
		return m.cfg.err
	}
	if m.err != nil {
		return m.err
	}
	if m.cfg.lockDelay > 0 && !store.SupportsLockDelay(m.l.store) {
		return notSupported("lock-delay (the store does not end holds by its own clock)")
	}
	return nil
}

// Atomic reports whether the Multi is taken with one operation of the
// store (see [MultiStore]) rather than name by name.
func (m *Multi) Atomic() bool { return m.atomic() != nil }

func (m *Multi) atomic() store.MultiStore {
	if ms, ok := m.l.store.(store.MultiStore); ok && m.err == nil && ms.AtomicMulti(m.names) {
		return ms
	}
	return nil
}

// attempt takes every name with token: in one operation of the store when
// it can, otherwise in order. On a refusal or an error nothing is left held
// and it returns the refusing name with its grant.
func (m *Multi) attempt(ctx context.Context, token string) (*MultiLease, store.Grant, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, store.Grant{}, "", err // nothing sent, nothing to undo
	}
	if ms := m.atomic(); ms != nil {
		return m.attemptAtomic(ctx, ms, token)
	}
	c := &m.cfg
	leases := make([]*Lease, 0, len(m.names))
	for _, name := range m.names {
		req := Request{Name: name, Token: token, Mode: ModeMutex, TTL: c.leaseTTL() + c.lockDelay}
		_ = m.l.holdFields(c, &req) // a mutex's: checked by check
		cl := &call{l: m.l, c: c, req: req}
		sent := time.Now()
		ls, g, err := cl.try(ctx) // what it may leave held, undo releases
		if ls == nil {
			var unresolved []Request // what the failed attempt may hold
			if err != nil {
				unresolved = append(unresolved, cl.req)
			}
			m.undo(ctx, leases, unresolved)
			return nil, g, name, err
		}
		// Each name's lease is reported like any grant, so that its
		// release (or loss) is matched by an acquire for observers.
		m.l.emit(Event{Kind: EventAcquire, Mode: ModeMutex, Name: name, Result: "acquired", Fence: ls.fence, Duration: time.Since(sent),
			Context: ctx, Lease: ls.id, Start: sent, Attempts: 1, Owner: req.Holder})
		leases = append(leases, ls)
	}
	return m.held(ctx, &MultiLease{token: token, names: m.names, leases: leases, done: make(chan struct{})})
}

// held returns ml once it is known that none of its leases ran out while
// the others were taken; otherwise it releases every name and returns a
// [*StoreError], and the caller may try again.
func (m *Multi) held(ctx context.Context, ml *MultiLease) (*MultiLease, store.Grant, string, error) {
	for _, ls := range ml.leases {
		ls.notifyLoss(ml.lost)
	}
	if err := ml.Err(); err != nil {
		_ = ml.Release(ctx)
		return nil, store.Grant{}, "", &StoreError{Op: "acquire", Node: -1, Err: fmt.Errorf("a name's lease ran out while the others were taken: %w", err)}
	}
	return ml, store.Grant{}, "", nil
}

// attemptAtomic takes every name with one AcquireMulti of ms, asked as
// every attempt is (see call.ask): a reply lost to a network error is
// asked for again with the same token, and released when that fails too.
func (m *Multi) attemptAtomic(ctx context.Context, ms store.MultiStore, token string) (*MultiLease, store.Grant, string, error) {
	l := m.l
	cl := &call{l: l, c: &m.cfg}
	c := cl.c
	if l.isClosed.Load() {
		return nil, store.Grant{}, "", ErrClosed
	}
	reqs := make([]Request, len(m.names))
	for i, name := range m.names {
		reqs[i] = Request{Name: name, Token: token, Mode: ModeMutex, TTL: c.leaseTTL() + c.lockDelay}
		_ = l.holdFields(c, &reqs[i]) // a mutex's: checked by check
	}
	var mg store.MultiGrant
	sent, err := cl.ask(ctx, func(actx context.Context) (err error) {
		mg, err = ms.AcquireMulti(actx, reqs)
		return err
	}, func(rctx context.Context) { ms.ReleaseMulti(rctx, reqs) })
	if err != nil {
		return nil, store.Grant{}, "", err
	}
	if !mg.Acquired {
		return nil, mg.Refusal, reqs[mg.Refused].Name, nil
	}
	if len(mg.Fences) != len(reqs) {
		return nil, store.Grant{}, "", &StoreError{Op: "acquire", Node: -1, Err: fmt.Errorf("%d fences for %d names", len(mg.Fences), len(reqs))}
	}
	took := time.Since(sent)
	leases := make([]*Lease, 0, len(reqs))
	for i, req := range reqs {
		ls, err := l.newLease(ctx, c, req, store.Grant{Acquired: true, Fence: mg.Fences[i]}, sent, cl.log.unknownSince, time.Time{})
		if err != nil {
			// Give up every name.
			rest := make([]Request, 0, len(reqs))
			var given []*Lease
			for _, ls := range leases {
				if ls.markReleased() == nil {
					rest = append(rest, ls.req)
					given = append(given, ls)
				}
			}
			start := time.Now()
			if rest = append(rest, reqs[i:]...); len(rest) > 0 {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opTimeout)
				errs := ms.ReleaseMulti(rctx, rest)
				cancel()
				for j, ls := range given {
					ls.reportRelease(ctx, start, releaseErr(errAt(errs, j)))
				}
			}
			return nil, store.Grant{}, "", err
		}
		m.l.emit(Event{Kind: EventAcquire, Mode: ModeMutex, Name: req.Name, Result: "acquired", Fence: ls.fence, Duration: took,
			Context: ctx, Lease: ls.id, Start: sent, Attempts: 1, Owner: req.Holder})
		leases = append(leases, ls)
	}
	return m.held(ctx, &MultiLease{token: token, names: m.names, leases: leases, ms: ms, opTimeout: c.opTimeout, done: make(chan struct{})})
}

// undo releases leases taken by a failed attempt, and what the requests
// whose outcome it does not know may hold, all within one op timeout.
func (m *Multi) undo(ctx context.Context, leases []*Lease, unresolved []Request) {
	if len(leases)+len(unresolved) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.opTimeout)
	defer cancel()
	for _, ls := range leases {
		_ = ls.Release(rctx)
	}
	for _, req := range unresolved {
		_ = m.l.store.Release(rctx, req)
	}
}

// MultiLease is the hold of a [Multi]: one [Lease] per name, all with one
// token. It ends as a whole: when any of its leases is lost (past its
// validity it is, whether or not the Locker has noticed), Done closes and
// Err reports the loss; the other names stay held until Release (or their
// TTL). A MultiLease is safe for concurrent use.
type MultiLease struct {
	token  string
	names  []string
	leases []*Lease // in names order
	// ms, when set, extends and releases every name in one operation.
	ms        store.MultiStore
	opTimeout time.Duration

	once sync.Once
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func (ml *MultiLease) end(err error) {
	ml.once.Do(func() {
		ml.mu.Lock()
		ml.err = err
		ml.mu.Unlock()
		close(ml.done)
	})
}

func (ml *MultiLease) lost(err error) { ml.end(err) }

// Names returns the names held, in the order they were taken.
func (ml *MultiLease) Names() []string { return slices.Clone(ml.names) }

// Token returns the secret token shared by the leases of every name.
func (ml *MultiLease) Token() string { return ml.token }

// Fence returns the fencing token of name's grant, or 0 for a name not in
// the lock. Each name has its own fence; see [Lease.Fence].
func (ml *MultiLease) Fence(name string) int64 {
	if i, ok := slices.BinarySearch(ml.names, name); ok {
		return ml.leases[i].Fence()
	}
	return 0
}

// Fences returns every name's fence.
func (ml *MultiLease) Fences() map[string]int64 {
	out := make(map[string]int64, len(ml.names))
	for i, n := range ml.names {
		out[n] = ml.leases[i].Fence()
	}
	return out
}

// Done returns a channel closed when the hold ends: released, or any name's
// lease lost. From then on every name must be presumed held by someone else.
// As for [Lease.Done], a hold whose validity has passed is lost whether or
// not the Locker has noticed: Done then returns a closed channel, and a
// channel asked for earlier closes when the loss is noticed (by the
// Locker's scheduler, or by a call of Done, Err, TTL, Extend or Release).
func (ml *MultiLease) Done() <-chan struct{} {
	ml.expire()
	return ml.done
}

// Err returns nil while held and after Release; after a loss, or once any
// name's validity has passed, a lost lease's error (wrapping
// [ErrLeaseLost]).
func (ml *MultiLease) Err() error {
	ml.expire()
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.err
}

// expire ends the hold as lost when a name's lease is lost or past its
// validity, whether or not the Locker has noticed yet (see [Lease.Err]).
func (ml *MultiLease) expire() {
	select {
	case <-ml.done:
		return
	default:
	}
	for _, ls := range ml.leases {
		if err := ls.Err(); err != nil {
			ml.end(err)
			return
		}
	}
}

// TTL returns the shortest remaining validity of the leases, or 0 once the
// hold ended or its validity passed.
func (ml *MultiLease) TTL() time.Duration {
	select {
	case <-ml.Done():
		return 0
	default:
	}
	d := time.Duration(-1)
	for _, ls := range ml.leases {
		if t := ls.TTL(); d < 0 || t < d {
			d = t
		}
	}
	return max(d, 0)
}

// Extend renews every name's lease to ttl (0 keeps the TTL): in one
// operation of the store for an atomic Multi, otherwise name by name. It
// returns the first error as [Lease.Extend] does; a lost lease ends the
// whole hold.
func (ml *MultiLease) Extend(ctx context.Context, ttl time.Duration) error {
	if ml.ms != nil {
		return ml.extendAtomic(ctx, ttl)
	}
	for _, ls := range ml.leases {
		if err := ls.Extend(ctx, ttl); err != nil {
			return err
		}
	}
	return nil
}

// extendAtomic extends every lease in one ExtendMulti, holding each
// lease's extension slot (taken in name order) while it is in flight.
func (ml *MultiLease) extendAtomic(ctx context.Context, ttl time.Duration) error {
	if ttl != 0 && (ttl < MinTTL || ttl > MaxTTL) {
		return invalid("ttl", "must be between 100ms and 24h")
	}
	reqs := make([]Request, 0, len(ml.leases))
	for _, ls := range ml.leases {
		req, err := ls.beginExtend(ctx, ttl)
		if err != nil {
			for _, taken := range ml.leases[:len(reqs)] {
				taken.cancelExtend()
			}
			return err
		}
		reqs = append(reqs, req)
	}
	sent := time.Now()
	cctx, cancel := ml.leases[0].l.callContext(ctx)
	errs := ml.ms.ExtendMulti(cctx, reqs)
	cancel()
	var first error
	for i, ls := range ml.leases {
		if err := ls.endExtend(sent, reqs[i], errs[i]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Release gives up every name, including after a loss (the names still
// held are freed): in one operation of the store for an atomic Multi,
// otherwise name by name. It returns nil when all were released, the loss
// error when the hold had been lost, [ErrNotHeld] when it was already
// released, or the first [*StoreError]. Done is closed in every case.
func (ml *MultiLease) Release(ctx context.Context) error {
	lostErr := ml.Err()
	released := true
	ml.once.Do(func() {
		released = false
		close(ml.done)
	})
	if released && lostErr == nil {
		return ErrNotHeld
	}
	var first error
	if ml.ms != nil {
		first = ml.releaseAtomic(ctx)
	} else {
		for _, ls := range ml.leases {
			err := ls.Release(ctx)
			if err != nil && !errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrNotHeld) && first == nil {
				first = err
			}
		}
	}
	if lostErr != nil {
		return lostErr
	}
	return first
}

// releaseAtomic releases the leases still held in one operation of the
// store, and returns the first failure as a [*StoreError].
func (ml *MultiLease) releaseAtomic(ctx context.Context) error {
	start := time.Now()
	reqs := make([]Request, 0, len(ml.leases))
	var given []*Lease
	for _, ls := range ml.leases {
		if ls.markReleased() == nil {
			reqs = append(reqs, ls.req)
			given = append(given, ls)
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	callerCtx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ml.opTimeout)
		defer cancel()
	}
	var first error
	errs := ml.ms.ReleaseMulti(ctx, reqs)
	for i, ls := range given {
		err := releaseErr(errAt(errs, i))
		ls.reportRelease(callerCtx, start, err)
		if err != nil && !errors.Is(err, ErrNotHeld) && first == nil {
			first = err
		}
	}
	return first
}

// errAt returns errs[i], or an error when a store answered fewer errors
// than it was given requests.
func errAt(errs []error, i int) error {
	if i < len(errs) {
		return errs[i]
	}
	return &StoreError{Op: "release", Node: -1, Err: fmt.Errorf("%d answers for at least %d requests", len(errs), i+1)}
}
