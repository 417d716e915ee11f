package goredis

import (
	"context"

	"github.com/dlock-dev/dlock/store"
)

// The operations are internal/redisproto's Store, shared with store/valkey
// and run here over go-redis (client.go): what each returns, and what it
// does not guarantee, is documented there too.

var (
	_ store.Store         = (*Store)(nil)
	_ store.Inspector     = (*Store)(nil)
	_ store.Pinger        = (*Store)(nil)
	_ store.GrantWatcher  = (*Store)(nil)
	_ store.FenceRaiser   = (*Store)(nil)
	_ store.MultiStore    = (*Store)(nil)
	_ store.Elector       = (*Store)(nil)
	_ store.LockDelayer   = (*Store)(nil)
	_ store.Broadcaster   = (*Store)(nil)
	_ store.Resumer       = (*Store)(nil)
	_ store.ForceReleaser = (*Store)(nil)
)

// A hold's record (store.Request's Holder, Data, MinHold, MaxHold) is kept
// on the server beside the hold, atomically with its grant, and goes with
// it: the string "{<key>}:hold" for an exclusive hold (expiring with it,
// naming its token), the hash "{<key>}:holds" (token -> record) for
// readers and permits. The lock key still holds exactly the token. A
// request without a record writes and reads nothing for one: the mutex's
// acquire and release cost what they did before. A release before the
// record's min end answers nil and leaves the lock key (and the record) to
// expire at the min end; every grant, Extend and Resume sets the hold's
// expiry to at most the record's max end, and after it Extend answers
// [store.ErrNotHeld]. Records need Redis 7.0 or later (PEXPIRE GT).

// Resume implements [store.Resumer] in one script, one round trip: while
// req.Token holds req.Name in req.Mode, its hold is extended to req.TTL
// (capped at its max hold) and its fence returned. It returns
// [store.ErrNotHeld] when the token holds nothing in that mode, the hold
// passed its max hold, or a release left it to its min hold.
func (s *Store) Resume(ctx context.Context, req store.Request) (store.Grant, error) {
	return s.core.Resume(ctx, req)
}

// ForceRelease implements [store.ForceReleaser]: it ends every hold of name
// whatever its mode and token (a foreign library's key in the lock key
// too), in two round trips (the state, then one script). The fence key and
// the slot's fence mark stay, so the next grant's fence is higher; queue
// places stay, and a mutex's registered waiter or a fair lock's head is
// handed the lock as by a release. It returns the holds it ended.
func (s *Store) ForceRelease(ctx context.Context, name string) ([]store.Holder, error) {
	return s.core.ForceRelease(ctx, name)
}

// Acquire implements [store.Store] in one script, one round trip. Errors:
// [store.ErrNotSupported] or [store.ErrInvalid] (wrapped) for the request,
// or a [*store.StoreError] when the server could not be reached or did not
// answer, in which case the grant may or may not have happened; asking
// again with the same token tells.
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	return s.core.Acquire(ctx, req)
}

// Extend implements [store.Store] with one pipeline for all of reqs (one
// round trip per node of a cluster); each request's error is nil,
// [store.ErrNotHeld], its own invalid or unsupported mode, or a
// [*store.StoreError].
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
	return s.core.Extend(ctx, reqs)
}

// Release implements [store.Store] in one script (two when a mutex has
// waiters the Store did not expect). A token that holds nothing gets
// [store.ErrNotHeld] and never touches a foreign holder's key. The Store's
// waiters on the lock wake at once; a mutex with live registered waiters
// is handed to one of them inside the script (see [Store.WatchGrant]).
func (s *Store) Release(ctx context.Context, req store.Request) error {
	return s.core.Release(ctx, req)
}

// RaiseFence implements [store.FenceRaiser] for the mutex, the write side
// of the read-write lock and the election: in one script, while req.Token
// holds the lock, its fence key and its slot's fence mark each become
// max(themselves, fence).
// [store.ErrNotHeld] says the token holds nothing.
func (s *Store) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
	return s.core.RaiseFence(ctx, req, fence)
}

// Watch implements [store.Store] by the server's invalidations of the keys
// of lock name, pushed to the Store's tracking connections (see the package
// doc, "Wake-ups"): the channel receives whenever any process writes,
// deletes or expires them, a holder's renewal included. For
// [store.ModeElection] it also receives each time the server tracks the
// election anew, so an observer that reads the leader on every wake-up
// misses no change. Watch does not block.
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	return s.core.Watch(ctx, name, mode)
}

// WatchGrant implements [store.GrantWatcher] for the fair lock and the
// mutex with an SSUBSCRIBE of the lock's handoff channel for this Store:
// the Grant arrives when any process's release (or, for the fair lock, an
// acquire that finds the holder expired) hands the lock to req.Token. It
// waits up to a second, or until ctx ends, for the subscription. A mutex
// Acquire registers a Queue request as a waiter only while such a watch
// waits for its token.
func (s *Store) WatchGrant(ctx context.Context, req store.Request) (<-chan store.Grant, func(), error) {
	return s.core.WatchGrant(ctx, req)
}

// State implements [store.Inspector] in one round trip, two for a pattern
// other than the mutex, without revealing tokens; a free lock has no
// holders, and Fence is the last fence issued (0 once its counter expired).
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	return s.core.State(ctx, name)
}

// List implements [store.Inspector] by SCANning every master for the
// Store's keys: a cost in proportion to the whole keyspace, for dashboards
// and tools rather than hot paths.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	return s.core.List(ctx)
}

// Ping implements [store.Pinger] with a PING (to one node of a cluster);
// failure is a [*store.StoreError].
func (s *Store) Ping(ctx context.Context) error { return s.core.Ping(ctx) }

// Leader implements [store.Elector] in one round trip.
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	return s.core.Leader(ctx, name)
}

// SupportsLockDelay implements [store.LockDelayer]: the server expires
// every hold at its TTL by its own clock.
func (s *Store) SupportsLockDelay() bool { return true }

// AtomicMulti implements [store.MultiStore]: true on a *redis.Client (one
// node, or a Sentinel failover client), and on a *redis.ClusterClient when
// every name's key hashes to one slot (names that share a {hash tag});
// false for other clients (a Ring spreads keys over nodes).
func (s *Store) AtomicMulti(names []string) bool { return s.core.AtomicMulti(names) }

// AcquireMulti implements [store.MultiStore] in one script; names that
// AtomicMulti refuses are a [*store.InvalidError].
func (s *Store) AcquireMulti(ctx context.Context, reqs []store.Request) (store.MultiGrant, error) {
	return s.core.AcquireMulti(ctx, reqs)
}

// ExtendMulti implements [store.MultiStore] in one script.
func (s *Store) ExtendMulti(ctx context.Context, reqs []store.Request) []error {
	return s.core.ExtendMulti(ctx, reqs)
}

// ReleaseMulti implements [store.MultiStore] in one script, each name
// released (or handed over) as by [Store.Release].
func (s *Store) ReleaseMulti(ctx context.Context, reqs []store.Request) []error {
	return s.core.ReleaseMulti(ctx, reqs)
}

// Publish implements [store.Broadcaster] on the shard channel
// "<prefix>bus:<topic>", the one store/valkey Stores with the same prefix
// use, so both stores' processes hear each other.
func (s *Store) Publish(ctx context.Context, topic string, msg []byte) error {
	return s.core.Publish(ctx, topic, msg)
}

// Subscribe implements [store.Broadcaster] with one pub/sub connection per
// topic that has local subscribers. Like WatchGrant it waits up to a second
// for the subscription; one that fails is retried in the background until
// stop or Close.
func (s *Store) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	return s.core.Subscribe(ctx, topic, fn)
}
