// Package store is the API between dlock's lockers and a backend: what a
// store implements and what it returns. Lock users do not need it (they
// call package dlock); store implementers do, and import only this package,
// never the root one.
//
// # What to implement
//
// A store implements [Store]: Acquire, Extend, Release and Watch, each on
// the [Request] for one lock. It may add optional capabilities, which a
// Locker discovers by type assertion:
//
//   - [Inspector]: describe locks ([State]) for the service and dashboard.
//   - [Pinger]: check that the backend is reachable.
//   - [Elector]: leader elections ([ModeElection], [Leader]).
//   - [GrantWatcher]: hand a released lock straight to a queued waiter.
//   - [MultiStore]: take several mutex names in one atomic operation.
//   - [FenceRaiser]: raise a fence counter (needed by quorum stores).
//   - [LockDelayer]: end holds at their TTL by the store's own clock, so
//     that lock-delay works.
//   - [Drifter]: ask for a larger clock-drift margin than the Locker's.
//   - [Broadcaster]: carry small messages between processes on one store.
//
// Return a concrete type from the constructor (valkey.Dial returns
// *valkey.Store) and assert each interface it implements at compile time:
//
//	var (
//		_ store.Store     = (*Store)(nil)
//		_ store.Inspector = (*Store)(nil)
//	)
//
// # The contract
//
// Every method is one atomic operation: a concurrent caller sees it applied
// entirely or not at all, and on a networked store it is one round trip.
//
// Every operation is idempotent per [Request.Token]: clients retry after a
// lost reply, so a retried Acquire by the token that already holds returns
// the same grant with the same fence (and refreshes the TTL), and a retried
// Release or Extend does no harm.
//
// A name is one lock. Whatever mode holds a name, a request in another mode
// is decided by [Coexist], atomically: exclusive modes exclude every other
// holder, shared modes coexist only with their own mode. The refusal is a
// [Grant] with Acquired false that names the held mode in [Grant.Held] and
// the hold's remaining time in [Grant.RetryAfter]; it is not an error.
//
// Fences come from one counter per name, shared by every mode, strictly
// increasing across exclusive grants and issued atomically with them. They
// must stay monotonic across a restart that loses the counter: issue
// max(counter+1, store time in ms × 1000).
//
// A hold that is not extended ends after its TTL; a store that ends every
// hold at exactly its TTL by its own clock, whatever the holder does, says
// so by implementing [LockDelayer]. Errors say what failed:
// [ErrNotHeld] when a token holds nothing, a [*StoreError] (which wraps
// [ErrUnavailable]) when the backend failed, an [*InvalidError] for a bad
// request (check names with [ValidName]), a [*LimitError] for a semaphore
// limit that differs from the held one, and an error wrapping
// [ErrNotSupported] for a mode the store cannot provide safely.
//
// # Conformance
//
// A store proves the contract by passing package storetest, including its
// cross-pattern suite:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New: func(t *testing.T) store.Store { return memory.New() },
//		})
//	}
//
// storetest drives the store directly and through dlock Lockers, so a
// store's tests import package dlock; the store itself does not.
//
// The error values here are the ones package dlock re-exports (dlock.ErrNotHeld
// is [ErrNotHeld]), so errors.Is and errors.As work on either name.
package store
