package redisproto

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// Ops is the server side of one [store.Mode]: a script per operation and the
// keys and arguments they are called with. Every script of a mode gets the
// same KEYS ([Ops.Keys]) and ARGV ([Ops.Args]; the mutex acquire a hint, a
// proposed floor and its queue request more, [Ops.AcquireArgs]), and keeps
// every key of one lock in the main key's hash slot. The mutex's acquire
// and extend take fewer keys where their scripts read fewer
// ([Ops.AcquireKeys], [Ops.ExtendKeys]): each key and argument costs the
// server time on every call.
//
// Reply conventions, shared by every mode:
//   - acquire: {acquired (0|1), fence, retry_after_ms, [count, [position,
//     [held mode]]]}; retry_after_ms is the remaining hold when refused
//     (<= 0: unknown); count defaults to 1 when acquired, position to 0;
//     a negative first element is an error status ([ParseGrant]). The
//     mutex replies to a grant with the fence alone, an integer ([Granted]).
//   - extend, release: 1 done, 0 the token holds nothing (ErrNotHeld).
//
// Each script is idempotent per token: a retried acquire by the token that
// holds returns the same fence and refreshes the TTL.
type Ops struct {
	Acquire, Extend, Release *Script
	// FullAcquire, if set, is the acquire script of the requests that
	// AcquireKeys gives every key to (see AcquireScript): the mutex's, the
	// same operation with hold_lib.lua, which its fast path never runs.
	FullAcquire *Script
	// ShortRelease, if set, is the script of the release's short form
	// (see ReleaseCall): the mutex's, which needs no clock_lib.
	ShortRelease *Script
	// RecordRelease, if set, is the short form of the release of a hold
	// granted with a record (see ReleaseCall): the mutex's.
	RecordRelease *Script
	// Raise is the fence write-back script (store.FenceRaiser), or nil.
	Raise *Script
	// Resume takes a hold back by its token (store.Resumer): called with
	// ExtendKeys and Args, it replies {fence, ttl ms, max hold left ms,
	// [count]} or 0 (see scripts/hold_lib.lua).
	Resume *Script
	// Force ends every hold of the mode on a name (store.ForceReleaser),
	// called with Keys and no ARGV; it replies the owners it ended, four
	// values each (see scripts/hold_lib.lua).
	Force *Script
	// ReadsWatchKey declares that the acquire script reads the watch key
	// with a read command (GET, HGET, EXISTS, PTTL, ...; not SET ... GET,
	// which the server does not track) on every path that refuses, so that
	// a refused attempt can be a tracked read of it (CLIENT TRACKING).
	ReadsWatchKey bool

	keys func(l *Layout, name string) []string
	// fewKeys, if set, are the keys an acquire that neither queues nor
	// records (see HasRecord) reads.
	fewKeys func(l *Layout, name string) []string
	// extendKeys, if set, are the keys of the extend and resume scripts.
	extendKeys func(l *Layout, name string) []string
	// shortRelease, if set, are the keys of the release script's short
	// form (see ReleaseCall).
	shortRelease func(l *Layout, name string) []string
	args         func(l *Layout, req store.Request) []string // nil: stdArgs
	watch        string                                      // watch key suffix; "": the main key
}

// The reentrant, read-write, fair and semaphore locks each keep their state
// in auxiliary keys of the lock name (Layout.Aux), all in the main key's hash
// slot, and each has a string key that waiters watch, written by the scripts
// when waiters may get in and expiring with the hold. A name is one lock
// (see scripts/name_lib.lua): while one of these patterns holds the name,
// the main key "lock:<name>" holds its marker ("dlock:<mode>",
// "dlock:semaphore:<limit>"), expiring with its longest hold, so the mutex,
// the other patterns and foreign libraries' SET NX are refused; and any
// other value in the main key refuses these patterns. Every pattern shares
// the name's fence key and its slot's fence mark (scripts/clock_lib.lua).
//
//	mutex      lock:<name> (token), {t}:fence, {t}:waiters, {t}:waiters:flag,
//	           and the shard channel {t}:mutex:ch:<store ID> of each store with registered waiters
//	reentrant  lock:<name> marker, {t}:reentrant (hash), {t}:reentrant:gate
//	read-write lock:<name> marker, {t}:rw (holders), {t}:rw:meta, {t}:rw:intents, {t}:rw:deadlines, {t}:rw:gate
//	fair       lock:<name> marker, {t}:fair (holder), {t}:fair:queue, {t}:fair:deadlines, {t}:fair:handoffs, {t}:fair:audit (stream),
//	           and the shard channel {t}:fair:ch:<store ID> of each store with waiters
//	semaphore  lock:<name> marker, {t}:semaphore (holders), {t}:semaphore:meta, {t}:semaphore:gate
//	election   lock:<name> marker, {t}:election (hash: token, value, term); see election.go
//
// The main key is the last key of every pattern's scripts but the mutex's,
// whose first key it is.
var modes = func() map[store.Mode]*Ops {
	rw := Ops{
		Acquire: joined("scripts/rw_lib.lua", "scripts/rw_read_acquire.lua"),
		Extend:  joined("scripts/rw_lib.lua", "scripts/rw_extend.lua"),
		Release: joined("scripts/rw_lib.lua", "scripts/rw_release.lua"),
		Resume:  joined("scripts/rw_lib.lua", "scripts/rw_side_read.lua", "scripts/rw_resume.lua"),
		Force:   joined("scripts/rw_lib.lua", "scripts/rw_force.lua"),
		keys:    rwKeys,
		watch:   "rw:gate",
	}
	write := rw
	write.Acquire = joined("scripts/rw_lib.lua", "scripts/rw_write_acquire.lua")
	write.Raise = withClock("scripts/rw_raise_fence.lua")
	write.Resume = joined("scripts/rw_lib.lua", "scripts/rw_side_write.lua", "scripts/rw_resume.lua")
	return map[store.Mode]*Ops{
		store.ModeMutex: {
			Acquire:       withIssue("scripts/mutex_acquire.lua"),
			FullAcquire:   withHold("scripts/mutex_acquire.lua"),
			Extend:        withHold("scripts/mutex_extend.lua"),
			Release:       withHold("scripts/mutex_release.lua"),
			ShortRelease:  asFunction(load("scripts/mutex_release_short.lua"), "'allow-oom'"),
			RecordRelease: load("scripts/mutex_release_record.lua"),
			Raise:         withClock("scripts/mutex_raise_fence.lua"),
			Resume:        withHold("scripts/mutex_resume.lua"),
			Force:         withHold("scripts/mutex_force.lua"),
			keys:          mutexKeys,
			fewKeys:       mutexFewKeys,
			extendKeys:    mutexExtendKeys,
			shortRelease:  mutexShortReleaseKeys,
			args:          mutexArgs,
			// Every refusal reads KEYS[1], the watch key, with PTTL.
			ReadsWatchKey: true,
		},
		store.ModeReentrant: {
			Acquire: joined("scripts/reentrant_acquire.lua"),
			Extend:  joined("scripts/reentrant_extend.lua"),
			Release: joined("scripts/reentrant_release.lua"),
			Resume:  joined("scripts/reentrant_resume.lua"),
			Force:   joined("scripts/reentrant_force.lua"),
			keys:    reentrantKeys,
			watch:   "reentrant:gate",
		},
		store.ModeRead:  &rw,
		store.ModeWrite: &write,
		store.ModeFair: {
			Acquire: joined("scripts/fair_lib.lua", "scripts/fair_acquire.lua"),
			Extend:  joined("scripts/fair_lib.lua", "scripts/fair_extend.lua"),
			Release: joined("scripts/fair_lib.lua", "scripts/fair_release.lua"),
			Resume:  joined("scripts/fair_lib.lua", "scripts/fair_resume.lua"),
			Force:   joined("scripts/fair_lib.lua", "scripts/fair_force.lua"),
			keys:    fairKeys,
			watch:   "fair",
		},
		store.ModeSemaphore: {
			Acquire: joined("scripts/semaphore_lib.lua", "scripts/semaphore_acquire.lua"),
			Extend:  joined("scripts/semaphore_lib.lua", "scripts/semaphore_extend.lua"),
			Release: joined("scripts/semaphore_lib.lua", "scripts/semaphore_release.lua"),
			Resume:  joined("scripts/semaphore_lib.lua", "scripts/semaphore_resume.lua"),
			Force:   joined("scripts/semaphore_lib.lua", "scripts/semaphore_force.lua"),
			keys:    semaphoreKeys,
			watch:   "semaphore:gate",
		},
	}
}()

// ModeOps returns the scripts of mode m, or an error wrapping
// [store.ErrNotSupported] naming store.
func ModeOps(m store.Mode, storeName string) (*Ops, error) {
	if o := modes[m]; o != nil {
		return o, nil
	}
	return nil, fmt.Errorf("%w: %s store mode %v", store.ErrNotSupported, storeName, m)
}

// Supports reports whether mode m has scripts.
func Supports(m store.Mode) bool { return modes[m] != nil }

// Keys returns KEYS for the scripts of o on lock name.
func (o *Ops) Keys(l *Layout, name string) []string { return o.keys(l, name) }

// AcquireKeys returns KEYS for o.Acquire for req: Keys, or fewer for a
// mutex request that neither queues nor records.
func (o *Ops) AcquireKeys(l *Layout, req store.Request) []string {
	if o.fewKeys != nil && !req.Queue && !HasRecord(req) {
		return o.fewKeys(l, req.Name)
	}
	return o.keys(l, req.Name)
}

// AcquireScript returns the acquire script for req: FullAcquire for a
// request that AcquireKeys gives every key to, if o has one, and Acquire
// otherwise.
func (o *Ops) AcquireScript(req store.Request) *Script {
	if o.FullAcquire != nil && (req.Queue || HasRecord(req)) {
		return o.FullAcquire
	}
	return o.Acquire
}

// ExtendKeys returns KEYS for o.Extend and o.Resume on lock name: Keys, or
// fewer for the mutex.
func (o *Ops) ExtendKeys(l *Layout, name string) []string {
	if o.extendKeys != nil {
		return o.extendKeys(l, name)
	}
	return o.keys(l, name)
}

// HasRecord reports whether req carries a hold's record: a Holder, Data, a
// MinHold or a MaxHold. Without one the acquire scripts write and read
// nothing for records (the mutex's fast path keeps its cost).
func HasRecord(req store.Request) bool {
	return req.Holder != "" || req.Data != "" || req.MinHold > 0 || req.MaxHold > 0
}

// recordArgs appends the record of req to args: min hold ms, max hold ms,
// holder, data (see scripts/hold_lib.lua). A min hold is sent for the
// modes that keep one (the mutex, and each name of a multi-lock, the fair
// lock, the election) and dropped for the others.
func recordArgs(args []string, req store.Request) []string {
	minHold := req.MinHold
	if req.Mode != store.ModeMutex && req.Mode != store.ModeFair && req.Mode != store.ModeElection {
		minHold = 0
	}
	return append(args, Millis(minHold), Millis(req.MaxHold), req.Holder, req.Data)
}

// acquireTTL is req's TTL for a grant: at most its MaxHold.
func acquireTTL(req store.Request) time.Duration {
	if req.MaxHold > 0 && req.MaxHold < req.TTL {
		return req.MaxHold
	}
	return req.TTL
}

// ReleaseWaiters is the reply of a release script's short form that found
// the waiters flag set and changed nothing (see ReleaseCall).
const ReleaseWaiters = -1

// ReleaseCall returns KEYS and ARGV for o.Release for req, and whether they
// are the short form, for o.ShortRelease instead: for a mutex on a name not
// Contended, the lock key, the waiters flag and the token. A short release
// that finds the flag set replies ReleaseWaiters and changes nothing; the
// caller then marks the name (Layout.Contend) and sends the full form,
// Keys and Args, to o.Release.
//
// A name the Store granted with a record (Layout.Record) and has not seen
// waiters on takes the short form of o.RecordRelease instead, recorded set
// (the lock key, the waiters flag, the record and the token): it replies
// ReleaseWaiters as the other does when the full form must decide.
func (o *Ops) ReleaseCall(l *Layout, req store.Request) (keys, args []string, short, recorded bool) {
	if o.shortRelease != nil && !l.Contended(req.Name) {
		if o.RecordRelease != nil && l.Recorded(req.Name) {
			return l.KeySet(true, req.Name, "waiters:flag", "hold"), []string{req.Token}, true, true
		}
		return o.shortRelease(l, req.Name), []string{req.Token}, true, false
	}
	return o.keys(l, req.Name), o.Args(l, req), false, false
}

// Args returns ARGV for the scripts of o for req.
func (o *Ops) Args(l *Layout, req store.Request) []string {
	if o.args != nil {
		return o.args(l, req)
	}
	return stdArgs(l, req)
}

// AcquireArgs returns ARGV for o.Acquire: Args, and for the mutex more:
// {the fence key's TTL ms (the TTL and the retention), the fence floor
// proposed in ctx (WithFenceFloor) or "", queue (1), queue TTL ms}, ending
// after the fence key's TTL or the floor when the request does not queue
// (see mutex_acquire.lua). The other
// patterns' scripts take the proposed floor, if any, as ARGV[8] (see fence
// in clock_lib.lua).
func (o *Ops) AcquireArgs(ctx context.Context, l *Layout, req store.Request) []string {
	record := HasRecord(req)
	if record {
		req.TTL = acquireTTL(req)
	}
	args := o.Args(l, req)
	var floor string
	if f, ok := store.FenceFloor(ctx); ok {
		floor = strconv.FormatInt(f, 10)
	}
	if req.Mode != store.ModeMutex {
		if floor != "" || record {
			args = append(args, floor)
		}
		if record {
			args = recordArgs(args, req)
		}
		return args
	}
	args = append(args, l.fenceTTL(req.TTL))
	switch {
	case record:
		queue := ""
		if req.Queue {
			queue = "1"
		}
		args = recordArgs(append(args, floor, queue, Millis(req.QueueTTL)), req)
	case req.Queue:
		args = append(args, floor, "1", Millis(req.QueueTTL))
	case floor != "":
		args = append(args, floor)
	}
	return args
}

// WithFenceFloor returns ctx proposing floor to the acquire scripts of the
// stores it reaches (see store.WithFenceFloor): a node takes the floor only
// above the fence it would issue, and by at most 100 ms above its own clock
// floor (issue in clock_lib.lua).
func WithFenceFloor(ctx context.Context, floor int64) context.Context {
	return store.WithFenceFloor(ctx, floor)
}

// RaiseArgs returns ARGV for o.Raise: {token, fence, fence retention ms,
// value}; the value is the election's (see election_raise_fence.lua).
func (o *Ops) RaiseArgs(l *Layout, req store.Request, fence int64) []string {
	return []string{req.Token, strconv.FormatInt(fence, 10), l.Retention, req.Value}
}

// WatchKey returns the key whose change (write, delete, expiry) may free
// lock name for o's waiters. Waiters of every pattern also watch the main
// key: whatever pattern holds a name, its main key changes when it frees.
func (o *Ops) WatchKey(l *Layout, name string) string {
	if o.watch == "" {
		return l.Key(name)
	}
	return l.Aux(name, o.watch)
}

// MaxFence is the largest fence a Lua number holds exactly (2^53).
const MaxFence = 1 << 53

// mutexKeys is KEYS = {main key, fence key, waiters, the store's handoff
// channel, waiters flag, the hold's record, the slot's fence mark
// (Layout.Mark)}. The channel
// is a channel, not a key, declared among the keys so that it routes to the
// lock's slot. The flag, a string that outlives the waiters set, lets the
// release script learn whether there may be waiters from the MGET that
// reads the main key.
func mutexKeys(l *Layout, name string) []string {
	keys := l.KeySet(true, name, "fence", "waiters", l.mutexSuffix, "waiters:flag", "hold")
	return append(keys, markOf(Slot(keys[0])))
}

// mutexExtendKeys is the main key, the fence key, the hold's record, the
// waiters flag and the slot's fence mark.
func mutexExtendKeys(l *Layout, name string) []string {
	keys := l.KeySet(true, name, "fence", "hold", "waiters:flag")
	return append(keys, markOf(Slot(keys[0])))
}

// mutexFewKeys is the main key, the fence key and the slot's fence mark.
func mutexFewKeys(l *Layout, name string) []string {
	keys := l.KeySet(true, name, "fence")
	return append(keys, markOf(Slot(keys[0])))
}

// mutexShortReleaseKeys is the main key and the waiters flag, the keys of
// the short form of mutex_release.lua.
func mutexShortReleaseKeys(l *Layout, name string) []string {
	return l.KeySet(true, name, "waiters:flag")
}

// mutexArgs is ARGV = {token, TTL ms, fence retention ms}; the acquire
// takes more (see AcquireArgs).
func mutexArgs(l *Layout, req store.Request) []string {
	return append(make([]string, 0, 7), req.Token, Millis(req.TTL), l.Retention)
}

// stdArgs is ARGV = {token, TTL ms, owner, limit, queue (0|1), queue TTL ms,
// fence retention ms}. Owner defaults to the token.
func stdArgs(l *Layout, req store.Request) []string {
	owner := req.Owner
	if owner == "" {
		owner = req.Token
	}
	queue := "0"
	if req.Queue {
		queue = "1"
	}
	return []string{req.Token, Millis(req.TTL), owner, strconv.Itoa(req.Limit), queue, Millis(req.QueueTTL), l.Retention}
}

// withMain appends the main key of lock name and its slot's fence mark, the
// last two keys of every pattern's scripts (see scripts/name_lib.lua and
// scripts/clock_lib.lua).
func withMain(l *Layout, name string, keys []string) []string {
	return append(keys, l.Key(name), l.Mark(name))
}

func reentrantKeys(l *Layout, name string) []string {
	return withMain(l, name, l.KeySet(false, name, "reentrant", "fence", "reentrant:gate", "hold"))
}

func rwKeys(l *Layout, name string) []string {
	return withMain(l, name, l.KeySet(false, name, "rw", "fence", "rw:meta", "rw:intents", "rw:deadlines", "rw:gate", "holds"))
}

// fairKeys ends with the channel on which the store hears of handoffs to its
// waiters; it is a channel, not a key, declared among the keys so that it
// routes to the lock's slot.
func fairKeys(l *Layout, name string) []string {
	return withMain(l, name, l.KeySet(false, name, "fair", "fence", "fair:queue", "fair:deadlines", "fair:handoffs", "fair:audit", l.fairSuffix, "hold"))
}

func semaphoreKeys(l *Layout, name string) []string {
	return withMain(l, name, l.KeySet(false, name, "semaphore", "fence", "semaphore:meta", "semaphore:gate", "holds"))
}

// AuditKey returns the key of the fair lock's audit stream of lock name.
func (l *Layout) AuditKey(name string) string { return l.Aux(name, "fair:audit") }

// StateScript describes one lock for the Inspector; call it with
// [Layout.StateKeys] and no ARGV, and decode with [DecodeState].
var StateScript = withHold("scripts/state.lua")

// PatternStateScript describes the reentrant, read-write, fair or semaphore
// state of a name whose main key holds no mutex; call it with
// [Layout.PatternStateKeys] and decode with [DecodePatternState].
var PatternStateScript = newScript("scripts/patterns_state.lua", load("scripts/hold_lib.lua").Src+"\nhold_lib()\n"+load("scripts/patterns_state.lua").Src)

// StateKeys is KEYS of StateScript.
func (l *Layout) StateKeys(name string) []string {
	return l.KeySet(true, name, "fence", "waiters", "hold")
}

// PatternStateKeys is KEYS of PatternStateScript.
func (l *Layout) PatternStateKeys(name string) []string {
	return l.KeySet(false, name, "reentrant", "rw", "rw:meta", "rw:deadlines", "fair", "fair:deadlines", "semaphore", "semaphore:meta", "election", "hold", "holds")
}
