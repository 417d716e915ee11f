package valkey

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock"
)

// scriptFS holds the Lua scripts, one operation each. Every file starts with
// a header naming its KEYS, ARGV and reply.
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// A script is one embedded Lua file, run by EVALSHA with an EVAL fallback
// when the server does not know it yet (NOSCRIPT: first use, restart,
// SCRIPT FLUSH). The fallback also loads it into the server's script cache.
type script struct {
	name string // file name, for errors
	src  string
	sha  string
}

// loadScript returns the embedded script at path (relative to the package,
// e.g. "scripts/mutex_acquire.lua"). It panics when the file is missing,
// which is a build mistake caught by any test.
func loadScript(path string) *script {
	b, err := scriptFS.ReadFile(path)
	if err != nil {
		panic(fmt.Sprintf("dlock/store/valkey: embedded script %s: %v", path, err))
	}
	sum := sha1.Sum(b)
	return &script{name: path, src: string(b), sha: hex.EncodeToString(sum[:])}
}

// cmd builds the EVALSHA command, or the EVAL command when eval is set.
func (sc *script) cmd(c vk.Client, keys, args []string, eval bool) vk.Completed {
	if eval {
		return c.B().Eval().Script(sc.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return c.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func isNoScript(err error) bool {
	ve, ok := vk.IsValkeyErr(err)
	return ok && ve.IsNoScript()
}

// modeOps is the server side of one [dlock.Mode]: a script per operation and
// the keys and arguments they are called with. Every script of a mode gets
// the same KEYS (keys) and ARGV (args), and must keep every key of one lock in
// the main key's hash slot (use Store.key and Store.aux).
//
// Reply conventions, shared by every mode:
//   - acquire: {acquired (0|1), fence, retry_after_ms, [count, [position]]};
//     retry_after_ms is the remaining hold when refused (<= 0: unknown);
//     count defaults to 1 when acquired, position to 0.
//   - extend, release: 1 done, 0 the token holds nothing (ErrNotHeld).
//
// Each script must be idempotent per token: a retried acquire by the token
// that holds returns the same fence and refreshes the TTL.
type modeOps struct {
	acquire, extend, release *script
	// keys returns KEYS for the scripts of lock name.
	keys func(s *Store, name string) []string
	// args returns ARGV for the scripts of req; nil means stdArgs.
	args func(s *Store, req dlock.Request) []string
	// watch returns the key whose change (write, delete, expiry) may free
	// lock name, the key that Watch tracks; nil means the main key.
	watch func(s *Store, name string) string
	// readsWatchKey declares that the acquire script reads the watch key
	// with a read command (GET, HGET, EXISTS, PTTL, ...; not SET ... GET,
	// which the server does not track) on every path that refuses. The
	// Store then makes its waiters' attempts tracked reads and needs no
	// extra read to keep the key tracked (see hub).
	readsWatchKey bool
}

// modes maps each mode this package implements to its scripts. The
// patterns*.go files add theirs from init functions with registerMode.
var modes = map[dlock.Mode]*modeOps{
	dlock.ModeMutex: {
		acquire: loadScript("scripts/mutex_acquire.lua"),
		extend:  loadScript("scripts/mutex_extend.lua"),
		release: loadScript("scripts/mutex_release.lua"),
		keys:    mutexKeys,
		args:    mutexArgs,
		// Every refusal reads KEYS[1], the watch key, with PTTL.
		readsWatchKey: true,
	},
}

// registerMode makes the store run mode m with ops. Call it from an init
// function; registering a mode twice panics.
func registerMode(m dlock.Mode, ops *modeOps) {
	if _, dup := modes[m]; dup {
		panic(fmt.Sprintf("dlock/store/valkey: mode %v registered twice", m))
	}
	modes[m] = ops
}

var stateScript = loadScript("scripts/state.lua")

// fenceKeys is KEYS = {main key, fence counter}.
func fenceKeys(s *Store, name string) []string {
	return s.keySet(true, name, "fence")
}

// mutexKeys is KEYS = {main key, fence counter, waiters, this Store's
// handoff channel, waiters flag}. The channel is a channel, not a key,
// declared among the keys so that it routes to the lock's slot (see
// grantSubs). The flag, a string that outlives the waiters set, lets the
// release script learn whether there may be waiters from the MGET that
// reads the main key.
func mutexKeys(s *Store, name string) []string {
	return s.keySet(true, name, "fence", "waiters", s.grantSuffix(dlock.ModeMutex), "waiters:flag")
}

// mutexArgs is ARGV = {token, TTL ms, queue (0|1), queue TTL ms, fence
// retention ms}.
func mutexArgs(s *Store, req dlock.Request) []string {
	queue := "0"
	if req.Queue {
		queue = "1"
	}
	return []string{req.Token, millis(req.TTL), queue, millis(req.QueueTTL), s.retention}
}

// stdArgs is ARGV = {token, TTL ms, owner, limit, queue (0|1), queue TTL ms,
// fence retention ms}. Owner defaults to the token.
func stdArgs(s *Store, req dlock.Request) []string {
	owner := req.Owner
	if owner == "" {
		owner = req.Token
	}
	queue := "0"
	if req.Queue {
		queue = "1"
	}
	return []string{req.Token, millis(req.TTL), owner, strconv.Itoa(req.Limit), queue, millis(req.QueueTTL), s.retention}
}

// millis renders d in whole milliseconds, rounded up so that a positive
// duration never becomes 0.
func millis(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

func (o *modeOps) argv(s *Store, req dlock.Request) []string {
	if o.args != nil {
		return o.args(s, req)
	}
	return stdArgs(s, req)
}

func (o *modeOps) watchKey(s *Store, name string) string {
	if o.watch != nil {
		return o.watch(s, name)
	}
	return s.key(name)
}

// parseGrant decodes the reply of an acquire script.
func parseGrant(r vk.ValkeyResult) (dlock.Grant, error) {
	v, err := r.AsIntSlice()
	if err != nil {
		return dlock.Grant{}, err
	}
	if len(v) < 3 {
		return dlock.Grant{}, fmt.Errorf("dlock: acquire script replied %v, want at least 3 integers", v)
	}
	if v[0] < 0 {
		err := replyError(v[0]) // patterns.go
		if le, ok := err.(*dlock.LimitError); ok {
			le.Held = int(v[1])
		}
		return dlock.Grant{}, err
	}
	g := dlock.Grant{Acquired: v[0] == 1, Fence: v[1]}
	if g.Acquired {
		g.Count = 1
	} else if v[2] > 0 {
		g.RetryAfter = time.Duration(v[2]) * time.Millisecond
	}
	if len(v) > 3 && v[3] > 0 {
		g.Count = int(v[3])
	}
	if len(v) > 4 {
		g.Position = int(v[4])
	}
	if len(v) > 5 && !g.Acquired {
		g.Held = dlock.Mode(v[5])
	}
	return g, nil
}
