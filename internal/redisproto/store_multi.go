package redisproto

import (
	"context"
	"fmt"

	"github.com/dlock-dev/dlock/store"
)

// AtomicMulti implements [store.MultiStore]: true when one node serves the
// keys of every name (Client.SameNode) and writes are not confirmed by
// replicas (Config.Confirmer: a dlock.Multi then takes its names one by
// one, each confirmed).
func (s *Store) AtomicMulti(names []string) bool {
	if s.confirm != nil || len(names) == 0 {
		return false
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.l.Key(n)
	}
	return s.c.SameNode(keys)
}

// checkMulti validates reqs of operation op and that their names can be
// taken together.
func (s *Store) checkMulti(op string, reqs []store.Request, withTTL bool) ([]string, error) {
	names, err := s.l.CheckMulti(reqs, withTTL)
	if err == nil && !s.AtomicMulti(names) {
		err = &store.InvalidError{Field: "names", Reason: "not all in one cluster slot"}
	}
	if err == nil && s.closed.Load() {
		err = s.errClosed(op)
	}
	return names, err
}

// AcquireMulti implements [store.MultiStore]: one script, one round trip.
func (s *Store) AcquireMulti(ctx context.Context, reqs []store.Request) (store.MultiGrant, error) {
	names, err := s.checkMulti("acquire", reqs, true)
	if err != nil {
		return store.MultiGrant{}, err
	}
	for _, r := range reqs {
		if err := store.ValidHold(r); err != nil {
			return store.MultiGrant{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return store.MultiGrant{}, err
	}
	v, err := s.eval(ctx, MultiAcquireScript, s.l.MultiKeys(names), s.l.MultiAcquireArgs(reqs)).Int64s()
	if err != nil {
		return store.MultiGrant{}, s.fail("acquire", err)
	}
	mg, err := ParseMultiGrant(v, len(names))
	if err != nil {
		return store.MultiGrant{}, fmt.Errorf("dlock: %s acquire: %w", s.name, err)
	}
	return mg, nil
}

// ExtendMulti implements [store.MultiStore]: one script, one round trip.
func (s *Store) ExtendMulti(ctx context.Context, reqs []store.Request) []error {
	return s.multiHeld(ctx, "extend", reqs, true)
}

// ReleaseMulti implements [store.MultiStore]: one script, one round trip;
// the Store's waiters on the names released are woken at once.
func (s *Store) ReleaseMulti(ctx context.Context, reqs []store.Request) []error {
	errs := s.multiHeld(ctx, "release", reqs, false)
	for i, err := range errs {
		if err == nil {
			s.hub.Wake(s.l.Key(reqs[i].Name))
		}
	}
	return errs
}

// multiHeld runs the extend or release script on reqs.
func (s *Store) multiHeld(ctx context.Context, op string, reqs []store.Request, extend bool) []error {
	all := func(err error) []error {
		errs := make([]error, len(reqs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	names, err := s.checkMulti(op, reqs, extend)
	if err != nil {
		return all(err)
	}
	if err := ctx.Err(); err != nil {
		return all(err)
	}
	sc, keys := MultiReleaseScript, s.l.MultiReleaseKeys(names)
	if extend {
		sc, keys = MultiExtendScript, s.l.MultiKeys(names)
	}
	v, err := s.eval(ctx, sc, keys, s.l.MultiArgs(reqs)).Int64s()
	if err != nil {
		return all(s.fail(op, err))
	}
	errs, err := ParseMultiHeld(v, len(names))
	if err != nil {
		return all(fmt.Errorf("dlock: %s %s: %w", s.name, op, err))
	}
	return errs
}
