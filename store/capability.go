package store

import (
	"context"
	"time"
)

// This file holds the optional interfaces a [Store] may implement; a Locker
// finds them by type assertion.

// Inspector is implemented by stores that can describe their locks, for the
// service and dashboard. It never reveals tokens.
type Inspector interface {
	State(ctx context.Context, name string) (State, error)
	List(ctx context.Context) ([]State, error)
}

// State describes one lock as a store sees it.
type State struct {
	Name    string        `json:"name"`
	Mode    Mode          `json:"-"`
	Holders int           `json:"holders"`
	TTL     time.Duration `json:"-"`     // longest remaining hold
	Fence   int64         `json:"fence"` // last issued fence
	Queue   int           `json:"queue"` // waiters (fair queue, writer intents)
	Limit   int           `json:"limit,omitempty"`
	// Owners describes each live hold (a reentrant hold is one, each
	// reader and semaphore permit its own), in no set order: len(Owners)
	// is Holders. A hold granted without a record, and a foreign library's
	// key, shows as an Owner of "" with a zero Since.
	Owners []Holder `json:"owners"`
}

// Holder describes one hold of a lock, as recorded by its grant
// ([Request.Holder], [Request.Data]). It never reveals the token.
type Holder struct {
	Owner string    `json:"owner"`          // "" when unknown
	Since time.Time `json:"since"`          // the grant, by the store's clock; zero when unknown
	Data  string    `json:"data,omitempty"` // the caller's data
	Fence int64     `json:"fence"`          // the hold's fence; 0 when unknown
}

// Resumer is implemented by stores on which a process can take back a
// hold it was granted, by its token, after a restart.
type Resumer interface {
	// Resume confirms atomically that req.Token holds req.Name in
	// req.Mode (a repeat by the holder: nothing is granted) and extends
	// the hold to req.TTL, capped by its MaxHold. It returns a Grant with
	// Acquired true, the hold's Fence (as first issued, or raised), Count
	// for a reentrant hold, TTL (what the hold was extended to) and
	// MaxHoldLeft. A token that holds nothing, or holds it in another
	// mode, gets ErrNotHeld and changes nothing.
	Resume(ctx context.Context, req Request) (Grant, error)
}

// ForceReleaser is implemented by stores on which an operator can end a
// lock's holds without their tokens.
type ForceReleaser interface {
	// ForceRelease ends every hold of name, in whatever mode and by
	// whatever token (a foreign library's key too), even one kept by a
	// MinHold, and wakes the name's watchers. Queue places are kept. The
	// fence counter is kept, so the next grant's fence is above every
	// ended hold's: the forced holders' late writes are fenced out. It
	// returns the holds it ended (as [State.Owners] shows them), none when
	// nobody held the name.
	ForceRelease(ctx context.Context, name string) ([]Holder, error)
}

// Pinger is implemented by stores that can check they are reachable.
type Pinger interface {
	Ping(ctx context.Context) error
}

// LockDelayer is implemented by stores on which dlock.WithLockDelay works:
// stores that end every hold at its TTL by their own clock, whatever the
// holder does, so that a hold kept for TTL + delay keeps the name that long.
// SupportsLockDelay reports whether this store (with its current
// configuration) does. On other stores a Locker refuses a lock-delay with
// an error wrapping [ErrNotSupported].
type LockDelayer interface {
	SupportsLockDelay() bool
}

// SupportsLockDelay reports whether s implements [LockDelayer] and
// supports lock-delay.
func SupportsLockDelay(s Store) bool {
	ld, ok := s.(LockDelayer)
	return ok && ld.SupportsLockDelay()
}

// MinHolder is implemented by a store that may not support
// [Request.MinHold]: SupportsMinHold reports whether it does. Every store
// should (a Release before grant + MinHold leaves the hold to the store's
// own expiry); one that cannot keep a name past a release without a timer
// in some process (store/postgres's Advisory: a released advisory lock is
// free at once) returns false, and its Acquire refuses a MinHold on an
// exclusive mode with an error wrapping [ErrNotSupported], before it
// touches the backend.
type MinHolder interface {
	SupportsMinHold() bool
}

// SupportsMinHold reports whether s supports [Request.MinHold]: true
// unless s implements [MinHolder] and says it does not.
func SupportsMinHold(s Store) bool {
	mh, ok := s.(MinHolder)
	return !ok || mh.SupportsMinHold()
}

// Drifter is implemented by stores whose holds need a larger clock-drift
// margin than the Locker's own (see WithDriftFactor in store/redlock): the
// Locker subtracts the larger of the two from every lease's validity.
type Drifter interface {
	// Drift returns the margin for a hold of ttl.
	Drift(ttl time.Duration) time.Duration
}

// Elector is implemented by stores that support [ModeElection].
type Elector interface {
	// Leader returns the current holder of name in ModeElection: its Value,
	// its fence as Term and its remaining time by the store's clock. It
	// returns [ErrNoLeader] when nobody leads, whatever else holds the name.
	// It never reveals the leader's token.
	Leader(ctx context.Context, name string) (Leader, error)
}

// Leader describes the leader of an election.
type Leader struct {
	Value string
	// Term is the fence of the leader's grant: strictly greater than every
	// earlier leader's term (and every earlier exclusive grant's fence) on
	// the same name.
	Term int64
	// TTL is how long the leader's hold has left by the store's clock.
	TTL time.Duration
}

// GrantWatcher is implemented by stores that hand a released lock straight
// to a queued waiter inside the release (the fair lock, [ModeFair], and on
// some stores the mutex, [ModeMutex], to a registered waiter). The
// waiter learns of its grant from the wake-up itself, so the handoff costs
// one trip from the releaser to the store and one from the store to the
// waiter, with no acquire round trip in between, and one release wakes one
// waiter.
//
// WatchGrant returns a channel that receives the Grant when the lock named by
// req is handed to req.Token, and a function that stops watching. It must be
// called before the Acquire that queues req.Token, so no handoff is missed.
// Deliveries are best effort: a waiter still refreshes its queue entry by
// Acquire (which reports a hold it was handed) and so learns of a grant whose
// wake-up was lost. A store must deliver a Grant only for a hold it gave to
// req.Token, and at most once.
type GrantWatcher interface {
	WatchGrant(ctx context.Context, req Request) (<-chan Grant, func(), error)
}

// MultiStore is implemented by stores that can take several mutex names in
// one atomic operation (one script on Valkey/Redis). A dlock.Multi whose
// names the store reports as atomic takes, extends and releases them in one
// operation each; other multi-locks take their names one by one in a
// global order, with undo on refusal.
type MultiStore interface {
	// AtomicMulti reports whether names can be taken in one operation: on
	// Valkey/Redis, all on one node or, on a cluster, in one hash slot.
	AtomicMulti(names []string) bool
	// AcquireMulti takes every request or none, atomically. The requests
	// (1 to [MaxMultiNames] of them) are ModeMutex, share one Token and
	// name distinct names that AtomicMulti accepts; each name is an
	// ordinary mutex hold with its own fence, issued as Acquire issues it,
	// so a name held in any mode (or by a foreign library's key) refuses
	// the whole request and nothing changes. A retry by the token that
	// holds every name refreshes their TTLs and returns the same fences.
	// Refusals are a MultiGrant with Acquired false, not errors.
	AcquireMulti(ctx context.Context, reqs []Request) (MultiGrant, error)
	// ExtendMulti renews every request's lease to its TTL; ReleaseMulti
	// gives every request's name up (handing it to a registered waiter as
	// Release does). Each returns one error per request, as Extend and
	// Release do: nil, ErrNotHeld, or the store's failure.
	ExtendMulti(ctx context.Context, reqs []Request) []error
	ReleaseMulti(ctx context.Context, reqs []Request) []error
}

// MultiGrant is a store's answer to [MultiStore.AcquireMulti].
type MultiGrant struct {
	Acquired bool
	// Fences holds, when Acquired, each request's fence, in request order.
	Fences []int64
	// Refused is, when not Acquired, the index of a request whose name is
	// held, and Refusal the Grant that Acquire would have answered for it
	// (RetryAfter, Held).
	Refused int
	Refusal Grant
}

// FenceRaiser is implemented by stores that can raise the fence counter of a
// lock while a token holds it. A quorum store (store/redlock) needs it to
// issue fences that are monotonic across independent nodes: after winning a
// quorum it writes the fence it will use back to the nodes it holds, so that
// every later grant on those nodes is issued a higher one. See
// docs/safety.md for the argument.
type FenceRaiser interface {
	// RaiseFence sets the fence counter of req.Name to max(counter, fence),
	// atomically with a check that req.Token holds the lock in req.Mode,
	// and returns nil. It returns [ErrNotHeld] when the token holds nothing;
	// the counter is then unchanged. It never lowers the counter. A
	// repeated Acquire by the holder may afterwards return either the
	// fence first issued or the raised one. In [ModeElection] (where
	// supported) it also makes the leadership's term max(term, fence) and
	// its value req.Value, as [Elector.Leader] then reports, and wakes the
	// name's watchers: store/redlock settles its majority's term with it.
	RaiseFence(ctx context.Context, req Request, fence int64) error
}

// Broadcaster is implemented by stores that can carry small messages to
// every process using the same store (pub/sub on Valkey/Redis, NOTIFY on
// PostgreSQL, a watched key prefix on etcd). Replicas of `dlock serve` on
// one store share their lock events through it. Delivery is best effort:
// at most once per subscriber, in publish order from one publisher where
// the store keeps it, and messages published while a subscriber reconnects
// are lost. Every subscriber receives its own process's messages too.
// Implementations carry messages of at least [MaxBroadcast] bytes.
type Broadcaster interface {
	// Publish sends msg to the current subscribers of topic. It returns
	// an error when the store did not take the message.
	Publish(ctx context.Context, topic string, msg []byte) error
	// Subscribe calls fn with each message published on topic, one call at
	// a time, until stop is called (stop waits for a call in progress).
	// It returns once the subscription is in place or ctx ends (the store
	// then keeps trying in the background); errors are for a closed store
	// or a bad topic. fn must not block.
	Subscribe(ctx context.Context, topic string, fn func(msg []byte)) (stop func(), err error)
}

// MaxBroadcast is the largest message every [Broadcaster] carries.
const MaxBroadcast = 4000
