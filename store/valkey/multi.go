package valkey

import (
	"context"
	"fmt"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// The atomic multi-lock: every name of a dlock.Multi in one script (see
// internal/redisproto, multi.go).

var _ store.MultiStore = (*Store)(nil)

// AtomicMulti implements [store.MultiStore]: true on one node (a primary
// with its replicas included), and on a cluster when every name's key
// hashes to one slot (names that share a {hash tag}). A Store with
// [WithWaitReplicas] takes names one by one, each confirmed by WAIT.
func (s *Store) AtomicMulti(names []string) bool {
	if s.cfg.waitReplicas > 0 || len(names) == 0 {
		return false
	}
	if s.client.Mode() != vk.ClientModeCluster {
		return true
	}
	return s.l.NamesInOneSlot(names)
}

// checkMulti validates reqs and that their names can be taken together.
func (s *Store) checkMulti(reqs []store.Request, withTTL bool) ([]string, error) {
	names, err := s.l.CheckMulti(reqs, withTTL)
	if err == nil && !s.AtomicMulti(names) {
		err = &store.InvalidError{Field: "names", Reason: "not all in one cluster slot"}
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
	keys, args := s.l.MultiKeys(names), s.l.MultiArgs(reqs)
	res := s.do(ctx, 1, func(_ int, eval bool) vk.Completed {
		return cmd(s.client, redisproto.MultiAcquireScript, keys, args, eval)
	})
	v, err := res[0].AsIntSlice()
	if err != nil {
		return store.MultiGrant{}, fail("acquire", err)
	}
	mg, err := redisproto.ParseMultiGrant(v, len(names))
	if err != nil {
		return store.MultiGrant{}, fmt.Errorf("dlock: valkey acquire: %w", err)
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
			s.hub.Wake(s.key(reqs[i].Name))
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
	args := s.l.MultiArgs(reqs)
	res := s.do(ctx, 1, func(_ int, eval bool) vk.Completed {
		return cmd(s.client, sc, keys, args, eval)
	})
	v, err := res[0].AsIntSlice()
	if err != nil {
		return all(fail(op, err))
	}
	errs, err := redisproto.ParseMultiHeld(v, len(names))
	if err != nil {
		return all(fmt.Errorf("dlock: valkey %s: %w", op, err))
	}
	return errs
}
