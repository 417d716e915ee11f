// Package faults is dlock's fault-injection suite: it runs worker processes
// (e2e/cmd/worker) against real redis-server nodes through an in-process
// toxiproxy, one proxy per worker-to-node link, injects pauses, delays,
// crashes and simulated clock jumps, and checks the recorded history:
// overlapping critical sections, stale writes accepted by a fenced register,
// fence monotonicity across grants, lost updates, and the register's
// linearizability (porcupine).
//
// The package has no API; its tests are the suite. See docs/faults.md for the
// scenarios, what each injects and checks, and how to run the long profile
// (DLOCK_LONG=1, or go test -args -long).
package faults
