package replicas

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testredis"
)

// checker sees each client's critical sections: it counts overlaps (two
// clients inside one lock's section) and fences that do not increase from
// one holder of a lock to the next.
type checker struct {
	mu       sync.Mutex
	holder   map[string]int // lock → client inside, +1
	last     map[string]int64
	overlaps int
	fenceBad int
	grants   int
}

func newChecker() *checker {
	return &checker{holder: make(map[string]int), last: make(map[string]int64)}
}

func (c *checker) enter(t *testing.T, name string, client int, fence int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.holder[name]; h != 0 {
		c.overlaps++
		t.Errorf("overlap on %s: client %d entered while client %d is inside", name, client, h-1)
	}
	if fence <= c.last[name] {
		c.fenceBad++
		t.Errorf("fence out of order on %s: client %d got %d after %d", name, client, fence, c.last[name])
	}
	c.holder[name] = client + 1
	c.last[name] = fence
	c.grants++
}

func (c *checker) exit(name string, client int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holder[name] == client+1 {
		c.holder[name] = 0
	}
}

func (c *checker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grants
}

// lbClient is a client of the service through the balancer that retries a
// call whose outcome is unknown (transport error, 502/503/504) with the
// same body, hence the same token.
type lbClient struct {
	url     string
	http    *http.Client
	retries *atomic.Int64
}

// call makes op on name until it has an answer; retried reports whether an
// earlier attempt may have been carried out.
func (c lbClient) call(op, name string, body map[string]any) (r reply, retried bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		r, err = post(ctx, c.http, c.url+"/v1/locks/"+name+"/"+op, body)
		if !retryable(r, err) {
			return r, retried, err
		}
		retried = true
		c.retries.Add(1)
		select {
		case <-time.After(time.Duration(10+rand.IntN(20)) * time.Millisecond): // backoff before a retry
		case <-ctx.Done():
			return r, retried, fmt.Errorf("%s %s: no answer within 60s: %v (last status %d)", op, name, err, r.status)
		}
	}
}

// contenders are clients contending for a few locks through the
// balancer, as long as the test needs them.
type contenders struct {
	t                      *testing.T
	chk                    *checker
	retries, lost, refused atomic.Int64
	stop                   chan struct{}
	wg                     sync.WaitGroup
	http                   *http.Client
}

// contend starts n clients on names through the balancer at url. Each one,
// in a loop: acquires a lock (waitMs 2000, ttlMs 3000) with a token of its
// own, enters the checker's section, extends the lease, works a few
// milliseconds, leaves and releases; any call whose outcome is unknown is
// retried with the same token. An extend that is refused (410), or a
// release refused when no earlier attempt may have done it, is a lost
// lease.
func contend(t *testing.T, url string, n int, names []string) *contenders {
	const (
		ttlMs  = 3000
		waitMs = 2000
	)
	c := &contenders{t: t, chk: newChecker(), stop: make(chan struct{}),
		http: httpClient(60*time.Second, n)}
	cl := lbClient{url: url, http: c.http, retries: &c.retries}
	for id := range n {
		c.wg.Go(func() {
			for {
				select {
				case <-c.stop:
					return
				default:
				}
				name := names[rand.IntN(len(names))]
				tok := newToken()
				r, _, err := cl.call("acquire", name, map[string]any{"ttlMs": ttlMs, "waitMs": waitMs, "token": tok})
				if err != nil {
					t.Errorf("client %d: %v", id, err)
					return
				}
				switch r.status {
				case http.StatusOK:
				case http.StatusConflict:
					c.refused.Add(1)
					continue
				default:
					t.Errorf("client %d: acquire %s: status %d (%s)", id, name, r.status, r.Error)
					continue
				}
				if r.Token != tok {
					t.Errorf("client %d: granted token %q, want its own %q", id, r.Token, tok)
				}
				c.chk.enter(t, name, id, r.Fence)
				// Extend through the balancer: another replica, as a rule.
				e, _, err := cl.call("extend", name, map[string]any{"token": tok, "ttlMs": ttlMs})
				if err != nil || e.status != http.StatusOK {
					c.lost.Add(1)
					t.Errorf("client %d: extend %s (fence %d): status %d, %v", id, name, r.Fence, e.status, err)
				}
				time.Sleep(time.Duration(1+rand.IntN(5)) * time.Millisecond) // the work under the lock
				c.chk.exit(name, id)
				rel, retried, err := cl.call("release", name, map[string]any{"token": tok})
				switch {
				case err != nil:
					t.Errorf("client %d: release %s: %v", id, name, err)
				case rel.status == http.StatusOK:
				case rel.status == http.StatusGone && retried:
					// An earlier attempt released it; its answer was lost.
				default:
					c.lost.Add(1)
					t.Errorf("client %d: release %s (fence %d): status %d (retried %v)", id, name, r.Fence, rel.status, retried)
				}
			}
		})
	}
	t.Cleanup(c.end)
	return c
}

// waitGrants waits (bounded) until the clients have n grants in all.
func (c *contenders) waitGrants(n int, what string) {
	c.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); c.chk.count() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: %d grants after 60s, want %d", what, c.chk.count(), n)
		}
	}
}

// end stops the clients (each finishes its round) and waits for them.
func (c *contenders) end() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
	c.http.CloseIdleConnections()
}

// verdict ends the run and checks it: no overlap, fences in order, no
// lost lease.
func (c *contenders) verdict() {
	c.t.Helper()
	c.end()
	c.t.Logf("%d grants, %d refusals after a wait, %d retried calls, %d overlaps, %d fences out of order, %d lost leases",
		c.chk.count(), c.refused.Load(), c.retries.Load(), c.chk.overlaps, c.chk.fenceBad, c.lost.Load())
	if c.chk.overlaps != 0 || c.chk.fenceBad != 0 || c.lost.Load() != 0 {
		c.t.Errorf("overlaps %d, fences out of order %d, lost leases %d; want 0 each", c.chk.overlaps, c.chk.fenceBad, c.lost.Load())
	}
}

var lockNames = []string{"acct-1", "acct-2", "acct-3", "acct-4"}

// TestReplicasBehindBalancer: 16 clients contend for 4 locks through
// haproxy over three replicas on one redis-server; one replica is
// SIGKILLed mid-run while the clients retry through the balancer with
// their tokens. No two clients are ever inside one lock together, every
// lock's fences increase from holder to holder, the surviving replicas keep
// serving, and no live client's lease is lost (no 410 on an extend, nor on
// a release that was not a retry).
func TestReplicasBehindBalancer(t *testing.T) {
	haproxyPath(t)
	replicasBehindBalancer(t)
}

func replicasBehindBalancer(t *testing.T) {
	redis := testredis.Start(t)
	var reps []*replica
	for i := range 3 {
		reps = append(reps, startReplica(t, i, "", "--redis-url", redis.URL()))
	}
	lb := startBalancer(t, reps)
	c := contend(t, lb.url, 16, lockNames)

	c.waitGrants(200, "before the kill")
	survivors := []*replica{reps[0], reps[2]}
	var before [2]float64
	for i, r := range survivors {
		before[i] = counter(t, r.url, "dlock_http_requests_total")
	}
	reps[1].kill()
	atKill := c.chk.count()
	t.Logf("replica 1 SIGKILLed after %d grants", atKill)
	c.waitGrants(atKill+400, "after the kill")
	c.verdict()

	for i, r := range survivors {
		if after := counter(t, r.url, "dlock_http_requests_total"); after <= before[i] {
			t.Errorf("surviving replica %s served %v requests after the kill, want more", r.url, after-before[i])
		}
		resp, err := httpClient(10*time.Second, 1).Get(r.url + "/health")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("surviving replica %s: health %v %v", r.url, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
}

// TestRollingUpgrade: the upgrade of docs/operations.md — each of three
// replicas in turn gets SIGTERM, drains and exits, and a new process takes
// its address — while 16 clients contend through haproxy: no overlap,
// fences in order, no lost lease, and every replacement serves.
func TestRollingUpgrade(t *testing.T) {
	haproxyPath(t)
	redis := testredis.Start(t)
	var reps []*replica
	for i := range 3 {
		reps = append(reps, startReplica(t, i, "", "--redis-url", redis.URL()))
	}
	lb := startBalancer(t, reps)
	c := contend(t, lb.url, 16, lockNames)
	c.waitGrants(100, "before the upgrade")
	for i, old := range reps {
		old.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-old.exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("replica %d did not exit within 60s of SIGTERM: %s", i, old.output())
		}
		reps[i] = startReplica(t, i, strings.TrimPrefix(old.url, "http://"), "--redis-url", redis.URL())
		n := c.chk.count()
		c.waitGrants(n+100, fmt.Sprintf("after replica %d was replaced", i))
		t.Logf("replica %d replaced after %d grants", i, n)
	}
	before := counter(t, reps[0].url, "dlock_http_requests_total")
	c.waitGrants(c.chk.count()+100, "after the upgrade")
	c.verdict()
	if after := counter(t, reps[0].url, "dlock_http_requests_total"); after <= before {
		t.Errorf("replacement of replica 0 served no requests through the balancer")
	}
}

// TestThroughput measures acquire+release through the balancer with one
// replica and with three, and one replica without the balancer, in one
// run: 16 clients, each on its own lock, for a few seconds each. It logs
// the figures (go test -v -run TestThroughput); it asserts only that the
// calls succeed.
func TestThroughput(t *testing.T) {
	haproxyPath(t)
	redis := testredis.Start(t)
	var reps []*replica
	for i := range 3 {
		reps = append(reps, startReplica(t, i, "", "--redis-url", redis.URL()))
	}
	one, three := startBalancer(t, reps[:1]), startBalancer(t, reps)
	const (
		clients = 16
		window  = 3 * time.Second
	)
	measure := func(label, url string) {
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
		defer hc.CloseIdleConnections()
		var ops atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(window)
		start := time.Now()
		for id := range clients {
			wg.Go(func() {
				name := fmt.Sprintf("tp-%s-%d", label, id)
				for time.Now().Before(end) {
					r, err := post(context.Background(), hc, url+"/v1/locks/"+name+"/acquire", map[string]any{"ttlMs": 10000})
					if err != nil || r.status != http.StatusOK {
						t.Errorf("%s: acquire: %d %v", label, r.status, err)
						return
					}
					r, err = post(context.Background(), hc, url+"/v1/locks/"+name+"/release", map[string]any{"token": r.Token})
					if err != nil || r.status != http.StatusOK {
						t.Errorf("%s: release: %d %v", label, r.status, err)
						return
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		el := time.Since(start)
		t.Logf("%-36s %6d acquire+release in %v: %7.0f pairs/s", label, ops.Load(), el.Round(time.Millisecond), float64(ops.Load())/el.Seconds())
	}
	measure("1 replica, direct", reps[0].url)
	measure("1 replica behind haproxy", one.url)
	measure("3 replicas behind haproxy", three.url)
}
