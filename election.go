package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// MaxValueLen bounds a candidate's value in an election.
const MaxValueLen = store.MaxValueLen

// Leader describes the leader of an election: its value, its term (the
// fence of its grant) and its remaining time. It is [store.Leader].
type Leader = store.Leader

// Election is a leader election on one name: at most one candidate leads at
// a time, and each leader's term is a fence strictly greater than every
// earlier leader's.
//
// On the store, leadership is an exclusive hold of the name ([ModeElection])
// that keeps the leader's value beside it, so it obeys "a name is one lock":
// a mutex, a reader or a leader of the same name exclude each other. The
// leader's lease is renewed by the Locker's scheduler; when a renewal is
// refused or cannot be confirmed in time, the lease is lost and its Done
// closes before the store could elect anyone else (under bounded clock
// drift, as for every [Lease]). A leader that stalls longer than its TTL
// (GC, SIGSTOP) may resume believing it leads: pass [Lease.Fence], the term,
// with every write and have the resource refuse lower terms.
//
// Elections need a store implementing [store.Elector] (memory, valkey, goredis,
// redlock, etcd, postgres, zookeeper); on other stores (postgres' advisory
// store) Campaign and Leader return an error wrapping [ErrNotSupported].
// An Election is safe for concurrent use; one Election is one candidate.
type Election struct {
	l    *Locker
	name string
	cfg  config

	mu    sync.Mutex
	lease *Lease // the leadership this candidate won, while not ended
}

// Election returns the election called name. Options override the Locker's
// defaults for this election (the TTL is the leader's lease; leases are
// always auto-renewed); a bad option or name is reported by Campaign and
// Leader.
func (l *Locker) Election(name string, opts ...Option) *Election {
	return &Election{l: l, name: name, cfg: l.lockConfig(append(opts, WithAutoRenew()))}
}

func (e *Election) elector() (store.Elector, error) {
	if e.cfg.err != nil {
		return nil, e.cfg.err
	}
	if err := ValidName(e.name); err != nil {
		return nil, err
	}
	el, ok := e.l.store.(store.Elector)
	if !ok {
		return nil, notSupported("elections")
	}
	return el, nil
}

// Campaign waits until this candidate leads, then returns its leadership
// lease: [Lease.Fence] is the term, [Lease.Done] closes when leadership is
// lost or resigned, and the lease renews itself until then. Waiting
// candidates are woken by the store when the name frees, and fall back to
// a timer at the leader's expiry and capped backoff. value (at most
// [MaxValueLen] bytes) is what [Election.Leader] and [Election.Observe]
// report while this candidate leads.
//
// When this candidate already leads with the same value, Campaign returns
// its current lease; with another value it returns an [*InvalidError]
// (Resign first). When ctx ends it returns an error matching both ctx.Err()
// and [ErrLocked] and leaves nothing behind. It also returns what
// [Mutex.Lock] returns, and an error wrapping [ErrNotSupported] on a store
// without elections.
func (e *Election) Campaign(ctx context.Context, value string) (*Lease, error) {
	if _, err := e.elector(); err != nil {
		return nil, err
	}
	if len(value) > MaxValueLen {
		return nil, invalid("value", "must be at most 4096 bytes")
	}
	e.mu.Lock()
	if ls := e.lease; ls != nil && ls.Err() == nil && !ls.over() {
		e.mu.Unlock()
		if ls.req.Value != value {
			return nil, invalid("value", "differs from the value this candidate leads with; resign first")
		}
		return ls, nil
	}
	e.mu.Unlock()
	ls, err := e.l.acquire(ctx, &e.cfg, Request{Name: e.name, Mode: ModeElection, Value: value}, true)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lease = ls
	e.mu.Unlock()
	return ls, nil
}

func notSupported(what string) error {
	return fmt.Errorf("%w: %s", ErrNotSupported, what)
}

// Resign gives up the leadership this candidate won, so that another
// candidate can be elected at once (even with [WithLockDelay]). It returns
// what [Lease.Release] returns, and [ErrNotHeld] when this candidate does
// not lead.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	ls := e.lease
	e.lease = nil
	e.mu.Unlock()
	if ls == nil {
		return ErrNotHeld
	}
	return ls.Release(ctx)
}

// Leader returns the current leader's value, term and remaining time by the
// store's clock, or [ErrNoLeader] when nobody leads. With a ctx without a
// deadline the store call is bounded by the op timeout ([WithOpTimeout]). It returns a
// [*StoreError] when the store failed, an [*InvalidError] for a bad name,
// and an error wrapping [ErrNotSupported] on a store without elections.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	el, err := e.elector()
	if err != nil {
		return Leader{}, err
	}
	cctx, cancel := e.l.callContext(ctx)
	defer cancel()
	ld, err := el.Leader(cctx, e.name)
	switch {
	case err == nil, errors.Is(err, ErrNoLeader), errors.Is(err, ErrNotSupported), errors.Is(err, ErrInvalid):
		return ld, err
	case ctx.Err() != nil:
		return Leader{}, errors.Join(err, ctx.Err())
	default:
		return Leader{}, &StoreError{Op: "leader", Node: -1, Err: err}
	}
}

// Observe streams leadership changes until ctx ends or the Locker closes,
// then closes the channel. The first value is the leadership when Observe
// starts; each later value differs from the one before: a new leader (a
// higher Term), or the zero Leader when nobody leads any more. Values come
// in order (terms only increase). Observe waits for the store to push each
// change: the store's Watch of the name wakes it when a leader is elected
// or resigns, also while nobody leads, and a timer at the leader's expiry
// covers stores that do not push expiry. It re-reads on its own only as a
// safety net, after 30s without a push; when the store's Watch of the
// election fails (a store without pushes), it reads every maximum backoff
// instead (see [WithBackoff]; default 1s). A receiver that falls
// behind is given the leadership current when it reads, so a leader that
// came and went meanwhile may be skipped. Store failures are retried with
// capped backoff. On a bad name or a store without elections the channel
// is closed at once; call [Election.Leader] first to see the error.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	el, err := e.elector()
	l := e.l
	l.mu.Lock()
	closed := l.closed
	if err == nil && !closed {
		l.wg.Add(1)
	}
	l.mu.Unlock()
	if err != nil || closed {
		close(ch)
		return ch
	}
	go func() {
		defer l.wg.Done()
		defer close(ch)
		e.observe(ctx, el, ch)
	}()
	return ch
}

// observeSafety is how long Observe waits for a push before it reads the
// leadership again anyway, in case a push was lost.
const observeSafety = 30 * time.Second

func (e *Election) observe(ctx context.Context, el store.Elector, ch chan<- Leader) {
	c := &e.cfg
	w := newWaiter(e.l.store, c)
	defer w.close()
	w.watch(ctx, e.name, ModeElection)
	var last Leader
	first := true
	for {
		ld, err := el.Leader(ctx, e.name)
		if err != nil && !errors.Is(err, ErrNoLeader) {
			if ctx.Err() != nil {
				return
			}
			c.logger.Debug("dlock: observe failed; retrying", "name", e.name, "err", err)
			if woke, _ := w.sleep(ctx, w.bo.next(), e.l.stop); woke == wokeEnded {
				return
			}
			continue
		}
		w.bo.reset()
		if err != nil {
			ld = Leader{}
		}
		if first || ld.Term != last.Term {
			first = false
			select {
			case ch <- ld:
			case <-ctx.Done():
				return
			case <-e.l.stop:
				return
			}
			last = ld
			continue // read again: it may have changed while we sent
		}
		if woke, _ := w.sleep(ctx, e.observeDelay(w, ld), e.l.stop); woke == wokeEnded {
			return
		}
	}
}

// observeDelay is how long Observe waits for a push before it reads the
// leadership ld again.
func (e *Election) observeDelay(w *waiter, ld Leader) time.Duration {
	switch {
	case !w.watching():
		delay := e.cfg.maxBackoff // no pushes: poll
		if ld.Term != 0 {
			delay = min(delay, ld.TTL+time.Millisecond)
		}
		return delay
	case ld.Term != 0:
		return ld.TTL + time.Millisecond // expiry is not always pushed
	default:
		return observeSafety // the next push wakes us first
	}
}
