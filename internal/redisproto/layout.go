package redisproto

import (
	"crypto/rand"
	"encoding/hex"
	"hash/maphash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// A Layout names the keys of lock names for one store: its key prefix, its
// fence retention, the fence marks of the hash slots, and the shard channels
// on which it hears of handoffs to its own waiters. Make one with NewLayout; its fields are read-only
// afterwards, and its methods safe for concurrent use.
type Layout struct {
	Prefix string
	// Retention is the fence retention in milliseconds, an ARGV of the
	// scripts that issue or raise fences.
	Retention string
	retention int64 // Retention as a number
	// ID is random and names the store's handoff channels.
	ID string
	// mutexSuffix and fairSuffix end the names of those channels.
	mutexSuffix, fairSuffix string
	// seed hashes names for contended.
	seed maphash.Seed
	// contended is a lossy set of the names a mutex may have waiters on
	// (see Contended).
	contended [contendedSize]atomic.Uint64
	// recorded is a lossy set of the names the Store granted a mutex with
	// a record on (see Record).
	recorded [contendedSize]atomic.Uint64
}

// Record remembers that a mutex on lock name was granted with a hold's
// record: its release takes the record's short form (see
// [Ops.ReleaseCall]).
func (l *Layout) Record(name string) {
	h := maphash.String(l.seed, name)
	l.recorded[h>>(64-contendedBits)].Store(h | 1)
}

// Recorded reports whether Record was called for lock name, the last of
// the names that share its entry: a hint, as Contended is.
func (l *Layout) Recorded(name string) bool {
	h := maphash.String(l.seed, name)
	return l.recorded[h>>(64-contendedBits)].Load() == h|1
}

const (
	contendedBits = 10
	contendedSize = 1 << contendedBits // entries of Layout.contended: 8 KiB
)

// Contend remembers that lock name may have waiters: a mutex acquire on it
// was refused, or a release found its waiters flag.
func (l *Layout) Contend(name string) {
	h := maphash.String(l.seed, name)
	l.contended[h>>(64-contendedBits)].Store(h | 1)
}

// Contended reports whether Contend was called for lock name, the last of
// the names that share its entry. It is a hint, wrong now and then both
// ways: a mutex release without waiters on the name sends the short form of
// the script, which replies so and changes nothing when it finds the
// waiters flag (see [Ops.ReleaseCall]).
func (l *Layout) Contended(name string) bool {
	h := maphash.String(l.seed, name)
	return l.contended[h>>(64-contendedBits)].Load() == h|1
}

// NewLayout returns the Layout of a store with key prefix and fence
// retention, under a new random ID.
func NewLayout(prefix string, retention time.Duration) *Layout {
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return &Layout{
		Prefix:      prefix,
		Retention:   Millis(retention),
		retention:   millis(retention),
		ID:          id,
		mutexSuffix: "mutex:ch:" + id,
		fairSuffix:  "fair:ch:" + id,
		seed:        maphash.MakeSeed(),
	}
}

// Key returns the main key of the lock name: the prefix followed by the
// name, exactly, so that a mutex held through dlock is the key that redsync,
// redislock, node-redlock and redis-py's Lock would set for the same name.
func (l *Layout) Key(name string) string { return l.Prefix + name }

// Aux returns the auxiliary key suffix of the lock name (its fence key,
// queue, holder set and so on). It lives in the same Redis Cluster hash slot
// as the main key, so that every script of one lock touches one slot:
//
//   - main key without a hash tag, "lock:x": "{lock:x}:fence";
//   - main key with a hash tag, "lock:{user:1}:job": "{user:1}:lock:{user:1}:job:fence".
//
// The second form repeats the main key because a hash tag may be shared by
// many locks (all names "{user:1}:..." or a prefix such as "{locks}:"), and
// two locks must never share an auxiliary key. Auxiliary keys start with
// "{", so they never match the default prefix.
func (l *Layout) Aux(name, suffix string) string {
	return l.KeySet(false, name, suffix)[0]
}

// KeySet returns the auxiliary keys of lock name with the given suffixes
// (see Aux), preceded by its main key when withMain is set. The keys are
// substrings of one string: two allocations however many keys.
func (l *Layout) KeySet(withMain bool, name string, suffixes ...string) []string {
	main := l.Prefix + name // the main key, when withMain
	pre, post := "{", "}:"
	if tag, ok := HashTag(main); ok {
		// "{tag}:<main>:"
		pre, post = "{"+tag+"}:", ":"
	}
	// Every auxiliary key is pre + main + post + suffix.
	stem := len(pre) + len(main) + len(post)
	n := 0
	if withMain {
		n = len(main)
	}
	for _, sfx := range suffixes {
		n += stem + len(sfx)
	}
	var b strings.Builder
	b.Grow(n)
	if withMain {
		b.WriteString(main)
	}
	for _, sfx := range suffixes {
		b.WriteString(pre)
		b.WriteString(main)
		b.WriteString(post)
		b.WriteString(sfx)
	}
	all := b.String()
	// Room for two more: the callers that add the main key and the fence
	// mark (withMain, mutexKeys) append without copying.
	keys := make([]string, 0, len(suffixes)+2)
	at := 0
	if withMain {
		keys = append(keys, all[:len(main)])
		at = len(main)
	}
	for _, sfx := range suffixes {
		end := at + stem + len(sfx)
		keys = append(keys, all[at:end])
		at = end
	}
	return keys
}

// HashTag returns the hash tag of key by the Redis Cluster rule: the bytes
// between the first "{" and the first "}" after it, when there are any.
func HashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return "", false
	}
	return key[open+1 : open+1+end], true
}

// CheckName validates name as store.ValidName does, and refuses a name
// whose main key contains "}" but no hash tag ("lock:a}b", "lock:{}x"): no
// auxiliary key could share such a key's cluster slot, since a hash tag
// cannot contain "}".
func (l *Layout) CheckName(name string) error {
	if err := store.ValidName(name); err != nil {
		return err
	}
	main := l.Key(name)
	if _, ok := HashTag(main); !ok && strings.IndexByte(main, '}') >= 0 {
		return &store.InvalidError{Field: "name", Reason: `contains "}" outside a {hash tag}, so the lock's keys could not share a cluster slot`}
	}
	if l.isAuxKey(main) || isMarkKey(main) {
		return &store.InvalidError{Field: "name", Reason: "its key would be an auxiliary key of another lock name"}
	}
	return nil
}

// isAuxKey reports whether k has the form of an auxiliary key of some lock
// name (see Aux), whatever the suffix. Only a main key that starts with
// "{" can (auxiliary keys do): with an empty prefix, or one that starts
// with "{". Such a name is refused, so that two names never share a key.
func (l *Layout) isAuxKey(k string) bool {
	tag, ok := HashTag(k)
	if !ok || !strings.HasPrefix(k, "{"+tag+"}:") {
		return false
	}
	rest := k[len(tag)+3:]
	owner := func(main string) bool {
		name, ok := strings.CutPrefix(main, l.Prefix)
		return ok && store.ValidName(name) == nil
	}
	// "{<main>}:<suffix>", main without a hash tag.
	if _, tagged := HashTag(tag); !tagged && rest != "" && owner(tag) {
		return true
	}
	// "{<tag>}:<main>:<suffix>", main with that hash tag.
	for i := 0; i < len(rest); i++ {
		if rest[i] != ':' || i+1 == len(rest) {
			continue
		}
		if t, ok := HashTag(rest[:i]); ok && t == tag && owner(rest[:i]) {
			return true
		}
	}
	return false
}

// MarkerPrefix starts every value the scripts keep in a name's main key
// other than a mutex holder's token: the markers of the other patterns'
// holds, "dlock:<mode>" (see scripts/name_lib.lua).
const MarkerPrefix = "dlock:"

// CheckToken validates the name and token of req (Release, RaiseFence). A
// token starting with MarkerPrefix is refused: the mutex scripts compare the
// main key with the token, so a mutex with such a token would be taken for
// another pattern's hold, and its release or extend would delete or extend
// that hold's marker.
func (l *Layout) CheckToken(req store.Request) error {
	if err := l.CheckName(req.Name); err != nil {
		return err
	}
	if req.Token == "" {
		return &store.InvalidError{Field: "token", Reason: "must not be empty"}
	}
	if strings.HasPrefix(req.Token, MarkerPrefix) {
		return &store.InvalidError{Field: "token", Reason: `must not start with "` + MarkerPrefix + `", the prefix of the markers`}
	}
	return nil
}

// CheckRequest validates the name, token and TTL of req.
func (l *Layout) CheckRequest(req store.Request) error {
	if err := l.CheckToken(req); err != nil {
		return err
	}
	if req.TTL <= 0 {
		return &store.InvalidError{Field: "ttl", Reason: "must be positive"}
	}
	return nil
}

// GrantSuffix is the auxiliary key suffix of the store's handoff channel of
// mode m (ModeMutex or ModeFair).
func (l *Layout) GrantSuffix(m store.Mode) string {
	if m == store.ModeMutex {
		return l.mutexSuffix
	}
	return l.fairSuffix
}

// GrantChannel is the shard channel of lock name (mode m, ModeFair or
// ModeMutex) on which the store hears of handoffs to its waiters.
func (l *Layout) GrantChannel(name string, m store.Mode) string {
	return l.Aux(name, l.GrantSuffix(m))
}

// ListPattern is the SCAN MATCH pattern of the main keys.
func (l *Layout) ListPattern() string { return GlobEscape(l.Prefix) + "*" }

// AuxPattern is the SCAN MATCH pattern of the auxiliary keys: they all start
// with "{".
const AuxPattern = `\{*`

// MainName returns the lock name whose main key k is, if it is one.
func (l *Layout) MainName(k string) (string, bool) {
	name, ok := strings.CutPrefix(k, l.Prefix)
	return name, ok && l.CheckName(name) == nil
}

// patternSuffixes are the keys that exist while a pattern lock has a holder
// or a waiter, which List looks for.
var patternSuffixes = []string{"reentrant", "rw", "rw:intents", "fair", "fair:queue", "semaphore", "election"}

// PatternName returns the lock name whose reentrant, read-write, fair or
// semaphore key k is, if it is one.
func (l *Layout) PatternName(k string) (string, bool) {
	for _, sfx := range patternSuffixes {
		var name string
		if rest, ok := strings.CutPrefix(k, "{"+l.Prefix); ok && strings.HasSuffix(rest, "}:"+sfx) {
			name = strings.TrimSuffix(rest, "}:"+sfx) // "{lock:x}:rw"
		} else if _, rest, ok := strings.Cut(k, "}:"); ok && strings.HasPrefix(rest, l.Prefix) && strings.HasSuffix(rest, ":"+sfx) {
			name = strings.TrimSuffix(strings.TrimPrefix(rest, l.Prefix), ":"+sfx) // "{tag}:lock:{tag}x:rw"
		} else {
			continue
		}
		if l.CheckName(name) == nil && l.Aux(name, sfx) == k {
			return name, true
		}
	}
	return "", false
}

// GlobEscape escapes the glob metacharacters of s for SCAN MATCH.
func GlobEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Millis renders d in whole milliseconds, rounded up so that a positive
// duration never becomes 0.
func Millis(d time.Duration) string {
	slot := &recentMillis[uint64(d)*0x9E3779B97F4A7C15>>61]
	if m := slot.Load(); m != nil && m.d == d {
		return m.s
	}
	s := strconv.FormatInt(millis(d), 10)
	slot.Store(&durationMillis{d, s})
	return s
}

// recentMillis holds durations Millis formatted lately, by a hash of the
// duration: callers pass a few TTLs over and over.
var recentMillis [8]atomic.Pointer[durationMillis]

type durationMillis struct {
	d time.Duration
	s string
}

// millis is d in whole milliseconds, rounded up; 0 when d <= 0.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// fenceTTL returns, in ms, the TTL that a grant of ttl gives its fence key:
// ttl and the retention (mutex_acquire.lua's ARGV[4]; the server would
// spend more formatting the sum than on the grant's TIME).
func (l *Layout) fenceTTL(ttl time.Duration) string {
	return Millis(ttl + time.Duration(l.retention)*time.Millisecond)
}

// MarkSuffix ends the key of a hash slot's fence mark (see Mark).
const MarkSuffix = "fence-mark"

// Mark returns the key of the fence mark of lock name's hash slot,
// "{<t>}:fence-mark", where t is the shortest decimal number whose slot is
// the name's: one key per slot, without expiry, at least every fence the
// scripts issued on a name of the slot since the node last started empty
// (see scripts/clock_lib.lua). It is keyed by the slot alone, whatever the
// prefix: prefix "lock:" with name "app:x" and prefix "lock:app:" with name
// "x" are one lock, one fence key, and must be one mark (on 636d7c8 the
// mark carried the prefix, and a clock step back made that lock's fences go
// down). The key is in the name's slot, as every key a script touches must
// be on Redis Cluster, and no lock name's key can be it (CheckName refuses
// a name whose key has a mark's form, under every prefix).
func (l *Layout) Mark(name string) string {
	return markOf(Slot(l.Key(name)))
}

// marks holds the mark key of each slot once made (markOf): every mutex
// acquire names its slot's mark, which cost a number formatted and two
// strings built each time (BenchmarkMutexCallArgs: 8 allocations per
// acquire+release before, 6 with this and KeySet's room for the mark; see
// docs/design.md). The table is 128 KiB of pointers, its pages touched
// only as slots are.
var marks [16384]atomic.Pointer[string]

// markOf returns the key of slot s's fence mark (see Mark).
func markOf(s uint16) string {
	if k := marks[s].Load(); k != nil {
		return *k
	}
	k := markKey(slotTag(s))
	marks[s].Store(&k)
	return k
}

func markKey(tag uint32) string {
	return "{" + strconv.FormatUint(uint64(tag), 10) + "}:" + MarkSuffix
}

// isMarkKey reports whether k has the form of a fence mark's key,
// "{<decimal>}:fence-mark".
func isMarkKey(k string) bool {
	rest, ok := strings.CutPrefix(k, "{")
	if !ok {
		return false
	}
	digits, ok := strings.CutSuffix(rest, "}:"+MarkSuffix)
	if !ok || digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

var (
	slotTagsOnce sync.Once
	slotTags     *[16384]uint32
)

// slotTag returns the least number whose decimal form hashes to slot s.
// The table is built once, on first use: about 170 000 CRC16s, 64 KiB.
func slotTag(s uint16) uint32 {
	slotTagsOnce.Do(func() {
		var t [16384]uint32
		var found [16384]bool
		left := len(t)
		for n := uint32(0); left > 0; n++ {
			if sl := Slot(strconv.FormatUint(uint64(n), 10)); !found[sl] {
				found[sl], t[sl] = true, n
				left--
			}
		}
		slotTags = &t
	})
	return slotTags[s]
}
