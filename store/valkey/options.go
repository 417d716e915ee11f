package valkey

import (
	"log/slog"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto"
)

// An Option configures a [Store]. Invalid values make [New], [Dial] and
// [Open] return an error wrapping [store.ErrInvalid].
type Option func(*config)

type config struct {
	redisproto.Options
	waitReplicas int
	waitTimeout  time.Duration
}

func defaultConfig() config { return config{Options: redisproto.DefaultOptions()} }

// DefaultPrefix is the key prefix of [WithPrefix]'s default.
const DefaultPrefix = redisproto.DefaultPrefix

// WithPrefix sets the prefix of every lock key: the mutex on name is the
// string key prefix+name. Default "lock:", the key other Redis lock
// libraries use for the same name when given that prefix. The prefix may be
// empty. A hash tag in it ("{locks}:") puts every lock in one cluster slot.
// With an empty prefix, or one that starts with "{", a name whose key would
// have the form of another name's auxiliary key ("{x}:fence") is refused.
func WithPrefix(p string) Option {
	return func(c *config) { c.Prefix = p }
}

// DefaultFenceRetention is [WithFenceRetention]'s default.
const DefaultFenceRetention = redisproto.DefaultFenceRetention

// WithFenceRetention sets how long a lock name's fence key,
// "{lock:<name>}:fence", stays after the TTL of the name's last hold ends
// (released or expired). The key holds the last fence issued for the name,
// beside its holds: a holder's repeated acquire and a reader joining find
// the fence there. Once it is gone the name keeps nothing on the server;
// its next fence is above the fence mark of its hash slot (one key per
// slot, kept for good) and the clock floor (see the package doc).
//
// The retention matters only while clients of dlock versions before
// 2026-11 still lock names on the server: they keep no mark, and issue the
// clock floor, server time in ms*1000, to a name without its fence key.
// That is above every fence of the name as long as the key stayed for the
// largest step back of the server's clock plus the largest lead of a fence
// over the clock floor when issued, with room for that version's grants
// meanwhile. The default, [DefaultFenceRetention] (61 s), is twice a clock
// step back of at most 30 s plus a second of lead; the key costs about 155
// bytes of server memory per name for that long (docs/safety.md). d must be at least a second (rounded up to whole
// milliseconds).
func WithFenceRetention(d time.Duration) Option {
	return func(c *config) { c.SetFenceRetention(d) }
}

// WithWaitReplicas makes every write a lease counts on wait, in the same
// round trip, until n replicas acknowledged it (Redis WAIT n timeout):
//
//   - grants of every mode ([Store.Acquire]; a [dlock.Multi] takes its
//     names one by one, see [Store.AtomicMulti]): a grant fewer replicas
//     confirmed within timeout is released, and Acquire returns a
//     [*ReplicationError];
//   - extensions of every mode ([Store.Extend]: [dlock.Lease.Extend] and
//     renewals): an extension not confirmed is a *ReplicationError; the
//     server keeps the new TTL, the lease keeps its old validity (Extend
//     returns a [*store.StoreError], renewal tries again while the lease
//     is valid);
//   - raised fences ([Store.RaiseFence], store/redlock's write-back);
//   - handoffs: a release still hands the fair lock to the head of its
//     queue inside its script, but the waiter counts on that grant only
//     once an Acquire of its own confirmed it ([Store.WatchGrant] is
//     refused: waiters are woken by [Store.Watch] and take the lock by
//     Acquire). The mutex is not handed over at all: its waiters do not
//     register.
//
// WAIT follows a write to a scratch key of the lock, so it confirms
// everything the server had written when it ran the operation, whoever
// wrote it (a handoff, a TTL another acquisition of a reentrant lock set).
// Every attempt waits, a refused one too: while too few replicas answer, a
// refusal takes up to timeout. Releases and queue places are not
// confirmed: a failover that loses one delays others until the TTL runs
// out, or costs a waiter its place, and lets no two hold at once.
// [*ReplicationError] wraps [ErrNotReplicated] and [store.ErrUnavailable].
//
// This narrows, but does not close, the window in which a failover to a
// replica forgets a lock: WAIT is not consensus (a replica that did not
// acknowledge may still be promoted, and an acknowledged write is in the
// replica's memory, not on its disk). Default off. n must be at least 1
// and timeout positive (rounded up to whole milliseconds).
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(c *config) {
		if n < 1 {
			c.Invalid("wait replicas", "must be at least 1")
			return
		}
		if timeout <= 0 {
			c.Invalid("wait timeout", "must be positive")
			return
		}
		c.waitReplicas, c.waitTimeout = n, timeout
	}
}

// WithStrictEviction makes the constructor fail with an [*EvictionError]
// (wrapping [ErrEvictionPolicy]) when a node's maxmemory-policy may evict lock keys (any allkeys-* or
// volatile-* policy: lock keys all have a TTL). Without it such a policy is
// logged as a warning. A node that does not answer CONFIG GET (disabled or
// renamed, as on some managed services) is logged and not an error.
func WithStrictEviction() Option {
	return func(c *config) { c.StrictEviction = true }
}

// WithLogger sets the logger for warnings (evicting maxmemory-policy) and
// debug messages. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.SetLogger(l) }
}
