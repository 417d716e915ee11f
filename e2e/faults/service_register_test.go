package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// TestFaultsServiceRegister (T25) checks the HTTP lock service the way
// Jepsen checks a lock service: concurrent HTTP clients write a fenced
// register only under /v1 leases while `dlock serve` is paused and killed,
// Valkey is paused and links are delayed. The register history must be
// linearizable (porcupine; a timeout is inconclusive and fails), no stale
// write may be accepted, no update lost and fences never repeat or go back.
// The unfenced run is the negative control: the same faults let stale
// writes in.
func TestFaultsServiceRegister(t *testing.T) {
	for _, seed := range seeds() {
		t.Run(fmt.Sprintf("T25_service_register_fenced/seed%d", seed), func(t *testing.T) { testServiceRegister(t, true, seed) })
	}
	t.Run("T25_service_register_unfenced/seed1", func(t *testing.T) { testServiceRegister(t, false, 1) })
}

// svcClient is one HTTP client: its own links to the service and to the
// register, and its own connections.
type svcClient struct {
	id     int
	svc    *toxiproxy.Proxy
	reg    *toxiproxy.Proxy
	hc     *http.Client
	record func(wire.Event)
	ttl    time.Duration
	wait   time.Duration
}

func (c *svcClient) lease(ctx context.Context, op string, body map[string]any, timeout time.Duration) (int, leaseReply, error) {
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.svc.Listen+"/v1/locks/reg/"+op, bytes.NewReader(b))
	if err != nil {
		return 0, leaseReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, leaseReply{}, err
	}
	defer resp.Body.Close()
	var r leaseReply
	err = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r, err
}

// regCall calls the register; an error means the outcome is unknown.
func (c *svcClient) regCall(ctx context.Context, op string, i int, fence, val int64) (bool, int64, error) {
	q := url.Values{"w": {strconv.Itoa(c.id)}, "i": {strconv.Itoa(i)}, "fence": {strconv.FormatInt(fence, 10)}, "val": {strconv.FormatInt(val, 10)}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.reg.Listen+"/"+op+"?"+q.Encode(), nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, 0, err
	}
	defer resp.Body.Close()
	var r struct {
		OK  bool  `json:"ok"`
		Val int64 `json:"val"`
	}
	if resp.StatusCode != http.StatusOK {
		return false, 0, fmt.Errorf("register: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&r)
	return r.OK, r.Val, err
}

// run takes the lease over and over and, under it, reads the register and
// writes back the value plus one, with the lease's fence. The client trusts
// its lease blindly (no check of its own clock): only the fence protects
// the register.
func (c *svcClient) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		c.record(wire.Event{Kind: wire.KindInvoke, Iter: i, Mode: "mutex"})
		status, r, err := c.lease(ctx, "acquire", map[string]any{"ttlMs": c.ttl.Milliseconds(), "waitMs": c.wait.Milliseconds()}, c.wait+3*time.Second)
		if err != nil || status != http.StatusOK {
			c.record(wire.Event{Kind: wire.KindFail, Iter: i, Err: fmt.Sprintf("status %d, %v", status, err)})
			if err != nil || status >= 500 {
				t := time.NewTimer(20 * time.Millisecond) // the service is down: no busy loop
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
			}
			continue
		}
		c.record(wire.Event{Kind: wire.KindAcquire, Iter: i, Mode: "mutex", Fence: r.Fence})
		c.record(wire.Event{Kind: wire.KindEnter, Iter: i, Fence: r.Fence})
		c.record(wire.Event{Kind: wire.KindReadCall, Iter: i, Fence: r.Fence})
		ok, v, err := c.regCall(ctx, "read", i, r.Fence, 0)
		c.record(wire.Event{Kind: wire.KindRead, Iter: i, Fence: r.Fence, Val: v, Accepted: ok, Err: errText(err)})
		if ok && err == nil {
			c.record(wire.Event{Kind: wire.KindWriteCall, Iter: i, Fence: r.Fence, Val: v + 1})
			ok, _, err = c.regCall(ctx, "write", i, r.Fence, v+1)
			c.record(wire.Event{Kind: wire.KindWrite, Iter: i, Fence: r.Fence, Val: v + 1, Accepted: ok, Err: errText(err)})
		}
		c.record(wire.Event{Kind: wire.KindExit, Iter: i, Fence: r.Fence})
		status, _, err = c.lease(context.WithoutCancel(ctx), "release", map[string]any{"token": r.Token}, 3*time.Second)
		rerr := ""
		if err != nil || status != http.StatusOK {
			rerr = fmt.Sprintf("status %d, %v", status, err)
		}
		c.record(wire.Event{Kind: wire.KindRelease, Iter: i, Fence: r.Fence, Err: rerr})
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func testServiceRegister(t *testing.T, fenced bool, seed uint64) {
	const (
		clients = 4
		ttl     = time.Second
	)
	run := 20 * time.Second
	if !fenced {
		run = 8 * time.Second // the control needs only the forced phase
	}
	if long() {
		run *= 4
	}
	node := testredis.Start(t)
	reg := newRegister(t, fenced)
	tp := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxy := func(name, upstream string) *toxiproxy.Proxy {
		p := toxiproxy.NewProxy(tp, name, "127.0.0.1:0", upstream)
		if err := p.Start(); err != nil {
			t.Fatalf("start proxy %s: %v", name, err)
		}
		t.Cleanup(p.Stop)
		return p
	}
	srvLink := proxy("serve-node", node.Addr())
	s := startService(t, "--redis-url", "redis://"+srvLink.Listen, "--log-level", "warn")

	var (
		mu  sync.Mutex
		evs []wire.Event
	)
	var regLinks, svcLinks []*toxiproxy.Proxy
	var cs []*svcClient
	for i := 1; i <= clients; i++ {
		c := &svcClient{id: i, svc: proxy(fmt.Sprintf("c%d-serve", i), s.addr), reg: proxy(fmt.Sprintf("c%d-reg", i), reg.addr()),
			hc: &http.Client{Transport: &http.Transport{}}, ttl: ttl, wait: time.Second}
		c.record = func(ev wire.Event) {
			ev.W, ev.T = c.id, wire.Now()
			mu.Lock()
			evs = append(evs, ev)
			mu.Unlock()
		}
		regLinks, svcLinks = append(regLinks, c.reg), append(svcLinks, c.svc)
		cs = append(cs, c)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.run(ctx) })
	}
	defer func() {
		stop()
		wg.Wait()
		for _, c := range cs {
			c.hc.CloseIdleConnections()
		}
	}()

	counts := map[string]int{}
	delay := func(ps []*toxiproxy.Proxy, stream string, lat time.Duration) {
		for _, p := range ps {
			if err := addToxic(p, "t25-delay", "latency", stream, map[string]any{"latency": lat.Milliseconds()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	undelay := func(ps []*toxiproxy.Proxy) {
		for _, p := range ps {
			if err := p.Toxics.RemoveToxic(t.Context(), "t25-delay"); err != nil {
				t.Fatalf("remove latency from %s: %v", p.Name, err)
			}
		}
	}
	sleep := func(d time.Duration) {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-t.Context().Done():
		}
	}

	// Forced phase: every register call arrives 1.5s late (TTL 1s), so a
	// holder's write lands after its lease ended and the next holder read.
	start := time.Now()
	delay(regLinks, "upstream", 1500*time.Millisecond)
	counts["register links delayed 1.5s"]++
	sleep(6 * time.Second)
	undelay(regLinks)

	// Random phase (seeded): one fault at a time until the run ends.
	rng := rand.New(rand.NewPCG(seed, 23))
	span := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	for time.Since(start) < run {
		sleep(span(100*time.Millisecond, 500*time.Millisecond))
		switch k := rng.IntN(6); k {
		case 0:
			counts["serve paused"]++
			s.cmd.Process.Signal(syscall.SIGSTOP)
			waitProcState(s.cmd.Process.Pid, 'T', 5*time.Second)
			sleep(span(300*time.Millisecond, 1500*time.Millisecond))
			s.cmd.Process.Signal(syscall.SIGCONT)
		case 1:
			counts["serve killed and restarted"]++
			s.kill()
			s.start()
		case 2:
			counts["valkey paused"]++
			node.Pause()
			sleep(span(300*time.Millisecond, 1500*time.Millisecond))
			node.Resume()
		case 3, 4, 5:
			links := [][]*toxiproxy.Proxy{regLinks, svcLinks, {srvLink}}[k-3]
			what := []string{"client-register", "client-serve", "serve-valkey"}[k-3]
			lat := span(200*time.Millisecond, 1500*time.Millisecond)
			// Delay one client's link, or the server's.
			if len(links) > 1 {
				j := rng.IntN(len(links))
				links = links[j : j+1]
			}
			counts[what+" link delayed"]++
			delay(links, []string{"upstream", "downstream"}[rng.IntN(2)], lat)
			sleep(span(300*time.Millisecond, 2*time.Second))
			undelay(links)
		}
	}
	stop()
	wg.Wait()

	mu.Lock()
	history := append([]wire.Event(nil), evs...)
	mu.Unlock()
	gs := grants(history)
	rs := registerStats(reg)
	lost, frac := rs.lostUpdates()
	dups, order := fenceViolations(gs)
	var faults []string
	for k, n := range counts {
		faults = append(faults, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(faults)
	r := result{
		Scenario: t.Name(), Fenced: fenced, Grants: len(gs), Overlaps: overlaps(gs),
		StaleAccepted: rs.staleAccepted, StaleRejected: rs.staleRejected, Lost: lost, LostFrac: frac,
		FenceDups: dups, FenceOrder: order, Register: checkRegister(history, fenced),
		Faults: fmt.Sprintf("%d HTTP clients (TTL 1s, wait 1s, blind read-write under /v1 leases), %v (seed %d): %s", clients, run, seed, strings.Join(faults, ", ")),
		Extra:  fmt.Sprintf("register writes %d, accepted %d; porcupine over %d register calls", rs.writes, rs.accepted, rs.reads+rs.writes),
	}
	if len(gs) == 0 {
		t.Errorf("no client was granted the lock")
	}
	if fenced {
		requireSafe(t, r)
		if lost != 0 {
			t.Errorf("lost updates = %d, want 0 with fencing", lost)
		}
		requireDetected(t, "stale writes rejected", rs.staleRejected)
	} else {
		requireDetected(t, "stale writes accepted", rs.staleAccepted)
		requireLinearizable(t, r.Register)
	}
	recordRow(t, r)
}

// recordRow adds a row to the results table with the verdict reached.
func recordRow(t *testing.T, r result) {
	r.Verdict = "pass"
	if t.Failed() {
		r.Verdict = "FAIL"
	}
	t.Logf("result: grants=%d overlaps=%d stale-accepted=%d stale-rejected=%d lost=%d fence-dups=%d fence-order=%d register=%s; %s; %s",
		r.Grants, r.Overlaps, r.StaleAccepted, r.StaleRejected, r.Lost, r.FenceDups, r.FenceOrder, r.Register, r.Faults, r.Extra)
	tableMu.Lock()
	table = append(table, r)
	tableMu.Unlock()
}
