package dlock

import (
	"fmt"
	"log/slog"
	"time"
)

// Option configures a [Locker] (in [New]) or one lock (in [Locker.Mutex] and
// the other pattern constructors, where it overrides the Locker's setting).
type Option func(*config)

type config struct {
	ttl         time.Duration
	autoRenew   bool
	renewEvery  time.Duration // 0: ttl/3
	minBackoff  time.Duration
	maxBackoff  time.Duration
	driftFactor float64
	queueTTL    time.Duration
	opTimeout   time.Duration
	logger      *slog.Logger
	observer    func(Event)
	owner       string
	onPosition  func(int) // fair lock: see WithQueuePosition
	lockDelay   time.Duration
	maxHold     time.Duration // 0: none
	minHold     time.Duration // WithMinHold; 0: none
	holder      string        // WithHolder; "": none
	holderData  string        // WithHolderData
	ownerOnly   bool          // WithOwnerReleaseOnly
	err         error
}

func defaultConfig() config {
	return config{
		ttl:         30 * time.Second,
		minBackoff:  10 * time.Millisecond,
		maxBackoff:  time.Second,
		driftFactor: 0.01,
		opTimeout:   5 * time.Second,
		logger:      slog.New(slog.DiscardHandler),
	}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.err == nil && c.renewEvery > c.ttl/2 {
		// Checked once every option is in, whatever their order; a lock's
		// options are checked with the Locker's under them.
		c.fail("renewInterval", fmt.Sprintf("%v must be at most half the TTL (%v)", c.renewEvery, c.ttl))
	}
	if c.err == nil && c.maxHold > 0 && c.minHold > c.maxHold {
		c.fail("minHold", fmt.Sprintf("%v must not exceed the max hold (%v)", c.minHold, c.maxHold))
	}
	return c.err
}

func (c *config) fail(field, reason string) {
	if c.err == nil {
		c.err = invalid(field, reason)
	}
}

// MinTTL and MaxTTL bound every lease length; MaxHold bounds [WithMaxHold].
const (
	MinTTL  = 100 * time.Millisecond
	MaxTTL  = 24 * time.Hour
	MaxHold = 365 * 24 * time.Hour
)

// WithTTL sets the lease length. Default 30s; from 100ms to 24h.
func WithTTL(d time.Duration) Option {
	return func(c *config) {
		if d < MinTTL || d > MaxTTL {
			c.fail("ttl", "must be between 100ms and 24h")
			return
		}
		c.ttl = d
	}
}

// WithAutoRenew keeps leases alive until they are released: the Locker's one
// renewal scheduler extends them at about TTL/3, pipelining the renewals of
// all leases due together. Default off; [Locker.Do] always renews.
func WithAutoRenew() Option {
	return func(c *config) { c.autoRenew = true }
}

// WithRenewInterval sets how often auto-renewal extends a lease. Default
// TTL/3; it must be positive and at most TTL/2 so that one lost renewal still
// leaves time for another. A larger interval is refused with an
// [*InvalidError] for "renewInterval", by [New] for the Locker's TTL, and by
// TryLock, Lock and the other acquiring calls for a lock's own TTL (an
// interval set on the Locker holds for every lock's TTL too). A lease later
// extended ([Lease.Extend]) to a TTL under twice the interval is renewed
// every third of that TTL instead.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("renewInterval", "must be positive")
			return
		}
		c.renewEvery = d
	}
}

// WithBackoff sets the bounds of the capped exponential backoff with full
// jitter that waiting falls back on when the store's wake-ups are missed.
// Default 10ms to 1s; min must be positive and at most max.
func WithBackoff(min, max time.Duration) Option { //nolint:revive // redefines-builtin-id: min and max are the documented parameter names
	return func(c *config) {
		if min <= 0 || max < min {
			c.fail("backoff", "min must be positive and at most max")
			return
		}
		c.minBackoff, c.maxBackoff = min, max
	}
}

// WithDriftFactor sets the share of the TTL assumed lost to clock drift
// between client and store; a lease's local validity is TTL - elapsed -
// (factor*TTL + 2ms). Default 0.01; from 0 to 0.5. The margin is also all
// the time a holder has to notice [Lease.Done] before the store may grant
// the lock again: on a loaded machine, where goroutines can run 100ms late,
// make factor*TTL larger than that.
func WithDriftFactor(f float64) Option {
	return func(c *config) {
		if !(f >= 0 && f <= 0.5) {
			c.fail("driftFactor", "must be between 0 and 0.5")
			return
		}
		c.driftFactor = f
	}
}

// WithQueueTTL sets how long a waiting entry (fair-lock ticket, writer
// intent, a mutex waiter's registration for a handoff) lives on the store
// without being refreshed by its waiter, so a dead waiter is pruned. Default: the lease TTL, capped at 10s; at least 100ms.
func WithQueueTTL(d time.Duration) Option {
	return func(c *config) {
		if d < MinTTL || d > MaxTTL {
			c.fail("queueTTL", "must be between 100ms and 24h")
			return
		}
		c.queueTTL = d
	}
}

// WithOpTimeout bounds each store call made without a caller's deadline
// (renewals, the ownership re-check after a lost reply, releases, and an
// acquire attempt or [Lease.Extend] whose ctx has no deadline, even one
// that never ends such as context.Background(): the call then fails with
// a [*StoreError], its outcome unknown, once the bound passes), and how
// long an acquire call still in flight when the caller's ctx ends may take
// to answer: it is not abandoned at once, so that the cleanup that follows
// cannot overtake it and leave a grant or queue place behind. A store that
// stalls can therefore delay the return of an ended Lock or TryLock by up
// to this long. Default 5s. Calls made together share one expiry, so a
// call's bound may be up to 1/32 longer (5s: up to 156ms).
func WithOpTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("opTimeout", "must be positive")
			return
		}
		c.opTimeout = d
	}
}

// MaxLockDelay bounds [WithLockDelay].
const MaxLockDelay = time.Hour

// WithLockDelay keeps a name held for d after a hold on it ends by expiry
// or lease loss rather than by release (Chubby's lock-delay): a holder that
// stalled past its lease, and may still be writing, gets d more before
// anyone else is granted the name. A clean Release frees the name at once.
// Default 0 (off); from 0 to 1h.
//
// The delay is judged by the store's clock: the store holds every lease
// for its TTL plus d, while the Locker treats the lease as valid for its
// TTL only (less drift). A lease that is lost is therefore not released
// on the store; it runs out d after the store last extended it. Refusals'
// RetryAfter, [store.State.TTL] and [Leader.TTL] include the delay. It works on
// every pattern, on stores implementing [store.LockDelayer] (memory, valkey,
// goredis, redlock, etcd, the PostgreSQL lease table); on others acquiring returns
// an error wrapping [ErrNotSupported]. It costs every crashed holder's name
// d of unavailability; see docs/patterns.md for the trade-off.
func WithLockDelay(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > MaxLockDelay {
			c.fail("lockDelay", "must be between 0 and 1h")
			return
		}
		c.lockDelay = d
	}
}

// WithMaxHold bounds how long a lease may be held, counted from when the
// request that got its grant was sent or, when an earlier request of the
// same acquire got no answer (it may have been granted), from the first
// such request's send: renewal (and [Lease.Extend]) never
// takes the lease past d, and once d is reached the lease ends like any
// lost lease: [Lease.Done] closes and [Lease.Err] returns an error wrapping
// both [ErrLeaseLost] and [ErrMaxHold]. It is the watchdog's bound: a holder
// that hangs while its process keeps renewing holds the name for d at most.
//
// The lease counts itself lost a drift margin before d (never after), and
// every request for the store's hold is capped to end at d: the acquire
// asks for min(TTL, d), and the last extension for what is left of d when
// it is sent, so the store's hold ends at d, later only by how much longer
// that extension took to reach the store than the acquire did. A lease lost
// at its max hold is then released on the store at once (the name is free
// for others promptly), as every lost lease is; with [WithLockDelay] its
// hold is left to run out instead, the delay after.
//
// The bound is also kept with the hold on the store ([store.Request]'s
// MaxHold), so that whoever extends the hold by its token (another
// process, another replica of the lock service, a resumed lease) is capped
// alike: the store ends the hold at most d after its grant by the store's
// clock, plus the lock-delay and the drift margin of d (so the store never
// ends a hold its lease still counts valid). A lock handed to a waiter
// (a fair lock, a mutex on a store that hands it over) is granted at the
// handover, which may come before the request that claims it: its lease
// counts d from the send of the last request the store refused before
// the handover. A lease taken with a caller's token ([Locker.Acquire]'s
// req.Token) that held the name already counts d from this call, while
// the store counts from its first grant and ends it there. On a [Reentrant] lock, whose
// re-entries share one hold, the bound is kept by each lease alone.
// Default 0 (none); from 100ms to 365 days, or 0 to turn off a Locker's
// default.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) {
		if d != 0 && (d < MinTTL || d > MaxHold) {
			c.fail("maxHold", "must be 0 or between 100ms and 8760h")
			return
		}
		c.maxHold = d
	}
}

// WithOwnerReleaseOnly leaves the store's hold of a lease to its owner,
// whoever holds its token: the Locker never releases it on its own. When
// it counts the lease lost (its validity passed unrenewed, a renewal
// failed, its max hold came) and when it is closed, the lease ends for the
// Locker ([Lease.Done] closes, [Lease.Err] reports the loss), but the
// store keeps the hold until the owner releases it ([Lease.Release], or a
// Release on the store with its token, from this process or another) or
// its TTL runs out; the owner may extend it meanwhile, by its token. Only
// what no owner was ever told of is still given up at once: a grant that
// arrives after its acquire gave up, a queue place left, a multi-lock's
// names taken before one was refused.
//
// It is for leases whose owner lives elsewhere: the lock service's /v1
// leases belong to its HTTP clients, which extend and release them through
// any instance of the service by their token, so the Locker that granted
// one must not release it when it stops watching it. Default off (a lost
// lease is released at once, and Close releases every lease it holds).
func WithOwnerReleaseOnly() Option {
	return func(c *config) { c.ownerOnly = true }
}

// WithOwner sets the owner ID of a reentrant lock; holders with the same
// owner ID re-enter. Default: the lease carried in the ctx, else a new ID.
func WithOwner(id string) Option {
	return func(c *config) {
		if id == "" || len(id) > 256 {
			c.fail("owner", "must be 1-256 bytes")
			return
		}
		c.owner = id
	}
}

// WithLogger sets the logger. Default: discard. Tokens are never logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithObserver registers a function called for every [Event], from several
// goroutines at once; [Event] says when each is delivered and in what
// order. It should be fast: a slow observer holds up the caller whose call
// an event reports, and the Locker's own events (renewals, losses) queue
// behind it, though it never delays a renewal or a loss signal. It must
// not call the Locker's Close, which waits for the events queued. Default
// none. See packages dlockprom
// (Prometheus) and dlockotel (OpenTelemetry spans and metrics), each in a
// module of its own.
func WithObserver(fn func(Event)) Option {
	return func(c *config) { c.observer = fn }
}

func (c *config) queueTTLOrDefault() time.Duration {
	if c.queueTTL > 0 {
		return c.queueTTL
	}
	return min(c.ttl, 10*time.Second)
}

// leaseTTL is the TTL of a lease's grant: the TTL, capped at the max hold.
func (c *config) leaseTTL() time.Duration {
	if c.maxHold > 0 {
		return min(c.ttl, c.maxHold)
	}
	return c.ttl
}

func (c *config) renewInterval() time.Duration {
	if c.renewEvery > 0 {
		return c.renewEvery // at most ttl/2: see apply
	}
	return c.ttl / 3
}
