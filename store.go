package dlock

import (
	"context"
	"time"
)

// Mode names the pattern a [Request] belongs to. A store keeps the keys of
// each mode apart and implements every mode it supports atomically; a mode it
// cannot support makes it return an error wrapping [ErrNotSupported].
type Mode uint8

const (
	// ModeMutex is the exclusive lock: the plain key holds the holder's token.
	ModeMutex Mode = iota
	// ModeReentrant is an exclusive lock that the same Owner may take again.
	ModeReentrant
	// ModeRead is the shared side of a read-write lock.
	ModeRead
	// ModeWrite is the exclusive side of a read-write lock.
	ModeWrite
	// ModeFair is an exclusive lock granted in arrival order.
	ModeFair
	// ModeSemaphore is a lock with Limit shared holders.
	ModeSemaphore
	// ModeElection is a leader election: an exclusive hold of the name that
	// keeps the leader's Value beside it; the grant's fence is the term.
	// A store that supports it implements [Elector].
	ModeElection
)

var modeNames = [...]string{"mutex", "reentrant", "read", "write", "fair", "semaphore", "election"}

// String returns the lower-case name of m, as used in metrics and the HTTP API.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "unknown"
}

// Shared reports whether holders of mode m may hold a name together with
// other holders of the same mode: readers, and semaphore permits (of one
// limit). Every other mode is exclusive.
func (m Mode) Shared() bool { return m == ModeRead || m == ModeSemaphore }

// Coexist is the rule that makes a name one lock, whatever pattern holds it:
// a request in mode asked may share the name with a hold in mode held only
// when both are the same shared mode (readers with readers, permits with
// permits of the same limit, which the store checks). Exclusive modes
// exclude every other holder of the name, of any mode; within its own mode
// a pattern adds its own rules (a reentrant owner re-enters, a waiting
// writer keeps new readers out, a fair queue goes in order).
func Coexist(held, asked Mode) bool { return held == asked && held.Shared() }

// ParseMode returns the Mode whose String is s.
func ParseMode(s string) (Mode, bool) {
	for i, n := range modeNames {
		if n == s {
			return Mode(i), true
		}
	}
	return 0, false
}

// Request is one operation on one lock, as a [Store] sees it.
type Request struct {
	Name  string        // lock name, 1-256 bytes
	Token string        // the holder's secret: only it can extend or release
	TTL   time.Duration // lease length for Acquire and Extend
	Mode  Mode
	Owner string // ModeReentrant: who may re-enter (defaults to Token)
	Limit int    // ModeSemaphore: number of permits
	// Queue asks a store to keep the caller's place when Acquire is refused:
	// a fair-lock ticket, or a writer's intent that blocks new readers. The
	// place is itself a lease of QueueTTL; Release with the same Token drops it.
	Queue    bool
	QueueTTL time.Duration
	// Value is, in ModeElection, the candidate's value (at most
	// [MaxValueLen] bytes), kept with the hold and returned by
	// [Elector.Leader]. A retried Acquire by the holder keeps the first value.
	Value string
}

// Grant is a store's answer to Acquire.
type Grant struct {
	Acquired bool
	// Fence is the fencing token of the grant: strictly greater than the
	// fence of every earlier grant of an exclusive hold on the same name.
	Fence int64
	// RetryAfter is, when Acquired is false, how long the current hold has
	// left by the store's clock (0 when unknown).
	RetryAfter time.Duration
	// Held is, when Acquired is false, the mode of the name's current hold:
	// a name is one lock whatever pattern holds it (see [Coexist]). A key
	// set by a foreign library on a Valkey/Redis store is reported as
	// ModeMutex. When nobody holds the name and the refusal comes from the
	// request's own mode (a fair queue or a waiting writer ahead of the
	// caller), it is the request's mode.
	Held Mode
	// Count is the hold count of a reentrant grant.
	Count int
	// Position is the caller's place in a fair queue (0 is the head).
	Position int
}

// Store is the seam between the lockers and a backend. Every method is one
// atomic operation (one round trip on a networked store) and idempotent per
// Token: a retried Acquire with the same Token that already holds returns the
// same Fence. A name is one lock: whatever mode holds a name, a request in
// another mode is decided by [Coexist] atomically, refused with the held
// mode in [Grant.Held], and the name's one fence counter serves every mode.
// A semaphore request whose Limit differs from the limit the name's permits
// are held with fails with a [*LimitError]. Implementations must pass the
// storetest conformance suite, including its cross-pattern suite.
type Store interface {
	// Acquire tries once to grant req. A refusal is a Grant with Acquired
	// false, not an error; errors are for failures of the store itself.
	Acquire(ctx context.Context, req Request) (Grant, error)
	// Extend renews every request's lease to its TTL, pipelined where the
	// store can. It returns one error per request: nil when extended,
	// ErrNotHeld when the token no longer holds the lock.
	Extend(ctx context.Context, reqs []Request) []error
	// Release gives up req.Token's hold (or queue place). It returns
	// ErrNotHeld when the token holds nothing.
	Release(ctx context.Context, req Request) error
	// Watch returns a channel that receives a value when the lock name may
	// have become free (released, handed over and, where the store can tell,
	// expired), and a function that stops watching. Sends never block:
	// a slow receiver sees one pending wake-up.
	Watch(ctx context.Context, name string, mode Mode) (<-chan struct{}, func(), error)
}

// Inspector is implemented by stores that can describe their locks, for the
// service and dashboard. It never reveals tokens.
type Inspector interface {
	State(ctx context.Context, name string) (State, error)
	List(ctx context.Context) ([]State, error)
}

// LockDelayer is implemented by stores on which [WithLockDelay] works:
// stores that end every hold at its TTL by their own clock, whatever the
// holder does, so that a hold kept for TTL + delay keeps the name that long.
// SupportsLockDelay reports whether this store (with its current
// configuration) does. On other stores a Locker refuses a lock-delay with
// an error wrapping [ErrNotSupported].
type LockDelayer interface {
	SupportsLockDelay() bool
}

// SupportsLockDelay reports whether store implements [LockDelayer] and
// supports lock-delay.
func SupportsLockDelay(store Store) bool {
	ld, ok := store.(LockDelayer)
	return ok && ld.SupportsLockDelay()
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

// Pinger is implemented by stores that can check they are reachable.
type Pinger interface {
	Ping(ctx context.Context) error
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

// MultiStore is implemented by stores that can take several mutex names in
// one atomic operation (one script on Valkey/Redis). A [Multi] whose names
// the store reports as atomic takes, extends and releases them in one
// operation each; other multi-locks take their names one by one in a
// global order, with undo on refusal.
type MultiStore interface {
	// AtomicMulti reports whether names can be taken in one operation: on
	// Valkey/Redis, all on one node or, on a cluster, in one hash slot.
	AtomicMulti(names []string) bool
	// AcquireMulti takes every request or none, atomically. The requests
	// are ModeMutex, share one Token and name distinct names that
	// AtomicMulti accepts; each name is an ordinary mutex hold with its own
	// fence, issued as Acquire issues it, so a name held in any mode (or by
	// a foreign library's key) refuses the whole request and nothing
	// changes. A retry by the token that holds every name refreshes their
	// TTLs and returns the same fences. Refusals are a MultiGrant with
	// Acquired false, not errors.
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
