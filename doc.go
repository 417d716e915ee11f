// Package dlock is distributed locking on Valkey/Redis (and other stores)
// with leases, fencing tokens and a lease-loss signal the holder can act on.
//
// # Leases
//
// Every lock is granted as a [Lease]: a hold that lasts TTL unless extended.
// The holder proves ownership with the lease's secret token, which only it
// knows; nobody else can extend or release the lease. A holder that crashes
// loses nothing but time: its lease runs out and the lock is free again.
//
// The Locker measures each lease on the client's monotonic clock: valid until
// start + TTL - drift, where start is when the acquire was sent and drift is
// a margin for clock rate differences (see [WithDriftFactor]). With
// [WithAutoRenew] the Locker's one scheduler renews all its leases at about
// TTL/3, pipelining renewals that fall due together. When a renewal is
// refused, or cannot be confirmed before the local validity ends, the lease
// is lost: [Lease.Done] closes and [Lease.Err] returns [ErrLeaseLost] — before
// the store can give the lock to anyone else, as long as clocks run at about
// the same rate. [Lease.Context] is a context cancelled at that moment (or
// at release), with the loss as its [context.Cause]; [Locker.Do] runs a
// function with it. [WithMaxHold] bounds the watchdog: renewal stops at the
// max hold and the lease is lost then, so a holder that hangs while its
// process renews does not hold the lock for ever.
//
// # What a lease does not guarantee
//
// A process can stop for longer than its lease (a GC pause, SIGSTOP, a VM
// migration, a slow disk) and resume believing it still holds the lock; a
// store that loses data (failover to a replica that had not received the
// grant, a restart without persistence, eviction) can hand the same lock to
// two holders. No lease can prevent that. What can is the fencing token:
// every grant carries [Lease.Fence], a number strictly greater than that of
// every earlier grant of the lock. Send it with each write to the protected
// resource and have the resource refuse a fence lower than the highest it
// has accepted; a stale holder's writes are then rejected, whatever failed.
// Fences survive restarts of a store that keeps nothing on disk: they are
// issued as max(last+1, store time in ms × 1000).
//
// # Which pattern
//
//   - [Mutex.TryLock]: fail fast when the lock is held; the error carries how
//     long the holder has left ([LockedError]).
//   - [Mutex.Lock]: wait for the lock; waiters are woken by the store when it
//     is released or expires, with capped backoff only as a fallback. On
//     Valkey a release hands a contended lock to one waiter, which wakes
//     holding it.
//   - [WithAutoRenew] or [Locker.Do]: long or unpredictable work (the watchdog);
//     with [WithMaxHold], for at most that long.
//   - Reentrant, read-write, fair (FIFO) and semaphore locks: see the
//     Locker's constructors for each.
//
// # Which store
//
// store/valkey is one Valkey/Redis node, a primary with replicas or a Redis
// Cluster: fast, and safe with fencing. store/redlock spreads each lock over
// N independent nodes and survives the loss of a minority of them. store/memory
// keeps locks in the process, for tests and a single-process service. Every
// store passes the same conformance suite, package storetest.
//
// What a store implements (the [store.Store] interface, the requests and
// grants it exchanges with a Locker, its optional capabilities such as
// [store.Inspector]) is package store, for store implementers. A lock user
// needs it only to name a store's type: a slice of nodes for store/redlock,
// or a type assertion on [Locker.Store].
package dlock
