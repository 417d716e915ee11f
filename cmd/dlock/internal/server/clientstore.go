package server

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// The /v1 leases belong to their clients: a client extends and releases
// its lease itself, possibly through another instance of the service (one
// behind the same load balancer, or this one after a restart) that knows
// it only by its token. So the Locker that grants them must never release
// one on its own — when it counts a lease lost at the end of the validity
// it measured (the client may have extended it elsewhere), or when it is
// closed at shutdown (the client keeps renewing it). That Locker runs on a
// clientStore, which drops the Releases it makes on its own and passes the
// ones made for a request: an explicit release, and the clean-up of a
// grant that nobody received or of a queue place a waiter gave up. Those
// carry forRequest in their ctx (the Locker derives the clean-up's ctx
// from the acquire's, keeping its values).

type forRequest struct{}

// requestContext marks ctx as a request's, whose releases reach the store.
func requestContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, forRequest{}, true)
}

type clientStore struct{ store.Store }

// Release implements [store.Store]: see above.
func (s clientStore) Release(ctx context.Context, req dlock.Request) error {
	if ctx.Value(forRequest{}) == nil {
		return nil // the lease's client decides
	}
	return s.Store.Release(ctx, req)
}

// AtomicMulti implements [store.MultiStore] as the store does: false when
// it takes multi-locks name by name, so the other MultiStore methods are
// called only on a store that has them.
func (s clientStore) AtomicMulti(names []string) bool {
	ms, ok := s.Store.(store.MultiStore)
	return ok && ms.AtomicMulti(names)
}

func (s clientStore) AcquireMulti(ctx context.Context, reqs []dlock.Request) (store.MultiGrant, error) {
	return s.Store.(store.MultiStore).AcquireMulti(ctx, reqs)
}

func (s clientStore) ExtendMulti(ctx context.Context, reqs []dlock.Request) []error {
	return s.Store.(store.MultiStore).ExtendMulti(ctx, reqs)
}

// ReleaseMulti implements [store.MultiStore] as Release does.
func (s clientStore) ReleaseMulti(ctx context.Context, reqs []dlock.Request) []error {
	if ctx.Value(forRequest{}) == nil {
		return make([]error, len(reqs)) // the lease's client decides
	}
	return s.Store.(store.MultiStore).ReleaseMulti(ctx, reqs)
}

// grantWatchingStore is a clientStore that keeps the store's
// [store.GrantWatcher], with which fair waiters are handed the lock.
type grantWatchingStore struct {
	clientStore
	gw store.GrantWatcher
}

func (s grantWatchingStore) WatchGrant(ctx context.Context, req dlock.Request) (<-chan store.Grant, func(), error) {
	return s.gw.WatchGrant(ctx, req)
}

// electingStore adds the store's [store.Elector] to a client store.
type electingStore struct {
	clientStore
	el store.Elector
}

func (s electingStore) Leader(ctx context.Context, name string) (dlock.Leader, error) {
	return s.el.Leader(ctx, name)
}

// grantElectingStore is a grantWatchingStore with the store's Elector.
type grantElectingStore struct {
	grantWatchingStore
	el store.Elector
}

func (s grantElectingStore) Leader(ctx context.Context, name string) (dlock.Leader, error) {
	return s.el.Leader(ctx, name)
}

// newClientStore wraps store, keeping the optional interfaces the Locker
// uses.
func newClientStore(st store.Store) store.Store {
	cs := clientStore{st}
	gw, grants := st.(store.GrantWatcher)
	el, elects := st.(store.Elector)
	switch {
	case grants && elects:
		return grantElectingStore{grantWatchingStore{cs, gw}, el}
	case grants:
		return grantWatchingStore{cs, gw}
	case elects:
		return electingStore{cs, el}
	}
	return cs
}

// SupportsLockDelay implements [store.LockDelayer] as the store does.
func (s clientStore) SupportsLockDelay() bool { return store.SupportsLockDelay(s.Store) }

// Drift implements [store.Drifter] as the store does (0 when it is not
// one: the Locker's own margin then applies), so that a /v1 lease's
// validity subtracts the margin a Locker on the store itself would.
func (s clientStore) Drift(ttl time.Duration) time.Duration {
	if dr, ok := s.Store.(store.Drifter); ok {
		return dr.Drift(ttl)
	}
	return 0
}

// leaseDriftFactor is the [dlock.WithDriftFactor] of the /v1 leases.
const leaseDriftFactor = 0.01

// validMs is the ttlMs a /v1 answer gives for a hold of ttl whose request
// was sent to the store at sent: the validity a Lease counts for it, by
// the formula of [dlock.WithDriftFactor] (TTL - elapsed - (factor*TTL +
// 2ms)) with the larger margin of a [store.Drifter] store. An instance
// that passes an extend of a lease it does not know to the store answers
// with it, so it answers as the instance that granted the lease does
// (Lease.TTL, by the same formula).
func (s *Server) validMs(sent time.Time, ttl time.Duration) int64 {
	drift := time.Duration(float64(ttl)*leaseDriftFactor) + 2*time.Millisecond
	if dr, ok := s.v1.Store().(store.Drifter); ok {
		drift = max(drift, dr.Drift(ttl))
	}
	return durationMs(time.Until(sent.Add(ttl - drift)))
}
