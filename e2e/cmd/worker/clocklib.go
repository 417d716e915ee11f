package main

import (
	"crypto/sha1" // EVALSHA names a script by its SHA-1 (the Redis protocol)
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// swapClockLib makes this process's Valkey/Redis scripts run another
// clock_lib.lua (the file at path) in place of the one the library embeds:
// every script that begins with the embedded clock_lib gets the file's
// source instead, and its SHA-1 for EVALSHA is computed anew. It is the
// suite's negative control of the fence rule (issue 35): with the clock_lib
// of 636d7c8 (e2e/faults/testdata/v636d7c8), whose issue() took the clock
// floor only when a name's fence key was absent, a worker issues fences the
// way that version did, through the same Locker and Store code. Nothing in
// the library changes; the worker edits the scripts' sources before it
// dials. It returns how many scripts it changed, and fails when none began
// with the embedded clock_lib (the control would then run today's scripts
// and prove nothing).
func swapClockLib(path string) (int, error) {
	lib, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	cur, err := redisproto.Source("scripts/clock_lib.lua")
	if err != nil {
		return 0, err
	}
	var scripts []*redisproto.Script
	for _, m := range []store.Mode{store.ModeMutex, store.ModeReentrant, store.ModeRead, store.ModeWrite,
		store.ModeFair, store.ModeSemaphore, store.ModeElection} {
		ops, err := redisproto.ModeOps(m, "valkey")
		if err != nil {
			return 0, err
		}
		// Every script of the mode, issue 38's forms too (the mutex's
		// FullAcquire runs every acquire that waits or keeps a record:
		// left out, the control ran today's fence rule there and bit no
		// more); those that do not begin with clock_lib are skipped below.
		scripts = append(scripts, ops.Acquire, ops.FullAcquire, ops.Extend, ops.Release, ops.ShortRelease,
			ops.RecordRelease, ops.Raise, ops.Resume, ops.Force)
	}
	scripts = append(scripts, redisproto.MultiAcquireScript, redisproto.MultiExtendScript, redisproto.MultiReleaseScript)
	seen := map[*redisproto.Script]bool{}
	n := 0
	for _, sc := range scripts {
		if sc == nil || seen[sc] {
			continue
		}
		seen[sc] = true
		if !strings.HasPrefix(sc.Src, string(cur)) {
			continue
		}
		sc.Src = string(lib) + sc.Src[len(cur):]
		sum := sha1.Sum([]byte(sc.Src)) // the script's SHA-1, for EVALSHA
		sc.SHA = hex.EncodeToString(sum[:])
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no script begins with the embedded clock_lib.lua: %s not swapped in", path)
	}
	return n, nil
}
