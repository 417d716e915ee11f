package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/store/valkey"
)

var (
	names = []string{"a", "b", "c"}
	kinds = []string{"mutex", "reentrant", "read", "write", "fair", "semaphore"}
)

const (
	ttl      = time.Second
	permits  = 2
	waitMax  = 1500 * time.Millisecond
	renewTTL = time.Second
)

// outcomes counts acquire results by kind of result, for the report.
type outcomes struct {
	granted, refused, canceled, failed, lost atomic.Int64
}

// libClient is one Locker of this process on its own link to the node. A
// crash closes its store under it (its leases are left to expire) and a
// restart dials a new one.
type libClient struct {
	id    int
	link  *toxiproxy.Proxy
	chk   *checker
	reg   *register
	out   *outcomes
	seed  uint64
	procs int

	mu     sync.Mutex
	store  *valkey.Store
	locker *dlock.Locker
	cancel context.CancelFunc
	wg     sync.WaitGroup
	gen    int
}

// start dials the store and starts procs goroutines of traffic.
func (c *libClient) start(ctx context.Context) error {
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	store, err := valkey.Dial(dctx, "redis://"+c.link.Listen)
	dcancel()
	if err != nil {
		return err
	}
	locker, err := dlock.New(store, dlock.WithTTL(ttl), dlock.WithOpTimeout(500*time.Millisecond),
		dlock.WithQueueTTL(time.Second), dlock.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		store.Close()
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.store, c.locker, c.cancel = store, locker, cancel
	c.gen++
	for g := range c.procs {
		c.wg.Add(1)
		rng := rand.New(rand.NewPCG(c.seed, uint64(c.id*1000+c.gen*10+g)))
		who := fmt.Sprintf("c%d.%d.%d", c.id, c.gen, g)
		go func() {
			defer c.wg.Done()
			for cctx.Err() == nil {
				c.op(cctx, locker, rng, who)
			}
		}()
	}
	return nil
}

// stop ends the client: crash closes the store first (leases stay on the
// node until their TTL), a clean stop closes the Locker first (it releases
// them).
func (c *libClient) stop(crash bool) {
	c.mu.Lock()
	store, locker, cancel := c.store, c.locker, c.cancel
	c.mu.Unlock()
	if store == nil {
		return
	}
	cancel()
	if crash {
		store.Close()
		c.wg.Wait()
		locker.Close()
	} else {
		c.wg.Wait()
		locker.Close()
		store.Close()
	}
	c.mu.Lock()
	c.store, c.locker = nil, nil
	c.mu.Unlock()
}

// validUntil returns the end of ls's validity as its Locker counts it now,
// or prev when the lease has already ended. The clock is read before the
// TTL, so the result is never later than the Locker's own.
func validUntil(ls *dlock.Lease, prev int64) int64 {
	t := wire.Now()
	if d := ls.TTL(); d > 0 {
		return max(prev, t+int64(d))
	}
	return prev
}

// op is one acquire of a random kind and name, a critical section that
// reads and increments the name's register cell under the fence (or only
// reads it, for shared holds), and a release. Some acquires wait, some are
// cancelled while they wait, some leases are renewed in the background
// and held past their TTL.
func (c *libClient) op(ctx context.Context, l *dlock.Locker, rng *rand.Rand, who string) {
	name := names[rng.IntN(len(names))]
	kind := kinds[rng.IntN(len(kinds))]
	var opts []dlock.Option
	renew := rng.IntN(5) == 0
	if renew {
		opts = append(opts, dlock.WithAutoRenew(), dlock.WithTTL(renewTTL))
	}
	if kind == "reentrant" {
		opts = append(opts, dlock.WithOwner(who))
	}
	wait := rng.IntN(3) > 0
	d := time.Duration(rng.Int64N(int64(waitMax)))
	if wait && rng.IntN(4) == 0 {
		d = time.Duration(rng.Int64N(int64(100 * time.Millisecond))) // cancelled mid-wait
	}
	actx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	invoke := wire.Now()
	var ls *dlock.Lease
	var err error
	switch kind {
	case "mutex":
		m := l.Mutex(name, opts...)
		ls, err = pick(wait, m.Lock, m.TryLock)(actx)
	case "reentrant":
		r := l.Reentrant(name, opts...)
		ls, err = pick(wait, r.Lock, r.TryLock)(actx)
	case "read":
		rw := l.RWMutex(name, opts...)
		ls, err = pick(wait, rw.RLock, rw.TryRLock)(actx)
	case "write":
		rw := l.RWMutex(name, opts...)
		ls, err = pick(wait, rw.Lock, rw.TryLock)(actx)
	case "fair":
		f := l.Fair(name, opts...)
		ls, err = pick(wait, f.Lock, f.TryLock)(actx)
	case "semaphore":
		s := l.Semaphore(name, permits, opts...)
		ls, err = pick(wait, s.Acquire, s.TryAcquire)(actx)
	}
	ret := wire.Now()
	if err != nil {
		c.out.count(err)
		if ctx.Err() == nil && !errors.Is(err, dlock.ErrLocked) && !errors.Is(err, context.DeadlineExceeded) {
			// A store fault: do not spin on it.
			sleep(ctx, 20*time.Millisecond)
		}
		return
	}
	c.out.granted.Add(1)
	vu := validUntil(ls, ret)
	c.chk.granted(name, grantRec{invoke: invoke, ret: ret, fence: ls.Fence(), excl: exclusive(kind), who: who, kind: kind})
	h := hold{name: name, holder: who, mode: kind, limit: permits, start: ret}
	confirmed := true // every release of the hold answered by the store

	holdFor := time.Duration(5+rng.IntN(100)) * time.Millisecond
	if renew {
		holdFor = renewTTL + time.Duration(rng.Int64N(int64(renewTTL)))
	}
	alive := func() bool {
		vu = validUntil(ls, vu)
		return ls.Err() == nil && ctx.Err() == nil
	}
	section := func(ls *dlock.Lease) {
		if !alive() {
			return
		}
		if !exclusive(kind) {
			if kind == "read" {
				c.reg.op(name, false, ls.Fence(), 0)
			}
			return
		}
		ok, v := c.reg.op(name, false, ls.Fence(), 0)
		if !ok || !alive() {
			return
		}
		c.reg.op(name, true, ls.Fence(), v+1)
	}
	if kind == "reentrant" && rng.IntN(2) == 0 {
		// Re-enter as the same owner; the inner hold is part of the outer.
		r := l.Reentrant(name, opts...)
		if in, err := r.TryLock(ctx); err == nil {
			section(in)
			confirmed = releaseConfirmed(in.Release(context.WithoutCancel(ctx))) && confirmed
		}
	} else {
		section(ls)
	}
	for end := time.Now().Add(holdFor); time.Now().Before(end) && alive(); {
		t := time.NewTimer(min(50*time.Millisecond, time.Until(end)))
		select {
		case <-t.C:
		case <-ls.Done():
		case <-ctx.Done():
		}
		t.Stop()
	}
	vu = validUntil(ls, vu)
	h.end = min(wire.Now(), vu)
	c.chk.finished(h)
	if ls.Err() != nil {
		c.out.lost.Add(1)
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	confirmed = releaseConfirmed(ls.Release(rctx)) && confirmed
	rcancel()
	if kind == "reentrant" && !confirmed {
		c.chk.unreleased(name, who, ls.Fence())
	}
}

// releaseConfirmed reports whether the store answered a release: only a
// StoreError leaves the hold possibly alive until its TTL.
func releaseConfirmed(err error) bool {
	var se *dlock.StoreError
	return !errors.As(err, &se)
}

func pick(wait bool, w, try func(context.Context) (*dlock.Lease, error)) func(context.Context) (*dlock.Lease, error) {
	if wait {
		return w
	}
	return try
}

func (o *outcomes) count(err error) {
	switch {
	case errors.Is(err, dlock.ErrLocked):
		o.refused.Add(1)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		o.canceled.Add(1)
	default:
		o.failed.Add(1)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// httpClient is a client of `dlock serve` through its own link: /v1
// leases of every kind, some extended (renewed) by the client while it
// holds them past their TTL, some waits abandoned by hanging up.
type httpClient struct {
	id   int
	base string
	chk  *checker
	reg  *register
	out  *outcomes
	hc   *http.Client
}

type v1Reply struct {
	Token string `json:"token"`
	Fence int64  `json:"fence"`
	TTLMs int64  `json:"ttlMs"`
}

func (c *httpClient) call(ctx context.Context, op, name string, body map[string]any, timeout time.Duration) (int, v1Reply, error) {
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/locks/"+name+"/"+op, bytes.NewReader(b))
	if err != nil {
		return 0, v1Reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, v1Reply{}, err
	}
	defer resp.Body.Close()
	var r v1Reply
	err = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r, err
}

func (c *httpClient) run(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		c.op(ctx, rng)
	}
}

func (c *httpClient) op(ctx context.Context, rng *rand.Rand) {
	name := names[rng.IntN(len(names))]
	kind := kinds[rng.IntN(len(kinds))]
	who := fmt.Sprintf("h%d", c.id)
	body := map[string]any{"ttlMs": ttl.Milliseconds(), "mode": kind}
	switch kind {
	case "semaphore":
		body["limit"] = permits
	case "reentrant":
		body["owner"] = who
	}
	wait := time.Duration(0)
	if rng.IntN(3) > 0 {
		wait = time.Duration(rng.Int64N(int64(waitMax)))
		body["waitMs"] = wait.Milliseconds()
	}
	timeout := wait + 2*time.Second
	if wait > 0 && rng.IntN(5) == 0 {
		timeout = time.Duration(rng.Int64N(int64(wait))) // hang up mid-wait
	}
	invoke := wire.Now()
	status, r, err := c.call(ctx, "acquire", name, body, timeout)
	ret := wire.Now()
	switch {
	case err != nil:
		c.out.canceled.Add(1) // outcome unknown: the lease, if any, expires
		sleep(ctx, 20*time.Millisecond)
		return
	case status == http.StatusConflict:
		c.out.refused.Add(1)
		return
	case status != http.StatusOK:
		c.out.failed.Add(1)
		sleep(ctx, 20*time.Millisecond)
		return
	}
	c.out.granted.Add(1)
	vu := invoke + r.TTLMs*int64(time.Millisecond)
	c.chk.granted(name, grantRec{invoke: invoke, ret: ret, fence: r.Fence, excl: exclusive(kind), who: who, kind: kind})
	h := hold{name: name, holder: who, mode: kind, limit: permits, start: ret}
	valid := func() bool { return wire.Now() < vu && ctx.Err() == nil }
	if valid() && kind != "semaphore" {
		if ok, v := c.reg.op(name, false, r.Fence, 0); ok && exclusive(kind) && valid() {
			c.reg.op(name, true, r.Fence, v+1)
		}
	}
	holdFor := time.Duration(5+rng.IntN(100)) * time.Millisecond
	if rng.IntN(5) == 0 {
		holdFor = ttl + time.Duration(rng.Int64N(int64(ttl)))
	}
	lost := false
	for end := time.Now().Add(holdFor); time.Now().Before(end) && valid() && !lost; {
		sleep(ctx, min(ttl/3, time.Until(end)))
		if !time.Now().Before(end) || !valid() {
			break
		}
		sent := wire.Now()
		st, er, err := c.call(ctx, "extend", name, map[string]any{"token": r.Token, "ttlMs": ttl.Milliseconds(), "mode": kind}, time.Second)
		switch {
		case err == nil && st == http.StatusOK:
			vu = max(vu, sent+er.TTLMs*int64(time.Millisecond))
		case err == nil && st == http.StatusGone:
			lost = true
		}
	}
	h.end = min(wire.Now(), vu)
	c.chk.finished(h)
	if lost || wire.Now() >= vu {
		c.out.lost.Add(1)
	}
	st, _, err := c.call(context.WithoutCancel(ctx), "release", name, map[string]any{"token": r.Token, "mode": kind}, 2*time.Second)
	if kind == "reentrant" && (err != nil || (st != http.StatusOK && st != http.StatusGone)) {
		c.chk.unreleased(name, who, r.Fence)
	}
}
