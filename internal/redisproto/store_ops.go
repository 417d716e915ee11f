package redisproto

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// releaseTimeout bounds the release of a grant that replicas did not
// confirm.
const releaseTimeout = 5 * time.Second

// Acquire implements [store.Store]: one script, one round trip. While the
// Store has waiters on the lock, the attempt is a tracked read of the watch
// key (Config.Tracker, see [Hub]); with a Config.Confirmer, a grant that
// replicas did not confirm is released and the Confirmer's error returned.
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	o, err := s.ops(req.Mode)
	if err != nil {
		return store.Grant{}, err
	}
	if err := s.l.CheckRequest(req); err != nil {
		return store.Grant{}, err
	}
	if err := store.ValidHold(req); err != nil {
		return store.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Grant{}, err
	}
	if s.closed.Load() {
		return store.Grant{}, s.errClosed("acquire")
	}
	record := HasRecord(req)
	if req.Mode == store.ModeMutex && req.Queue && (record || !s.watching(req.Name, req.Mode, req.Token)) {
		// Register only a waiter that listens for its handoff (WatchGrant),
		// and that has no record: a handoff grants without one.
		req.Queue = false
	}
	if record && req.Mode == store.ModeMutex {
		// A grant with a record sets the waiters flag: its release takes
		// the record's short form.
		s.l.Record(req.Name)
	}
	r, unconfirmed, read := s.attempt(ctx, o, req)
	if err := r.Err(); err != nil {
		return store.Grant{}, s.fail("acquire", err)
	}
	g, err := acquired(r)
	if le, ok := err.(*store.LimitError); ok {
		le.Name, le.Asked = req.Name, req.Limit
		return store.Grant{}, le
	}
	if err != nil {
		return store.Grant{}, fmt.Errorf("dlock: %s acquire: %w", s.name, err)
	}
	if !g.Acquired {
		if req.Mode == store.ModeMutex {
			s.l.Contend(req.Name) // its releases send the full form
		}
		// Only a refusal is sure to have read the key (ReadsWatchKey); a
		// grant wrote it, which ends its tracking anyway.
		if read.key != "" {
			s.hub.Armed(read.key, read.gen)
		}
		return g, nil
	}
	if unconfirmed != nil {
		return store.Grant{}, s.unconfirmed(ctx, req, unconfirmed)
	}
	return g, nil
}

// trackedRead names the key an acquire attempt was a tracked read of, at
// its generation (see Hub.Tracked); key is "" for an attempt that was not.
type trackedRead struct {
	key string
	gen uint64
}

// attempt sends the acquire script of o for req: as a tracked read of the
// watch key while the Store has waiters whose attempts keep it tracked
// (with a Tracker), and otherwise confirmed by replicas (with a
// Confirmer; unconfirmed is its error) or plainly.
func (s *Store) attempt(ctx context.Context, o *Ops, req store.Request) (r Reply, unconfirmed error, read trackedRead) { //nolint:revive,staticcheck // error-return, ST1008: unconfirmed is a result of the grant, read a value for the caller
	call := Call{Script: o.AcquireScript(req), Keys: o.AcquireKeys(s.l, req), Args: o.AcquireArgs(ctx, s.l, req), Name: req.Name}
	if s.track != nil && o.ReadsWatchKey && !s.hub.Idle() {
		k := o.WatchKey(s.l, req.Name)
		if gen, ok := s.hub.Tracked(k); ok {
			r, tracked := s.track.EvalTracked(ctx, call)
			if tracked {
				read = trackedRead{k, gen}
			}
			return r, nil, read
		}
	}
	if s.confirm != nil {
		rs, errs := s.confirm.EvalConfirmed(ctx, "acquire", []Call{call})
		return rs[0], errs[0], read
	}
	return s.c.Eval(ctx, call), nil, read
}

// unconfirmed releases the grant to req that replicas did not confirm (err,
// the Confirmer's), whatever ctx's state, and returns err, joined with the
// release's error if that failed.
func (s *Store) unconfirmed(ctx context.Context, req store.Request, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if rerr := s.Release(rctx, req); rerr != nil && !errors.Is(rerr, store.ErrNotHeld) {
		return errors.Join(err, rerr)
	}
	return err
}

// acquired decodes the reply of an acquire script (see [Ops]).
func acquired(r Reply) (store.Grant, error) {
	if f, err := r.Int64(); err == nil {
		return Granted(f)
	}
	v, err := r.Int64s()
	if err != nil {
		return store.Grant{}, err
	}
	return ParseGrant(v)
}

// write runs calls whose writes a lease counts on (operation op): with a
// Confirmer, confirmed by replicas, and then with, for each, nil or the
// error saying it was not.
func (s *Store) write(ctx context.Context, op string, calls []Call) ([]Reply, []error) {
	if s.confirm != nil {
		return s.confirm.EvalConfirmed(ctx, op, calls)
	}
	return s.c.EvalMulti(ctx, calls), nil
}

// Extend implements [store.Store]: all requests in one round trip
// (pipelined; per node of a cluster). Each error is nil, [store.ErrNotHeld],
// ErrNotSupported/ErrInvalid for that request, a [*store.StoreError], or
// the Confirmer's error for an extension replicas did not confirm.
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
	errs := make([]error, len(reqs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	calls := make([]Call, 0, len(reqs))
	at := make([]int, 0, len(reqs)) // calls[j] is for reqs[at[j]]
	for i, req := range reqs {
		o, err := s.ops(req.Mode)
		if err == nil {
			err = s.l.CheckRequest(req)
		}
		if err == nil && s.closed.Load() {
			err = s.errClosed("extend")
		}
		if err != nil {
			errs[i] = err
			continue
		}
		calls = append(calls, Call{Script: o.Extend, Keys: o.ExtendKeys(s.l, req.Name), Args: o.Args(s.l, req), Name: req.Name})
		at = append(at, i)
	}
	if len(calls) == 0 {
		return errs
	}
	rs, unconfirmed := s.write(ctx, "extend", calls)
	for j, r := range rs {
		err := s.held("extend", r)
		if err == nil && unconfirmed != nil {
			err = unconfirmed[j]
		}
		errs[at[j]] = err
	}
	return errs
}

// held decodes the 1/0 reply of an extend or release script.
func (s *Store) held(op string, r Reply) error {
	v, err := r.Int64()
	switch {
	case err != nil:
		return s.fail(op, err)
	case v == 0:
		return store.ErrNotHeld
	}
	return nil
}

// Release implements [store.Store]: one script, one round trip (a mutex
// release whose short form finds waiters it did not expect sends the full
// form: two; see [Ops.ReleaseCall]). It returns [store.ErrNotHeld] when
// req.Token holds nothing. The Store's waiters on the lock are woken at
// once.
func (s *Store) Release(ctx context.Context, req store.Request) error {
	o, err := s.ops(req.Mode)
	if err != nil {
		return err
	}
	if err := s.l.CheckToken(req); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return s.errClosed("release")
	}
	keys, args, short, recorded := o.ReleaseCall(s.l, req)
	sc := o.Release
	switch {
	case recorded:
		sc = o.RecordRelease
	case short:
		sc = o.ShortRelease
	}
	r := s.eval(ctx, sc, keys, args)
	if n, err := r.Int64(); short && err == nil && n == ReleaseWaiters {
		// The name may have waiters: the full form hands over to them.
		s.l.Contend(req.Name)
		r = s.eval(ctx, o.Release, o.Keys(s.l, req.Name), o.Args(s.l, req))
	}
	if err := s.held("release", r); err != nil {
		return err
	}
	if !s.hub.Idle() {
		s.hub.Wake(o.WatchKey(s.l, req.Name))
		if req.Mode != store.ModeMutex {
			s.hub.Wake(s.l.Key(req.Name)) // waiters of every pattern watch the main key
		}
	}
	return nil
}

// RaiseFence implements [store.FenceRaiser] in one script, one round trip,
// confirmed by replicas with a Confirmer.
func (s *Store) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
	o, err := s.ops(req.Mode)
	if err != nil || o.Raise == nil {
		return fmt.Errorf("%w: %s store cannot raise the fence of mode %v", store.ErrNotSupported, s.name, req.Mode)
	}
	if err := s.l.CheckToken(req); err != nil {
		return err
	}
	if fence <= 0 || fence >= MaxFence {
		return &store.InvalidError{Field: "fence", Reason: "must be positive and below 2^53"}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return s.errClosed("fence")
	}
	call := Call{Script: o.Raise, Keys: o.Keys(s.l, req.Name), Args: o.RaiseArgs(s.l, req, fence), Name: req.Name}
	rs, unconfirmed := s.write(ctx, "fence", []Call{call})
	if err := s.held("fence", rs[0]); err != nil || unconfirmed == nil {
		return err
	}
	return unconfirmed[0]
}
