// Package redisproto is the protocol dlock speaks on Valkey and Redis, apart
// from any client library: the Lua scripts (one operation each), the key
// layout of a lock name, the keys and arguments each script is called with,
// the decoding of its replies, and the operations of a store.Store written
// once over them ([Store]) on a small client seam ([Client]). store/valkey
// (valkey-go) and store/goredis (go-redis) each adapt their client to the
// seam and run the same Store, so a lock taken through one is held for the
// other, and a change to an operation is made once.
package redisproto

import (
	"crypto/sha1" //nolint:gosec // G505: EVALSHA names a script by its SHA-1 (the Redis protocol)
	"embed"
	"encoding/hex"
	"fmt"
)

// scriptFS holds the Lua scripts, one operation each. Every file starts with
// a header naming its KEYS, ARGV and reply.
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// A Script is one Lua operation, run by EVALSHA with an EVAL fallback when
// the server does not know it yet (NOSCRIPT: first use, restart, SCRIPT
// FLUSH). The fallback also loads it into the server's script cache.
type Script struct {
	Name string // file name of the operation, for errors
	Src  string // the whole source sent by EVAL
	SHA  string // hex SHA-1 of Src, for EVALSHA

	fn *functionForm // nil: no function form (see Function)
}

// load returns the embedded script at path (e.g. "scripts/mutex_acquire.lua").
// It panics when the file is missing, a build mistake caught by any test.
func load(path string) *Script {
	b, err := scriptFS.ReadFile(path)
	if err != nil {
		panic(fmt.Sprintf("dlock/internal/redisproto: embedded script %s: %v", path, err))
	}
	return newScript(path, string(b))
}

func newScript(name, src string) *Script {
	sum := sha1.Sum([]byte(src)) //nolint:gosec // G401: the script's SHA-1 for EVALSHA
	return &Script{Name: name, Src: src, SHA: hex.EncodeToString(sum[:])}
}

// joined returns the script made of the shared functions in clock_lib.lua,
// fence_lib.lua, name_lib.lua and hold_lib.lua, then those of libs, then the operation (the last path):
// one script, one round trip.
func joined(paths ...string) *Script {
	src := clockLibs() + "\n" + load("scripts/name_lib.lua").Src + "\n" + load("scripts/hold_lib.lua").Src + "\nhold_lib()"
	for _, p := range paths {
		src += "\n" + load(p).Src
	}
	return newScript(paths[len(paths)-1], src)
}

// clockLibs is clock_lib.lua and fence_lib.lua, the functions of every
// script that issues, keeps or raises fences but the mutex's fast-path
// acquire (withIssue).
func clockLibs() string {
	return load("scripts/clock_lib.lua").Src + "\n" + load("scripts/fence_lib.lua").Src
}

// withIssue returns the script made of clock_lib.lua alone and then the
// operation at path: the mutex's fast-path acquire, which calls issue and
// no function of fence_lib.lua (each function a script defines is made on
// every call; see clock_lib.lua). Its function form (see Function) makes
// clock_lib's functions once, when the library loads.
func withIssue(path string) *Script {
	op := load(path).Src
	return newScript(path, load("scripts/clock_lib.lua").Src+"\n"+op).asFunction(len(op), "")
}

// asFunction gives s, an operation with no libraries, a function form
// with flags (see Function).
func asFunction(s *Script, flags string) *Script { return s.asFunction(len(s.Src), flags) }

// withClock returns the script made of the shared functions in clock_lib.lua
// and fence_lib.lua, then the operation at path (the raises' scripts, which
// read no main key as the last key but one).
func withClock(path string) *Script {
	return newScript(path, clockLibs()+"\n"+load(path).Src)
}

// withHold returns the script made of clock_lib.lua, fence_lib.lua,
// hold_lib.lua (a hold's record) and then the operation at path: the
// mutex's and the multi-lock's scripts, which call hold_lib() where they
// meet a record.
func withHold(path string) *Script {
	return newScript(path, clockLibs()+"\n"+load("scripts/hold_lib.lua").Src+"\n"+load(path).Src)
}

// LeastFencedAcquire is the least a fenced acquire on a new name can do with
// dlock's guarantees (scripts/least_fenced_acquire.lua): a counter per name
// that expires, the node's mark and the clock floor. No store runs it: it
// is the floor the benchmarks measure the mutex against.
var LeastFencedAcquire = load("scripts/least_fenced_acquire.lua")

// LeastHWMAcquire is a fenced acquire of another design, a fence from one
// high-water mark per server rather than a counter per name
// (scripts/least_hwm_acquire.lua). No store runs it: the benchmarks measure
// what the design would save.
var LeastHWMAcquire = load("scripts/least_hwm_acquire.lua")

// Source returns the embedded file at path, for tests that read a script's
// header or run it by hand.
func Source(path string) ([]byte, error) { return scriptFS.ReadFile(path) }
