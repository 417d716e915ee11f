package valkey

import (
	"context"

	"github.com/dlock-dev/dlock/store"
)

// The operations are internal/redisproto's Store, shared with store/goredis
// and run here over valkey-go (client.go); these document them for this
// store.

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

// Acquire implements [store.Store]: one script, one round trip (plus WAIT
// in the same round trip under [WithWaitReplicas], after every attempt,
// granted or not). It returns an error
// wrapping [store.ErrNotSupported] for a mode this store does not run,
// [store.ErrInvalid] for a bad request, a [*store.StoreError] when the
// server could not be reached or did not answer (the grant may or may not
// have happened; asking again with the same token tells), and a
// [*ReplicationError] when replicas did not confirm the grant (which was
// released before returning).
func (s *Store) Acquire(ctx context.Context, req store.Request) (store.Grant, error) {
	return s.core.Acquire(ctx, req)
}

// Extend implements [store.Store]: all requests go out in one pipelined
// round trip (per node of a cluster; under [WithWaitReplicas], followed by
// WAIT, per hash slot). Each error is nil, [store.ErrNotHeld],
// ErrNotSupported/ErrInvalid for that request, a [*store.StoreError], or a
// [*ReplicationError] when replicas did not confirm the extension: the
// server keeps the new TTL, and the caller must count on the old one (a
// dlock.Lease does: the error is not ErrNotHeld).
func (s *Store) Extend(ctx context.Context, reqs []store.Request) []error {
	return s.core.Extend(ctx, reqs)
}

// Release implements [store.Store]: one script, one round trip (a mutex
// release whose short form finds waiters it did not expect sends the full
// form: two; see [redisproto.Ops.ReleaseCall]). It returns
// [store.ErrNotHeld] when req.Token holds nothing, so a foreign holder's key
// is never touched. Waiters of this Store on the lock are woken at once.
// Releasing a mutex that has live registered waiters hands it to one of
// them in the same script (see [Store.WatchGrant]); a Release by a
// registered waiter's token drops its registration.
func (s *Store) Release(ctx context.Context, req store.Request) error {
	return s.core.Release(ctx, req)
}

// RaiseFence implements [store.FenceRaiser] in one script, one round trip:
// while req.Token holds the lock, the name's fence key and its slot's fence
// mark each become max(themselves, fence). It returns [store.ErrNotHeld] when the token holds
// nothing, an error wrapping [store.ErrNotSupported] for a mode without a
// write-back script (the mutex, the write side of the read-write lock
// and the election have one), [store.ErrInvalid] for a bad
// request, a [*store.StoreError] when the server did not answer, and under
// [WithWaitReplicas] a [*ReplicationError] when replicas did not confirm
// the raise (the server keeps it).
// A repeated Acquire of the mutex by the holder returns the raised fence
// afterwards; the write side keeps returning the fence it was granted.
func (s *Store) RaiseFence(ctx context.Context, req store.Request, fence int64) error {
	return s.core.RaiseFence(ctx, req, fence)
}

// Watch implements [store.Store]. The channel receives when the lock may have
// become free: released through this Store, or (Stores made by Dial or Open)
// its key written, deleted or expired on the server. A holder's renewal
// also wakes waiters, who then find the lock still held. Expiry is noticed
// when the server expires the key, which Redis does within about 100ms
// of the deadline for a few keys. For [store.ModeElection] the channel
// also receives when a leader is elected (the election's gate key is
// written), and each time the server tracks the gate anew (after Watch and
// after each change), so that an observer who reads the leader after each
// wake-up misses no change. ctx is not used: Watch does not block.
// It returns an error wrapping [store.ErrNotSupported] for a mode this store
// does not run, and for ModeElection on a Store without server pushes
// (made by [New]), on which a new leader would go unseen: callers then poll
// (dlock.Election.Observe every maximum backoff).
func (s *Store) Watch(ctx context.Context, name string, mode store.Mode) (<-chan struct{}, func(), error) {
	return s.core.Watch(ctx, name, mode)
}

// WatchGrant implements [store.GrantWatcher] for the fair lock and the
// mutex: the channel receives the Grant when a release (or, for the fair
// lock, an acquire finding the holder's lease run out) hands the lock to
// req.Token. It waits, up to a second or until ctx ends, for the lock's
// subscription to be confirmed, so that a handoff right after the caller
// queues is not missed. It returns an error wrapping [store.ErrNotSupported]
// for the other modes, and for both under [WithWaitReplicas]: the release
// script announces a handoff before any WAIT could confirm it, so there a
// waiter learns of its grant by its next Acquire, whose WAIT does (the fair
// lock is still handed to the head of its queue inside the release; the
// mutex, whose waiters then do not register, is not handed over).
//
// A mutex Acquire with req.Queue registers its token as a waiter only while
// a WatchGrant of this Store waits for that token; otherwise Queue is
// ignored, so that no lock is handed to a token nobody listens for.
func (s *Store) WatchGrant(ctx context.Context, req store.Request) (<-chan store.Grant, func(), error) {
	return s.core.WatchGrant(ctx, req)
}

// State implements [store.Inspector] in one round trip (two for a pattern
// other than the mutex). A free lock has no holders; Fence is the last
// fence issued (0 once the fence key expired, see [WithFenceRetention]). A
// mutex's Queue counts the waiters registered for a handoff whose
// registration is live. It never reveals tokens.
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	return s.core.State(ctx, name)
}

// List implements [store.Inspector]: the state of every held lock whose key
// has the Store's prefix, by name. It SCANs every node (every primary of a
// cluster), so it costs time in proportion to the whole keyspace; it is
// meant for dashboards and tools, not hot paths. Locks taken or freed
// during the scan may or may not be listed.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	return s.core.List(ctx)
}

// Ping implements [store.Pinger]: PING to the server (to one node of a
// cluster). It returns a [*store.StoreError] when that fails.
func (s *Store) Ping(ctx context.Context) error { return s.core.Ping(ctx) }

// Leader implements [store.Elector] in one round trip.
func (s *Store) Leader(ctx context.Context, name string) (store.Leader, error) {
	return s.core.Leader(ctx, name)
}

// SupportsLockDelay implements [store.LockDelayer]: every hold expires at
// its TTL by the server's clock (PX).
func (s *Store) SupportsLockDelay() bool { return true }

// AtomicMulti implements [store.MultiStore]: true on one node (a primary
// with its replicas included), and on a cluster when every name's key
// hashes to one slot (names that share a {hash tag}). A Store with
// [WithWaitReplicas] takes names one by one, each confirmed by WAIT.
func (s *Store) AtomicMulti(names []string) bool { return s.core.AtomicMulti(names) }

// AcquireMulti implements [store.MultiStore]: one script, one round trip.
// Errors are those of [Store.Acquire], and an [*store.InvalidError] for
// names AtomicMulti refuses.
func (s *Store) AcquireMulti(ctx context.Context, reqs []store.Request) (store.MultiGrant, error) {
	return s.core.AcquireMulti(ctx, reqs)
}

// ExtendMulti implements [store.MultiStore]: one script, one round trip.
func (s *Store) ExtendMulti(ctx context.Context, reqs []store.Request) []error {
	return s.core.ExtendMulti(ctx, reqs)
}

// ReleaseMulti implements [store.MultiStore]: one script, one round trip;
// each name is released as [Store.Release] releases a mutex (handed over
// to a live registered waiter, if any), and this Store's waiters on the
// names are woken at once.
func (s *Store) ReleaseMulti(ctx context.Context, reqs []store.Request) []error {
	return s.core.ReleaseMulti(ctx, reqs)
}

// Publish implements [store.Broadcaster]: msg goes out on the channel
// "<prefix>bus:<topic>" by SPUBLISH (PUBLISH before Redis 7), where the
// Stores of store/goredis with the same prefix hear it too.
func (s *Store) Publish(ctx context.Context, topic string, msg []byte) error {
	return s.core.Publish(ctx, topic, msg)
}

// Subscribe implements [store.Broadcaster] with one subscription per topic
// on valkey-go's shared connection, whatever the number of local
// subscribers. It waits up to a second (or until ctx ends) for the
// subscription to be confirmed; a failed subscription is retried in the
// background until stop or Close.
func (s *Store) Subscribe(ctx context.Context, topic string, fn func([]byte)) (func(), error) {
	return s.core.Subscribe(ctx, topic, fn)
}

// AuditKey returns the key of the fair lock's audit stream: the last 1000 or
// so grants and releases of lock name, each with fields "event" (grant or
// release), "fence" and "holder" (the first 12 hex digits of the SHA-1 of
// the holder's token, enough to pair a grant with its release, useless for
// extending or releasing the lock). Read it with XRANGE or XREVRANGE; it
// expires a day after the last grant.
func (s *Store) AuditKey(name string) string { return s.l.AuditKey(name) }
