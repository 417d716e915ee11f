package valkey

import (
	"log/slog"
	"time"

	"github.com/dlock-dev/dlock"
)

// An Option configures a [Store]. Invalid values make [New], [Dial] and
// [Open] return an error wrapping [dlock.ErrInvalid].
type Option func(*config)

type config struct {
	prefix       string
	waitReplicas int
	waitTimeout  time.Duration
	strictEvict  bool
	logger       *slog.Logger
	err          error
}

func defaultConfig() config {
	return config{prefix: DefaultPrefix, logger: slog.New(slog.DiscardHandler)}
}

func (c *config) fail(field, reason string) {
	if c.err == nil {
		c.err = &dlock.InvalidError{Field: field, Reason: reason}
	}
}

// DefaultPrefix is the key prefix of [WithPrefix]'s default.
const DefaultPrefix = "lock:"

// WithPrefix sets the prefix of every lock key: the mutex on name is the
// string key prefix+name. Default "lock:", the key other Redis lock
// libraries use for the same name when given that prefix. The prefix may be
// empty. A hash tag in it ("{locks}:") puts every lock in one cluster slot.
func WithPrefix(p string) Option {
	return func(c *config) { c.prefix = p }
}

// WithWaitReplicas makes every grant wait, in the same round trip, until n
// replicas acknowledged it (Redis WAIT n timeout). A grant that fewer
// replicas confirmed within timeout is released and Acquire returns a
// [*ReplicationError] (wrapping [ErrNotReplicated] and [dlock.ErrUnavailable]).
// This narrows, but does not close, the window in which a failover to a
// replica forgets a lock: WAIT is not consensus. Default off. n must be at
// least 1 and timeout positive (rounded up to whole milliseconds).
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(c *config) {
		if n < 1 {
			c.fail("wait replicas", "must be at least 1")
			return
		}
		if timeout <= 0 {
			c.fail("wait timeout", "must be positive")
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
	return func(c *config) { c.strictEvict = true }
}

// WithLogger sets the logger for warnings (evicting maxmemory-policy) and
// debug messages. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail("logger", "must not be nil")
			return
		}
		c.logger = l
	}
}
