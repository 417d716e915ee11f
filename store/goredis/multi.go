package goredis

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// The atomic multi-lock: every name of a dlock.Multi in one script (see
// internal/redisproto, multi.go), the same scripts store/valkey runs.

var _ store.MultiStore = (*Store)(nil)

// AtomicMulti implements [store.MultiStore]: true on a *redis.Client (one
// node, or a Sentinel failover client), and on a *redis.ClusterClient when
// every name's key hashes to one slot (names that share a {hash tag});
// false for other clients (a Ring spreads keys over nodes).
func (s *Store) AtomicMulti(names []string) bool {
	if len(names) == 0 {
		return false
	}
	switch s.client.(type) {
	case *redis.Client:
		return true
	case *redis.ClusterClient:
		return s.l.NamesInOneSlot(names)
	}
	return false
}

// checkMulti validates reqs and that their names can be taken together.
func (s *Store) checkMulti(reqs []store.Request, withTTL bool) ([]string, error) {
	names, err := s.l.CheckMulti(reqs, withTTL)
	if err == nil && !s.AtomicMulti(names) {
		err = &store.InvalidError{Field: "names", Reason: "not all in one cluster slot"}
	}
	if err == nil && s.isClosed() {
		err = errClosed
	}
	return names, err
}

// AcquireMulti implements [store.MultiStore]: one script, one round trip.
// Errors are those of [Store.Acquire], and an [*store.InvalidError] for
// names AtomicMulti refuses.
func (s *Store) AcquireMulti(ctx context.Context, reqs []store.Request) (store.MultiGrant, error) {
	names, err := s.checkMulti(reqs, true)
	if err != nil {
		return store.MultiGrant{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.MultiGrant{}, err
	}
	v, err := s.run(ctx, redisproto.MultiAcquireScript, s.l.MultiKeys(names), s.l.MultiArgs(reqs)).Int64Slice()
	if err != nil {
		return store.MultiGrant{}, fail("acquire", err)
	}
	mg, err := redisproto.ParseMultiGrant(v, len(names))
	if err != nil {
		return store.MultiGrant{}, fmt.Errorf("dlock: goredis acquire: %w", err)
	}
	return mg, nil
}

// ExtendMulti implements [store.MultiStore]: one script, one round trip.
func (s *Store) ExtendMulti(ctx context.Context, reqs []store.Request) []error {
	return s.multiHeld(ctx, "extend", reqs, true)
}

// ReleaseMulti implements [store.MultiStore]: one script, one round trip;
// each name is released as [Store.Release] releases a mutex (handed over
// to a live registered waiter, if any), and this Store's waiters on the
// names are woken at once.
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
	names, err := s.checkMulti(reqs, extend)
	if err != nil {
		return all(err)
	}
	if err := ctx.Err(); err != nil {
		return all(err)
	}
	sc, keys := redisproto.MultiReleaseScript, s.l.MultiReleaseKeys(names)
	if extend {
		sc, keys = redisproto.MultiExtendScript, s.l.MultiKeys(names)
	}
	v, err := s.run(ctx, sc, keys, s.l.MultiArgs(reqs)).Int64Slice()
	if err != nil {
		return all(fail(op, err))
	}
	errs, err := redisproto.ParseMultiHeld(v, len(names))
	if err != nil {
		return all(fmt.Errorf("dlock: goredis %s: %w", op, err))
	}
	return errs
}
