package valkey

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
)

// The reentrant, read-write, fair and semaphore locks. Each keeps its state
// in auxiliary keys of the lock name (Store.aux), all in the main key's hash
// slot, and each has a string key that waiters watch, written by the scripts
// when waiters may get in and expiring with the hold. A name is one lock
// (see scripts/name_lib.lua): while one of these patterns holds the name,
// the main key "lock:<name>" holds its marker ("dlock:<mode>",
// "dlock:semaphore:<limit>"), expiring with its longest hold, so the mutex,
// the other patterns and foreign libraries' SET NX are refused; and any
// other value in the main key refuses these patterns. Every pattern shares
// the name's fence counter.
//
//	reentrant  lock:<name> marker, {t}:reentrant (hash), {t}:reentrant:gate
//	read-write lock:<name> marker, {t}:rw (holders), {t}:rw:meta, {t}:rw:intents, {t}:rw:deadlines, {t}:rw:gate
//	fair       lock:<name> marker, {t}:fair (holder), {t}:fair:queue, {t}:fair:deadlines, {t}:fair:waiters, {t}:fair:audit (stream),
//	           and the shard channel {t}:fair:ch:<store ID> of each Store with waiters
//	semaphore  lock:<name> marker, {t}:semaphore (holders), {t}:semaphore:meta, {t}:semaphore:gate
//
// The main key is each script's last key.

func init() {
	registerMode(dlock.ModeReentrant, &modeOps{
		acquire: loadJoined("scripts/reentrant_acquire.lua"),
		extend:  loadJoined("scripts/reentrant_extend.lua"),
		release: loadJoined("scripts/reentrant_release.lua"),
		keys:    reentrantKeys,
		watch:   func(s *Store, name string) string { return s.aux(name, "reentrant:gate") },
	})
	rw := modeOps{
		acquire: loadJoined("scripts/rw_lib.lua", "scripts/rw_read_acquire.lua"),
		extend:  loadJoined("scripts/rw_lib.lua", "scripts/rw_extend.lua"),
		release: loadJoined("scripts/rw_lib.lua", "scripts/rw_release.lua"),
		keys:    rwKeys,
		watch:   func(s *Store, name string) string { return s.aux(name, "rw:gate") },
	}
	write := rw
	write.acquire = loadJoined("scripts/rw_lib.lua", "scripts/rw_write_acquire.lua")
	registerMode(dlock.ModeRead, &rw)
	registerMode(dlock.ModeWrite, &write)
	registerMode(dlock.ModeFair, &modeOps{
		acquire: loadJoined("scripts/fair_lib.lua", "scripts/fair_acquire.lua"),
		extend:  loadJoined("scripts/fair_lib.lua", "scripts/fair_extend.lua"),
		release: loadJoined("scripts/fair_lib.lua", "scripts/fair_release.lua"),
		keys:    fairKeys,
		watch:   func(s *Store, name string) string { return s.aux(name, "fair") },
	})
	registerMode(dlock.ModeSemaphore, &modeOps{
		acquire: loadJoined("scripts/semaphore_lib.lua", "scripts/semaphore_acquire.lua"),
		extend:  loadJoined("scripts/semaphore_lib.lua", "scripts/semaphore_extend.lua"),
		release: loadJoined("scripts/semaphore_lib.lua", "scripts/semaphore_release.lua"),
		keys:    semaphoreKeys,
		watch:   func(s *Store, name string) string { return s.aux(name, "semaphore:gate") },
	})
}

// loadJoined returns the script made of the shared functions in
// clock_lib.lua and name_lib.lua, then those of libs, then the operation
// (the last path): one script, one round trip.
func loadJoined(paths ...string) *script {
	src := loadScript("scripts/clock_lib.lua").src + "\n" + loadScript("scripts/name_lib.lua").src
	for _, p := range paths {
		src += "\n" + loadScript(p).src
	}
	sum := sha1.Sum([]byte(src))
	return &script{name: paths[len(paths)-1], src: src, sha: hex.EncodeToString(sum[:])}
}

// withMain appends the main key of lock name, the last key of every
// pattern's scripts (see scripts/name_lib.lua).
func withMain(s *Store, name string, keys []string) []string {
	return append(keys, s.key(name))
}

func reentrantKeys(s *Store, name string) []string {
	return withMain(s, name, s.keySet(false, name, "reentrant", "fence", "reentrant:gate"))
}

func rwKeys(s *Store, name string) []string {
	return withMain(s, name, s.keySet(false, name, "rw", "fence", "rw:meta", "rw:intents", "rw:deadlines", "rw:gate"))
}

// fairKeys ends with the channel on which this Store hears of handoffs to
// its waiters (see grantSubs); it is a channel, not a key, declared among
// the keys so that it routes to the lock's slot.
func fairKeys(s *Store, name string) []string {
	return withMain(s, name, s.keySet(false, name, "fair", "fence", "fair:queue", "fair:deadlines", "fair:waiters", "fair:audit", s.grantSuffix(dlock.ModeFair)))
}

func semaphoreKeys(s *Store, name string) []string {
	return withMain(s, name, s.keySet(false, name, "semaphore", "fence", "semaphore:meta", "semaphore:gate"))
}

// AuditKey returns the key of the fair lock's audit stream: the last 1000 or
// so grants and releases of lock name, each with fields "event" (grant or
// release), "fence" and "holder" (the first 12 hex digits of the SHA-1 of
// the holder's token, enough to pair a grant with its release, useless for
// extending or releasing the lock). Read it with XRANGE or XREVRANGE; it
// expires a day after the last grant.
func (s *Store) AuditKey(name string) string { return s.aux(name, "fair:audit") }

// replyError maps the negative status of an acquire script to an error.
func replyError(code int64) error {
	switch code {
	case -1:
		return dlock.ErrUpgrade
	case -2:
		return &dlock.InvalidError{Field: "limit", Reason: "must be at least 1"}
	case -3:
		return &dlock.LimitError{} // Acquire fills it in
	}
	return fmt.Errorf("dlock: acquire script replied status %d", code)
}

var patternStateScript = loadScript("scripts/patterns_state.lua")

// patternState fills st (the state of a name whose mutex key is free) from
// the keys of the other patterns, in one round trip.
func (s *Store) patternState(ctx context.Context, name string, st dlock.State) (dlock.State, error) {
	keys := []string{
		s.aux(name, "reentrant"), s.aux(name, "rw"), s.aux(name, "rw:meta"), s.aux(name, "rw:deadlines"),
		s.aux(name, "fair"), s.aux(name, "fair:deadlines"), s.aux(name, "semaphore"), s.aux(name, "semaphore:meta"),
	}
	res := s.do(ctx, 1, func(_ int, eval bool) vk.Completed {
		return patternStateScript.cmd(s.client, keys, nil, eval)
	})
	v, err := res[0].AsIntSlice()
	if err != nil {
		return dlock.State{}, fail("state", err)
	}
	if len(v) < 5 || v[0] == 0 {
		return st, nil
	}
	st.Mode = dlock.Mode(v[0])
	st.Holders = int(v[1])
	if v[2] > 0 {
		st.TTL = time.Duration(v[2]) * time.Millisecond
	}
	st.Queue = int(v[3])
	st.Limit = int(v[4])
	return st, nil
}

// patternSuffixes are the keys that exist while a pattern lock has a holder
// or a waiter, which List looks for.
var patternSuffixes = []string{"reentrant", "rw", "rw:intents", "fair", "fair:queue", "semaphore"}

// patternNames returns the names of the locks whose reentrant, read-write,
// fair or semaphore keys exist, by SCANning every node for keys that start
// with "{" (as auxiliary keys do) and keeping those that are exactly the
// key of a name.
func (s *Store) patternNames(ctx context.Context) ([]string, error) {
	seen := make(map[string]bool)
	var names []string
	for _, n := range s.client.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(`\{*`).Count(1000).Build()).AsScanEntry()
			if err != nil {
				if isReplicaOnly(err) {
					break
				}
				return nil, fail("list", err)
			}
			for _, k := range e.Elements {
				if name, ok := s.patternName(k); ok && !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return names, nil
}

// patternName returns the lock name whose pattern key k is, if it is one.
func (s *Store) patternName(k string) (string, bool) {
	for _, sfx := range patternSuffixes {
		var name string
		if rest, ok := strings.CutPrefix(k, "{"+s.prefix); ok && strings.HasSuffix(rest, "}:"+sfx) {
			name = strings.TrimSuffix(rest, "}:"+sfx) // "{lock:x}:rw"
		} else if _, rest, ok := strings.Cut(k, "}:"); ok && strings.HasPrefix(rest, s.prefix) && strings.HasSuffix(rest, ":"+sfx) {
			name = strings.TrimSuffix(strings.TrimPrefix(rest, s.prefix), ":"+sfx) // "{tag}:lock:{tag}x:rw"
		} else {
			continue
		}
		if s.checkName(name) == nil && s.aux(name, sfx) == k {
			return name, true
		}
	}
	return "", false
}
