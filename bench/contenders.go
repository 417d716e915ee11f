package main

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeylock"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
	dlockgoredis "github.com/dlock-dev/dlock/store/goredis"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

// lockTTL is the lease of every lock in W1-W5 (the peer benchmark's 30 s):
// long enough that nothing expires inside a cell.
const lockTTL = 30 * time.Second

// pollEvery is the retry delay of the contenders that wait by polling.
const pollEvery = time.Millisecond

// unlockFunc releases one hold.
type unlockFunc func(ctx context.Context) error

// locker is one client of one contender: a blocking Lock on a name.
type locker interface {
	Lock(ctx context.Context, name string) (unlockFunc, error)
	Close() error
}

// contender is a lock library (or the raw baseline) under test.
type contender struct {
	name string
	// nodes is how many servers it uses: 1, or 5 for the W4 (Redlock) runs.
	nodes int
	// open makes one client over the servers at addrs.
	open func(ctx context.Context, addrs []string) (locker, error)
	// note is what the tables say about how it waits.
	note string
}

func oneNode() []contender {
	return []contender{
		{name: "raw-valkeygo", nodes: 1, open: openRaw, note: "SET NX PX + EVALSHA compare-and-delete; waits by polling every 1 ms"},
		{name: "dlock", nodes: 1, open: openDlock(false), note: "store/valkey (valkey.Dial), Mutex.Lock, fenced; waiters woken by the server"},
		{name: "dlock-goredis", nodes: 1, open: openDlockGoredis, note: "store/goredis on a go-redis v9 client (the same scripts and keys as store/valkey), Mutex.Lock, fenced; handoffs on sharded pub/sub"},
		{name: "redsync-goredis", nodes: 1, open: openRedsyncGoredis, note: "redsync v4 + goredis/v9 pool; 1 ms retry delay, unbounded tries"},
		{name: "redsync-valkeygo", nodes: 1, open: openRedsyncValkey, note: "redsync v4 over valkey-go through a Pool adapter in bench/ (redsync's own redis/valkeygo pool needs valkey-go/valkeycompat, which the module proxy refuses)"},
		{name: "redislock", nodes: 1, open: openRedislock, note: "bsm/redislock + go-redis v9; LinearBackoff(1 ms)"},
		{name: "valkeylock", nodes: 1, open: openValkeylock(1), note: "valkey-go valkeylock, KeyMajority 1 (one key); waiters woken by client-side-caching invalidations"},
	}
}

// diagnostics are extra W1/W2 rows that explain a difference rather than
// compete.
func diagnostics() []contender {
	return []contender{
		{name: "raw-valkeygo-fenced", nodes: 1, open: openRawFenced, note: "diagnostic: the least fenced lock on raw valkey-go, as raw-valkeygo but the acquire is one script that also issues a fence with dlock's guarantees (SET NX PX; TIME; the name's counter created at the clock floor with an expiry, by SET GET; the node's fence mark read when the counter is absent and raised by SET GET; the fence returned): what a fence costs on this server, before anything else dlock does"},
		{name: "raw-valkeygo-hwm", nodes: 1, open: openRawHWM, note: "diagnostic: as raw-valkeygo-fenced, but the fence comes from one high-water mark per server (INCR of one key without expiry; the clock floor when it is missing), not from a counter per name, so a new name costs no second key: a fence design dlock does not use, measured for what it would save (see docs/benchmarks.md)"},
		{name: "dlock-holder", nodes: 1, open: openDlock(false, dlock.WithHolder(dlock.DefaultHolder())), note: "diagnostic: dlock with a holder recorded on every grant (dlock.WithHolder(dlock.DefaultHolder()), issue 38): what the hold's record costs the fast path; without one (the dlock row) nothing is written for it"},
		{name: "raw-valkeygo-pipelined", nodes: 1, open: openRawPipelined, note: "diagnostic: the raw baseline on a valkey-go client that always pipelines (AlwaysPipelining, what a client with an invalidation hook does, as dlock's and valkeylock's do): every round trip goes through valkey-go's writer and reader goroutines"},
	}
}

func fairContender() contender {
	return contender{name: "dlock-fair", nodes: 1, open: openDlock(true), note: "store/valkey, Locker.Fair(name).Lock: FIFO queue, the release hands the lock to the head"}
}

func fiveNodes() []contender {
	return []contender{
		{name: "raw-valkeygo-5", nodes: 5, open: openRaw, note: "SET NX PX on 5 nodes in parallel, success on 3, waits for all 5 replies"},
		{name: "raw-valkeygo-fenced-5", nodes: 5, open: openRawFenced, note: "diagnostic: raw-valkeygo-5 with raw-valkeygo-fenced's acquire script on every node: what five fenced acquires cost, before reconciling the nodes' fences (which it does not do)"},
		{name: "raw-valkeygo-hwm-5", nodes: 5, open: openRawHWM, note: "diagnostic: raw-valkeygo-fenced-5 with raw-valkeygo-hwm's acquire script (one fence mark per server) on every node"},
		{name: "dlock-redlock-5", nodes: 5, open: openRedlock, note: "store/redlock.New over 5 store/valkey stores"},
		{name: "redsync-goredis-5", nodes: 5, open: openRedsyncGoredis, note: "redsync over 5 goredis pools"},
		{name: "redsync-valkeygo-5", nodes: 5, open: openRedsyncValkey, note: "redsync over 5 valkey-go pools (adapter)"},
		{name: "valkeylock-maj3-1node", nodes: 1, open: openValkeylock(3), note: "valkeylock KeyMajority 3 (3 of 5 keys) on ONE node: its protocol cost only; valkeylock cannot use independent masters"},
	}
}

// tokens are cheap unique values for the raw baseline and the adapters: a
// random process prefix and a counter (the floor should not pay for
// crypto/rand per operation).
var (
	tokenPrefix = func() string {
		b := make([]byte, 8)
		rand.Read(b)
		return hex.EncodeToString(b) + "-"
	}()
	tokenSeq atomic.Int64
)

func nextToken() string { return tokenPrefix + strconv.FormatInt(tokenSeq.Add(1), 10) }

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// --- raw valkey-go baseline --------------------------------------------------

var rawDelete = vk.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

type rawLocker struct {
	clients []vk.Client
	quorum  int
}

func openRaw(ctx context.Context, addrs []string) (locker, error) {
	return openRawOpt(addrs, false)
}

func openRawPipelined(ctx context.Context, addrs []string) (locker, error) {
	return openRawOpt(addrs, true)
}

func openRawOpt(addrs []string, pipelined bool) (locker, error) {
	r := &rawLocker{quorum: len(addrs)/2 + 1}
	for _, a := range addrs {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{a}, DisableCache: true, AlwaysPipelining: pipelined})
		if err != nil {
			r.Close()
			return nil, err
		}
		r.clients = append(r.clients, c)
	}
	return r, nil
}

func (r *rawLocker) Close() error {
	for _, c := range r.clients {
		c.Close()
	}
	return nil
}

// each runs fn on every node (in parallel when there are several) and
// returns how many succeeded and the first error.
func (r *rawLocker) each(fn func(c vk.Client) (bool, error)) (int, error) {
	if len(r.clients) == 1 {
		ok, err := fn(r.clients[0])
		if ok {
			return 1, err
		}
		return 0, err
	}
	type res struct {
		ok  bool
		err error
	}
	ch := make(chan res, len(r.clients))
	for _, c := range r.clients {
		go func() { ok, err := fn(c); ch <- res{ok, err} }()
	}
	n := 0
	var first error
	for range r.clients {
		x := <-ch
		if x.ok {
			n++
		}
		if x.err != nil && first == nil {
			first = x.err
		}
	}
	return n, first
}

// leastFencedAcquire is the least a fenced acquire on a new name can do
// with dlock's guarantees: SET NX PX, TIME, the counter created at the
// clock floor by SET GET, the node's mark read when the counter is absent
// and raised by SET GET (see the script's header). It returns the fence,
// or 0.
var leastFencedAcquire = vk.NewLuaScript(redisproto.LeastFencedAcquire.Src)

// leastHWMAcquire is leastFencedAcquire with the fence taken from one
// high-water mark per server instead of a counter per name (see the
// script's header). It returns the fence, or 0.
var leastHWMAcquire = vk.NewLuaScript(redisproto.LeastHWMAcquire.Src)

// fenceMark is the key of raw-valkeygo-hwm's per-server fence mark;
// fencedMark raw-valkeygo-fenced's.
const (
	fenceMark  = "bench:fence-mark"
	fencedMark = "bench:fenced-mark"
)

// fencedLocker is the raw baseline with a fenced acquire. Each call has a
// deadline, as dlock's have, so that valkey-go runs a lone call on its
// connection directly. On several nodes it is a floor, not a lock with
// sound fences: it neither reconciles the nodes' fences nor returns one.
type fencedLocker struct {
	*rawLocker
	hwm bool // the fence from the server's mark (leastHWMAcquire)
}

func openRawFenced(ctx context.Context, addrs []string) (locker, error) {
	return openFenced(addrs, false)
}

func openRawHWM(ctx context.Context, addrs []string) (locker, error) {
	return openFenced(addrs, true)
}

func openFenced(addrs []string, hwm bool) (locker, error) {
	r, err := openRawOpt(addrs, false)
	if err != nil {
		return nil, err
	}
	return fencedLocker{r.(*rawLocker), hwm}, nil
}

func (r fencedLocker) Lock(ctx context.Context, name string) (unlockFunc, error) {
	tok := nextToken()
	ttl, keep := strconv.FormatInt(lockTTL.Milliseconds(), 10), strconv.FormatInt((lockTTL+time.Minute).Milliseconds(), 10)
	acquire, keys, args := leastFencedAcquire, []string{name, name + ":fence", fencedMark}, []string{tok, ttl, keep}
	if r.hwm {
		acquire, keys, args = leastHWMAcquire, []string{name, fenceMark}, []string{tok, ttl}
	}
	release := func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := r.each(func(c vk.Client) (bool, error) {
			err := rawDelete.Exec(rctx, c, []string{name}, []string{tok}).Error()
			return err == nil, err
		})
		return err
	}
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := r.each(func(c vk.Client) (bool, error) {
			fence, err := acquire.Exec(actx, c, keys, args).AsInt64()
			return fence > 0, err
		})
		cancel()
		if n >= r.quorum {
			return release, nil
		}
		if n > 0 {
			_ = release(context.WithoutCancel(ctx))
		}
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		if err := sleepCtx(ctx, pollEvery); err != nil {
			return nil, err
		}
	}
}

func (r *rawLocker) Lock(ctx context.Context, name string) (unlockFunc, error) {
	tok := nextToken()
	release := func(ctx context.Context) error {
		_, err := r.each(func(c vk.Client) (bool, error) {
			err := rawDelete.Exec(ctx, c, []string{name}, []string{tok}).Error()
			return err == nil, err
		})
		return err
	}
	for {
		n, err := r.each(func(c vk.Client) (bool, error) {
			err := c.Do(ctx, c.B().Set().Key(name).Value(tok).Nx().Px(lockTTL).Build()).Error()
			if vk.IsValkeyNil(err) {
				return false, nil
			}
			return err == nil, err
		})
		if n >= r.quorum {
			return release, nil
		}
		if n > 0 {
			_ = release(context.WithoutCancel(ctx))
		}
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		if err := sleepCtx(ctx, pollEvery); err != nil {
			return nil, err
		}
	}
}

// --- dlock -------------------------------------------------------------------

type dlockLocker struct {
	l      *dlock.Locker
	stores []*valkey.Store
	rl     *redlock.Store
	fair   bool
	close  func() // the goredis store and its client
}

// openDlockGoredis is dlock on store/goredis over a go-redis client made as
// the go-redis contenders make theirs.
func openDlockGoredis(ctx context.Context, addrs []string) (locker, error) {
	rc := goredisClient(addrs[0])
	st, err := dlockgoredis.New(rc)
	if err != nil {
		rc.Close()
		return nil, err
	}
	l, err := dlock.New(st, dlock.WithTTL(lockTTL))
	if err != nil {
		st.Close()
		rc.Close()
		return nil, err
	}
	return &dlockLocker{l: l, close: func() { st.Close(); rc.Close() }}, nil
}

func openDlock(fair bool, opts ...dlock.Option) func(ctx context.Context, addrs []string) (locker, error) {
	return func(ctx context.Context, addrs []string) (locker, error) {
		st, err := valkey.Dial(ctx, "redis://"+addrs[0])
		if err != nil {
			return nil, err
		}
		l, err := dlock.New(st, append([]dlock.Option{dlock.WithTTL(lockTTL)}, opts...)...)
		if err != nil {
			st.Close()
			return nil, err
		}
		return &dlockLocker{l: l, stores: []*valkey.Store{st}, fair: fair}, nil
	}
}

func openRedlock(ctx context.Context, addrs []string) (locker, error) {
	d := &dlockLocker{}
	var nodes []store.Store
	for _, a := range addrs {
		st, err := valkey.Dial(ctx, "redis://"+a)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.stores = append(d.stores, st)
		nodes = append(nodes, st)
	}
	rl, err := redlock.New(nodes)
	if err != nil {
		d.Close()
		return nil, err
	}
	d.rl = rl
	d.l, err = dlock.New(rl, dlock.WithTTL(lockTTL))
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func (d *dlockLocker) Lock(ctx context.Context, name string) (unlockFunc, error) {
	var (
		ls  *dlock.Lease
		err error
	)
	if d.fair {
		ls, err = d.l.Fair(name).Lock(ctx)
	} else {
		ls, err = d.l.Mutex(name).Lock(ctx)
	}
	if err != nil {
		return nil, err
	}
	return ls.Release, nil
}

func (d *dlockLocker) Close() error {
	if d.l != nil {
		d.l.Close()
	}
	if d.rl != nil {
		d.rl.Close()
	}
	for _, s := range d.stores {
		s.Close()
	}
	if d.close != nil {
		d.close()
	}
	return nil
}

// --- redsync -----------------------------------------------------------------

type redsyncLocker struct {
	rs     *redsync.Redsync
	closer func()
}

func (r *redsyncLocker) Lock(ctx context.Context, name string) (unlockFunc, error) {
	m := r.rs.NewMutex(name, redsync.WithExpiry(lockTTL), redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(pollEvery))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock refused")
		}
		return err
	}, nil
}

func (r *redsyncLocker) Close() error { r.closer(); return nil }

func goredisClient(addr string) *goredis.Client {
	// PoolSize 64 = the W2 concurrency (as in the peer benchmark).
	return goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64})
}

func openRedsyncGoredis(ctx context.Context, addrs []string) (locker, error) {
	var pools []rsredis.Pool
	var clients []*goredis.Client
	for _, a := range addrs {
		c := goredisClient(a)
		clients = append(clients, c)
		pools = append(pools, rsgoredis.NewPool(c))
	}
	return &redsyncLocker{rs: redsync.New(pools...), closer: func() {
		for _, c := range clients {
			c.Close()
		}
	}}, nil
}

func openRedsyncValkey(ctx context.Context, addrs []string) (locker, error) {
	var pools []rsredis.Pool
	var clients []vk.Client
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	for _, a := range addrs {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{a}, DisableCache: true})
		if err != nil {
			closeAll()
			return nil, err
		}
		clients = append(clients, c)
		pools = append(pools, valkeyPool{c})
	}
	return &redsyncLocker{rs: redsync.New(pools...), closer: closeAll}, nil
}

// valkeyPool is a redsync Pool over valkey-go: redsync's own
// redis/valkeygo pool wraps valkey-go/valkeycompat, which could not be had
// here, so this adapter speaks valkey-go's command builder directly.
type valkeyPool struct{ c vk.Client }

func (p valkeyPool) Get(ctx context.Context) (rsredis.Conn, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	return valkeyConn{p.c, ctx}, nil
}

type valkeyConn struct {
	c   vk.Client
	ctx context.Context
}

func (c valkeyConn) Get(name string) (string, error) {
	v, err := c.c.Do(c.ctx, c.c.B().Get().Key(name).Build()).ToString()
	if vk.IsValkeyNil(err) {
		return "", nil
	}
	return v, err
}

func (c valkeyConn) Set(name, value string) (bool, error) {
	err := c.c.Do(c.ctx, c.c.B().Set().Key(name).Value(value).Build()).Error()
	return err == nil, err
}

func (c valkeyConn) SetNX(name, value string, expiry time.Duration) (bool, error) {
	err := c.c.Do(c.ctx, c.c.B().Set().Key(name).Value(value).Nx().Px(expiry).Build()).Error()
	if vk.IsValkeyNil(err) {
		return false, nil
	}
	return err == nil, err
}

func (c valkeyConn) Eval(script *rsredis.Script, keysAndArgs ...any) (any, error) {
	keys := make([]string, script.KeyCount)
	for i := range script.KeyCount {
		keys[i] = fmt.Sprint(keysAndArgs[i])
	}
	args := make([]string, 0, len(keysAndArgs)-script.KeyCount)
	for _, a := range keysAndArgs[script.KeyCount:] {
		args = append(args, fmt.Sprint(a))
	}
	if script.Hash == "" {
		sum := sha1.Sum([]byte(script.Src))
		script.Hash = hex.EncodeToString(sum[:])
	}
	r := c.c.Do(c.ctx, c.c.B().Evalsha().Sha1(script.Hash).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if err := r.Error(); err != nil && isNoScript(err) {
		r = c.c.Do(c.ctx, c.c.B().Eval().Script(script.Src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	v, err := r.ToAny()
	if vk.IsValkeyNil(err) {
		return nil, nil
	}
	return v, err
}

func isNoScript(err error) bool {
	ve, ok := vk.IsValkeyErr(err)
	return ok && ve.IsNoScript()
}

func (c valkeyConn) ScriptLoad(script *rsredis.Script) error {
	h, err := c.c.Do(c.ctx, c.c.B().ScriptLoad().Script(script.Src).Build()).ToString()
	if err == nil {
		script.Hash = h
	}
	return err
}

func (c valkeyConn) PTTL(name string) (time.Duration, error) {
	ms, err := c.c.Do(c.ctx, c.c.B().Pttl().Key(name).Build()).AsInt64()
	return time.Duration(ms) * time.Millisecond, err
}

func (c valkeyConn) Close() error { return nil }

// --- bsm/redislock -----------------------------------------------------------

type redislockLocker struct {
	rc *goredis.Client
	c  *redislock.Client
}

func openRedislock(ctx context.Context, addrs []string) (locker, error) {
	rc := goredisClient(addrs[0])
	return &redislockLocker{rc: rc, c: redislock.New(rc)}, nil
}

func (r *redislockLocker) Lock(ctx context.Context, name string) (unlockFunc, error) {
	lk, err := r.c.Obtain(ctx, name, lockTTL, &redislock.Options{RetryStrategy: redislock.LinearBackoff(pollEvery)})
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

func (r *redislockLocker) Close() error { return r.rc.Close() }

// --- valkeylock --------------------------------------------------------------

type valkeylockLocker struct {
	l valkeylock.Locker
}

func openValkeylock(majority int32) func(ctx context.Context, addrs []string) (locker, error) {
	return func(ctx context.Context, addrs []string) (locker, error) {
		l, err := valkeylock.NewLocker(valkeylock.LockerOption{
			ClientOption: vk.ClientOption{InitAddress: []string{addrs[0]}},
			KeyMajority:  majority,
			KeyValidity:  lockTTL,
		})
		if err != nil {
			return nil, err
		}
		return &valkeylockLocker{l: l}, nil
	}
}

func (v *valkeylockLocker) Lock(ctx context.Context, name string) (unlockFunc, error) {
	_, cancel, err := v.l.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	// cancel deletes the keys and returns once they are deleted.
	return func(context.Context) error { cancel(); return nil }, nil
}

func (v *valkeylockLocker) Close() error { v.l.Close(); return nil }
