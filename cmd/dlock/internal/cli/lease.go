package cli

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

const sharedNote = `
acquire, extend and release only make sense on a shared store (--redis-url,
--redlock-urls, --etcd-endpoints, --postgres-url, --zookeeper-servers or
--server): dlock exits right after, so a lock in its own memory would be gone
at once. Without one they fail with exit code 64.`

var acquireCmd = &command{
	name:     "acquire",
	synopsis: "[flags] NAME",
	summary:  "take a lock and print its token and fence, for scripts",
	argNames: []string{"NAME"},
	minpos:   1,
	help: `
Take the exclusive lock NAME for --ttl and print the lease as shell export
lines (or JSON with --json), so that after eval the commands the script runs
(dlock extend, dlock release) find the token and TTL by themselves:

  export DLOCK_NAME=deploy
  export DLOCK_TOKEN=6f1c...   the secret that extends and releases the lease
  export DLOCK_FENCE=17...     the fencing token: pass it to the protected resource
  export DLOCK_TTL_MS=300000

Nothing renews the lease: extend it with 'dlock extend' before it runs out, or
use 'dlock run', which renews for you. With --token, the caller chooses the
token (32-128 hex characters); acquiring again with the token that holds the
lock succeeds, keeps the fence and restarts the TTL, so a retry after a lost
reply is safe.
` + sharedNote + `

Exit status: 0 acquired, 75 held by someone else (after --wait, if given),
69 store unavailable, 64 usage.

Keep the output and eval it only once acquire has succeeded: in
'eval "$(dlock acquire ...)" || exit' a failed acquire prints nothing, eval
of nothing returns 0, and the script goes on without the lock.

Examples:
  export DLOCK_REDIS_URL=redis://127.0.0.1:6379
  lease=$(dlock acquire --ttl 5m deploy) || exit
  eval "$lease"
  ./deploy.sh --fence "$DLOCK_FENCE"
  dlock release deploy`,
}

var extendCmd = &command{
	name:     "extend",
	synopsis: "[flags] NAME",
	summary:  "renew a lease taken with acquire",
	argNames: []string{"NAME"},
	minpos:   1,
	help: `
Renew the lease on NAME held by --token (default $DLOCK_TOKEN) to --ttl from
now. The fence does not change. Without --ttl the lease keeps its own TTL:
$DLOCK_TTL_MS as dlock acquire printed it, else, with --server, the TTL the
server holds the lease with; other stores do not record a lease's TTL, so
there one of them is needed.
` + sharedNote + `

Exit status: 0 renewed, 70 the token no longer holds the lock (the lease was
lost: stop touching the resource), 69 store unavailable, 64 usage.

Example:
  dlock extend --server http://locks:3009 --ttl 5m deploy`,
}

var releaseCmd = &command{
	name:     "release",
	synopsis: "[flags] NAME",
	summary:  "release a lease taken with acquire",
	argNames: []string{"NAME"},
	minpos:   1,
	help: `
Release the lock NAME held by --token (default $DLOCK_TOKEN). Only the
token's holder can release; a token that no longer holds the lock changes
nothing.
` + sharedNote + `

Exit status: 0 released, 70 the token did not hold the lock (it had expired
or was released already), 69 store unavailable, 64 usage.

Example:
  dlock release --redis-url redis://127.0.0.1:6379 --token "$DLOCK_TOKEN" deploy`,
}

type leaseFlags struct {
	ttl, wait time.Duration
	token     string
}

func init() {
	acquireCmd.flags = func(x *cmd) any {
		f := &leaseFlags{}
		x.fs.Duration(&f.ttl, "ttl", "DLOCK_TTL", 30*time.Second, "lease length (100ms to 24h); nothing renews it")
		x.fs.Duration(&f.wait, "wait", "DLOCK_WAIT", 0, "how long to wait for a held lock; 0 fails at once with exit code 75")
		x.fs.String(&f.token, "token", "TOKEN", "DLOCK_ACQUIRE_TOKEN", "", "use this token (32-128 hex characters) instead of a random one")
		x.fs.Bool(&x.json, "json", "DLOCK_JSON", "print JSON instead of shell assignments")
		x.store.register(x.fs, true)
		return f
	}
	acquireCmd.run = runAcquire
	tokenFlags := func(ttl bool) func(x *cmd) any {
		return func(x *cmd) any {
			f := &leaseFlags{}
			if ttl {
				x.fs.Duration(&f.ttl, "ttl", "DLOCK_TTL", 0, "new lease length from now (100ms to 24h); default the lease's own TTL")
			}
			x.fs.String(&f.token, "token", "TOKEN", "DLOCK_TOKEN", "", "the lease's token, as printed by acquire (required)")
			x.fs.Bool(&x.json, "json", "DLOCK_JSON", "print JSON instead of text")
			x.store.register(x.fs, true)
			return f
		}
	}
	extendCmd.flags, extendCmd.run = tokenFlags(true), runExtend
	releaseCmd.flags, releaseCmd.run = tokenFlags(false), runRelease
}

// validToken reports whether t is 32-128 hex characters, the tokens the
// HTTP API accepts.
func validToken(t string) bool {
	if len(t) < 32 || len(t) > 128 {
		return false
	}
	_, err := hex.DecodeString(strings.Repeat("0", len(t)%2) + t)
	return err == nil
}

func newToken() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (x *cmd) checkLease(name string, f *leaseFlags, needToken bool) int {
	if err := dlock.ValidName(name); err != nil {
		return x.usageFail("%v", err)
	}
	if f.ttl != 0 && (f.ttl < dlock.MinTTL || f.ttl > dlock.MaxTTL) {
		return x.usageFail("--ttl must be between 100ms and 24h")
	}
	if f.wait < 0 {
		return x.usageFail("--wait must not be negative")
	}
	if f.token == "" && needToken {
		return x.usageFail("missing --token (or DLOCK_TOKEN)")
	}
	if f.token != "" && !validToken(f.token) {
		return x.usageFail("--token must be 32-128 hex characters")
	}
	return 0
}

type grantJSON struct {
	Name  string `json:"name"`
	Token string `json:"token"`
	Fence int64  `json:"fence"`
	TTLMs int64  `json:"ttlMs"`
}

func runAcquire(ctx context.Context, x *cmd, pos, _ []string) int {
	f := x.opts.(*leaseFlags)
	if code := x.checkLease(pos[0], f, false); code != 0 {
		return code
	}
	b, code := x.openClient(ctx)
	if b == nil {
		return code
	}
	defer b.close()
	req := dlock.Request{Name: pos[0], Token: f.token, TTL: f.ttl, Mode: dlock.ModeMutex, Holder: dlock.DefaultHolder()}
	if req.Token == "" {
		req.Token = newToken()
	}
	g, err := acquireOnStore(ctx, b.store, req, f.wait)
	if err != nil {
		return x.fail(err)
	}
	out := grantJSON{Name: req.Name, Token: req.Token, Fence: g.Fence, TTLMs: req.TTL.Milliseconds()}
	if x.json {
		return x.printJSON(out)
	}
	// export: the commands the script runs next (dlock extend, dlock
	// release, a step that extends on its own) see them too.
	fmt.Fprintf(x.env.Stdout, "export DLOCK_NAME=%s\nexport DLOCK_TOKEN=%s\nexport DLOCK_FENCE=%d\nexport DLOCK_TTL_MS=%d\n",
		shellQuote(out.Name), out.Token, out.Fence, out.TTLMs)
	return 0
}

// acquireOnStore takes req on st, waiting up to wait: woken by the store's
// Watch where it has one, else at the holder's remaining time or on capped
// backoff with jitter. A reply lost to a store error is resolved by asking
// again with the same token (Acquire is idempotent per token); if that
// fails too, the token's hold is released so nothing is left behind.
func acquireOnStore(ctx context.Context, st store.Store, req dlock.Request, wait time.Duration) (store.Grant, error) {
	const opTimeout = 10 * time.Second
	deadline := time.Now().Add(wait)
	var wake <-chan struct{}
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
		if ch, stop, err := st.Watch(ctx, req.Name, req.Mode); err == nil {
			wake = ch
			defer stop()
		}
	}
	backoff := 10 * time.Millisecond
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		g, err := st.Acquire(octx, req)
		cancel()
		if err != nil && !errors.Is(err, dlock.ErrInvalid) && !errors.Is(err, dlock.ErrNotSupported) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
			g, err = st.Acquire(rctx, req)
			if err != nil {
				_ = st.Release(rctx, req)
			}
			cancel()
		}
		switch {
		case err != nil && !errors.Is(err, dlock.ErrUnavailable):
			return g, err
		case err == nil && g.Acquired:
			return g, nil
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			if err != nil {
				return g, err
			}
			return g, &dlock.LockedError{Name: req.Name, RetryAfter: g.RetryAfter, Held: g.Held}
		}
		delay := time.Duration(rand.Int64N(int64(backoff))) + time.Millisecond //nolint:gosec // G404: retry jitter, not a secret
		backoff = min(2*backoff, time.Second)
		if g.RetryAfter > 0 && g.RetryAfter+time.Millisecond < delay {
			delay = g.RetryAfter + time.Millisecond
		}
		timer.Reset(min(delay, left))
		select {
		case <-wake:
			backoff = 10 * time.Millisecond
		case <-timer.C:
		case <-ctx.Done():
		}
	}
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:@%+,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func runExtend(ctx context.Context, x *cmd, pos, _ []string) int {
	f := x.opts.(*leaseFlags)
	if code := x.checkLease(pos[0], f, true); code != 0 {
		return code
	}
	b, code := x.openClient(ctx)
	if b == nil {
		return code
	}
	defer b.close()
	ttl, code := x.extendTTL(f.ttl)
	if code != 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := dlock.Request{Name: pos[0], Token: f.token, TTL: ttl, Mode: dlock.ModeMutex}
	var err error
	if hs, ok := b.store.(interface {
		ExtendLease(context.Context, dlock.Request) (time.Duration, error)
	}); ok {
		req.TTL, err = hs.ExtendLease(ctx, req)
	} else {
		err = b.store.Extend(ctx, []dlock.Request{req})[0]
	}
	if err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			err = &codedError{msg: fmt.Sprintf("dlock: the token does not hold %q: lease lost", req.Name), err: dlock.ErrLeaseLost}
		}
		return x.fail(err)
	}
	if x.json {
		return x.printJSON(map[string]any{"name": req.Name, "ttlMs": req.TTL.Milliseconds()})
	}
	fmt.Fprintf(x.env.Stdout, "%s: renewed to %v from now\n", req.Name, roundTTL(req.TTL))
	return 0
}

// extendTTL is the TTL dlock extend renews to: --ttl, else the lease's own
// TTL from $DLOCK_TTL_MS (printed by dlock acquire), else 0 with --server,
// whose server keeps the lease's TTL. Another store does not record it:
// that is a usage error.
func (x *cmd) extendTTL(flag time.Duration) (time.Duration, int) {
	if flag != 0 {
		return flag, 0
	}
	if v := x.env.Getenv("DLOCK_TTL_MS"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		ttl := time.Duration(ms) * time.Millisecond
		if err != nil || ttl < dlock.MinTTL || ttl > dlock.MaxTTL {
			return 0, x.usageFail("DLOCK_TTL_MS=%q: want the lease's TTL in milliseconds, 100 to 86400000", v)
		}
		return ttl, 0
	}
	if x.store.server != "" {
		return 0, 0
	}
	return 0, x.usageFail("--ttl is needed: this store does not record the lease's TTL (DLOCK_TTL_MS, as dlock acquire prints it, also does)")
}

func runRelease(ctx context.Context, x *cmd, pos, _ []string) int {
	f := x.opts.(*leaseFlags)
	if code := x.checkLease(pos[0], f, true); code != 0 {
		return code
	}
	b, code := x.openClient(ctx)
	if b == nil {
		return code
	}
	defer b.close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := dlock.Request{Name: pos[0], Token: f.token, Mode: dlock.ModeMutex}
	if err := b.store.Release(ctx, req); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			err = &codedError{msg: fmt.Sprintf("dlock: the token does not hold %q (expired or already released)", req.Name), err: dlock.ErrNotHeld}
		}
		return x.fail(err)
	}
	if x.json {
		return x.printJSON(map[string]any{"name": req.Name, "released": true})
	}
	fmt.Fprintf(x.env.Stdout, "%s: released\n", req.Name)
	return 0
}

// codedError is an error with its own message that matches err, which
// decides the exit code.
type codedError struct {
	msg string
	err error
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.err }

// wrap prefixes err's message with what dlock was doing, keeping one
// "dlock:" in front and err in the chain.
func wrap(doing string, err error) error {
	return &codedError{msg: "dlock: " + doing + ": " + strings.TrimPrefix(err.Error(), "dlock: "), err: err}
}
