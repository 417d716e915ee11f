// Package wire is what the fault-injection worker and harness share: the
// JSON-lines events a worker prints, and the one clock both read.
//
// Every process on one machine reads the same CLOCK_MONOTONIC, so the
// timestamps of different workers (and of the harness) compare exactly: an
// overlap of two critical sections seen in these logs really happened.
package wire

import (
	"golang.org/x/sys/unix"
)

// Event kinds a worker prints, in the order they occur for one grant.
const (
	KindStart     = "start"      // the worker is up
	KindInvoke    = "invoke"     // an acquire call begins
	KindAcquire   = "acquire"    // the acquire call granted; Fence set
	KindFail      = "fail"       // the acquire call failed; Err set
	KindEnter     = "enter"      // the critical section begins
	KindStopSelf  = "stop_self"  // the worker is about to SIGSTOP itself
	KindReadCall  = "read_call"  // a fenced read is sent to the register
	KindRead      = "read"       // its reply: Val, Accepted (or Err: outcome unknown)
	KindWriteCall = "write_call" // a fenced write is sent to the register
	KindWrite     = "write"      // its reply: Accepted (or Err: outcome unknown)
	KindExit      = "exit"       // the critical section ends
	KindRelease   = "release"    // Lease.Release returned; Err set on failure
	KindLost      = "lost"       // the lease's Done channel closed before Release
	KindRenew     = "renew"      // a renewal result from the Locker's observer (Result)
	KindRaw       = "raw"        // a raw store call with the stale token (Op, Err)
	KindDone      = "done"       // the worker finished its run
)

// Event is one line of a worker's stdout.
type Event struct {
	W        int    `json:"w"`  // worker ID
	Kind     string `json:"ev"` // one of the Kind constants
	T        int64  `json:"t"`  // CLOCK_MONOTONIC, nanoseconds
	Iter     int    `json:"i"`  // iteration (grant attempt) of the worker
	Fence    int64  `json:"fence,omitempty"`
	Mode     string `json:"mode,omitempty"` // lock mode of the grant
	Val      int64  `json:"val,omitempty"`  // register value; on acquire, the validity left (ns, Lease.TTL)
	Accepted bool   `json:"ok,omitempty"`
	Result   string `json:"result,omitempty"`
	Op       string `json:"op,omitempty"`
	Err      string `json:"err,omitempty"`
	Pos      int    `json:"pos,omitempty"` // fair queue position of a refusal
}

// Now returns CLOCK_MONOTONIC in nanoseconds.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // never fails on Linux
	}
	return ts.Nano()
}
