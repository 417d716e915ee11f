package soak

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
	"github.com/dlock-dev/dlock/internal/testredis"
)

var (
	soakFlag = flag.Duration("soak", 0, "soak duration (0: 30m with DLOCK_LONG=1 or -long, else a short smoke run)")
	longFlag = flag.Bool("long", false, "long profile (DLOCK_LONG=1 does the same)")
	seedFlag = flag.Uint64("seed", 0, "seed of the fault injector and traffic (0: from the clock, printed)")
	docFlag  = flag.String("soak-doc", "", "write the report (Markdown, and an SVG beside it) here; default docs/soak.md for runs of 10m or more, else a temp dir")
)

const smokeDuration = 15 * time.Second

func long() bool {
	v, _ := strconv.ParseBool(os.Getenv("DLOCK_LONG"))
	return *longFlag || v
}

func duration() time.Duration {
	switch {
	case *soakFlag > 0:
		return *soakFlag
	case long():
		return 30 * time.Minute
	}
	return smokeDuration
}

var workerBin, dlockBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "dlock-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	workerBin, dlockBin = filepath.Join(dir, "worker"), filepath.Join(dir, "dlock")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // SA1019: the test runs where it was built, so GOROOT is right; PATH may lack go
	for _, b := range []struct{ out, pkg, dir string }{
		{workerBin, "github.com/dlock-dev/dlock/e2e/cmd/worker", "."},
		{dlockBin, ".", filepath.Join("..", "..", "cmd", "dlock")},
	} {
		build := exec.Command(goBin, "build", "-o", b.out, b.pkg)
		build.Dir = b.dir
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "soak: build", b.pkg, err)
			os.RemoveAll(dir)
			os.Exit(2)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Growth bounds, checked at the end once every lease has been released or
// has expired, against the same process idle before the traffic started.
// They do not scale with the run's length: a leak of one goroutine, one
// descriptor or one lease object per few hundred operations (a run does
// tens of thousands) exceeds them, while what legitimately stays (pooled
// connections, Go's runtime caches, garbage not yet collected) fits.
const (
	// This process: goroutines other than toxiproxy's (which leaks link
	// goroutines of its own when a toxic is removed under load; they are
	// counted and reported, not judged). The test's own helpers that stay
	// (HTTP keep-alive readers of the register server, timers) are a few.
	libGoroutineSlack = 10
	// This process: descriptors. Every client has closed; a few may remain
	// for the register server's keep-alive connections from workers being
	// torn down and the runtime (epoll, pipes).
	libFDSlack = 8
	// This process: live heap after a GC. The checker keeps a window, the
	// report keeps one sample per step and the fault log; all small.
	libHeapSlack = 16 << 20
	// dlock serve: goroutines and descriptors beyond a fresh instance's.
	// Its Valkey client keeps a dedicated connection per concurrent blocking
	// wait (one per HTTP client at most: 3 goroutines and 1 descriptor
	// each), plus a few for the metrics and HTTP server.
	srvGoroutineSlack = 3*httpClients + 8
	srvFDSlack        = httpClients + 8
	// dlock serve: heap_alloc counts garbage too (GOGC 100 lets it reach
	// the live heap, a few MiB when idle).
	srvHeapSlack = 16 << 20
)

const (
	libClients  = 3
	libProcs    = 4 // goroutines of traffic per library client
	httpClients = 4
	workers     = 3
)

type sample struct {
	t                        float64 // seconds since the start
	holds, grants, faults    int64
	libG, libFD, srvG, srvFD int
	libHeap, srvHeap         float64 // MiB
	keys                     int
}

func TestSoak(t *testing.T) {
	d := duration()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("soak: %v, seed %d (rerun with -seed %d)", d, seed, seed)
	dir := t.TempDir()
	step := time.Second
	if d >= 5*time.Minute {
		step = 5 * time.Second
	}

	node := testredis.Start(t, testredis.WithPersistence())
	reg := newRegister(t)
	chk := newChecker()
	tp := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxyPorts := map[int]bool{}
	proxy := func(name, upstream string) *toxiproxy.Proxy {
		p := toxiproxy.NewProxy(tp, name, "127.0.0.1:0", upstream)
		if err := p.Start(); err != nil {
			t.Fatalf("start proxy %s: %v", name, err)
		}
		t.Cleanup(p.Stop)
		proxyPorts[port(p.Listen)] = true
		return p
	}
	var links []*toxiproxy.Proxy
	srvLink := proxy("serve-node", node.Addr())
	links = append(links, srvLink)
	srv, err := newService(dir, "--redis-url", "redis://"+srvLink.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.kill)
	httpLink := proxy("http-serve", srv.addr)
	links = append(links, httpLink)

	// Baselines: this process and the server, idle, before any traffic.
	scrape := &http.Client{Timeout: time.Second}
	libG0, tpG0 := goroutines()
	upstreamPorts := map[int]bool{node.Port(): true, port(srv.addr): true, port(reg.addr()): true}
	libFD0, _, _ := ownFDs(proxyPorts, upstreamPorts)
	libHeap0 := liveHeap()
	srvG0, srvHeap0, err := srv.metrics(scrape)
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	srvFD0 := fdCount(srv.pid())
	keys0, _ := keyCount(node)
	scrape.CloseIdleConnections()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	out := &outcomes{}
	var clients []*libClient
	for i := range libClients {
		c := &libClient{id: i, link: proxy(fmt.Sprintf("lib%d-node", i), node.Addr()), chk: chk, reg: reg, out: out, seed: seed, procs: libProcs}
		links = append(links, c.link)
		if err := c.start(ctx); err != nil {
			t.Fatalf("library client %d: %v", i, err)
		}
		clients = append(clients, c)
	}
	restart := func(c *libClient) {
		// The node may be restarting; Dial retries within its own timeout.
		for i := 0; ; i++ {
			err := c.start(ctx)
			if err == nil {
				return
			}
			if i == 5 {
				t.Fatalf("restart library client %d: %v", c.id, err)
			}
		}
	}

	start, t0 := time.Now(), wire.Now()
	end := start.Add(d)
	rng := rand.New(rand.NewPCG(seed, 0))
	var slots []*workerSlot
	spawn := func(w *workerSlot) {
		left := time.Until(end)
		if left <= 0 {
			return
		}
		modes := []string{"mutex", "read", "write", "fair"}
		if err := w.spawn(names[rng.IntN(len(names))], modes[rng.IntN(len(modes))], left); err != nil {
			t.Fatalf("spawn worker: %v", err)
		}
	}
	for i := range workers {
		w := &workerSlot{id: i + 1, node: proxy(fmt.Sprintf("w%d-node", i+1), node.Addr()),
			reg: proxy(fmt.Sprintf("w%d-reg", i+1), reg.addr()), ttl: ttl, chk: chk}
		links = append(links, w.node, w.reg)
		slots = append(slots, w)
		spawn(w)
		t.Cleanup(w.kill)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: httpClients}
	var hwg sync.WaitGroup
	for i := range httpClients {
		h := &httpClient{id: i, base: "http://" + httpLink.Listen, chk: chk, reg: reg, out: out, hc: &http.Client{Transport: transport}}
		hrng := rand.New(rand.NewPCG(seed, uint64(100+i)))
		hwg.Add(1)
		go func() {
			defer hwg.Done()
			h.run(ctx, hrng)
		}()
	}

	in := &injector{t: t, rng: rng, node: node, srv: srv, links: links, workers: slots, clients: clients,
		spawn: spawn, restart: restart, counts: map[string]int{}}
	defer in.quiesce()

	// The sampler records the figures over time for the plot.
	var (
		smu     sync.Mutex
		samples []sample
	)
	sdone, sstop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sdone)
		tick := time.NewTicker(step)
		defer tick.Stop()
		sc := &http.Client{Timeout: 500 * time.Millisecond}
		defer sc.CloseIdleConnections()
		for {
			s := sample{t: time.Since(start).Seconds(), holds: chk.active.Load(), grants: chk.grants.Load(), faults: int64(in.total())}
			s.libG, _ = goroutines()
			s.libFD, _, _ = ownFDs(proxyPorts, upstreamPorts)
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			s.libHeap = float64(ms.HeapAlloc) / (1 << 20)
			s.srvG, s.srvFD, s.keys = -1, -1, -1
			if g, h, err := srv.metrics(sc); err == nil {
				s.srvG, s.srvHeap = int(g), h/(1<<20)
				s.srvFD = fdCount(srv.pid())
			}
			if n, err := keyCount(node); err == nil {
				s.keys = n
			}
			smu.Lock()
			samples = append(samples, s)
			smu.Unlock()
			select {
			case <-tick.C:
			case <-sstop:
				return
			}
		}
	}()

	// Faults, one at a time, on this goroutine, until the end.
	gapLo, gapHi := 300*time.Millisecond, 1200*time.Millisecond
	if d >= 5*time.Minute {
		gapLo, gapHi = time.Second, 5*time.Second
	}
	for time.Now().Before(end) {
		sleep(ctx, min(in.span(gapLo, gapHi), time.Until(end)))
		if !time.Now().Before(end) {
			break
		}
		in.inject(time.Since(start) < d*6/10)
	}
	in.quiesce()
	t.Logf("faults: %d (%s)", in.total(), in.summary())

	// Stop the traffic. Library clients close cleanly (releasing what they
	// hold); workers are killed (their leases expire); HTTP clients release
	// what they hold as they stop.
	stop()
	hwg.Wait()
	for _, c := range clients {
		c.stop(false)
	}
	for _, w := range slots {
		w.kill()
		<-w.exited
		for _, e := range w.errs {
			t.Errorf("worker exited on its own: %s", e)
		}
	}
	transport.CloseIdleConnections()
	trafficEnd := time.Since(start)

	// Every lease released or expired: no lock key may stay; the names'
	// bookkeeping keys (queues, holder sets, waiter flags) expire a minute
	// after their last use, and only the fence counters and the fair locks'
	// audit streams are kept for the retention (a day).
	var keys []string
	drained := waitFor(ttl+10*time.Second, func() bool {
		var err error
		keys, err = leftoverKeys(node, false)
		return err == nil && len(keys) == 0
	})
	if !drained {
		t.Errorf("lock keys, or bookkeeping keys without a TTL within %v, still there %v after the traffic stopped: %s", auxTTL, 10*time.Second+ttl, withTTLs(node, keys))
	}
	if d >= 5*time.Minute {
		// Long runs also wait for the bookkeeping to expire.
		drained = waitFor(auxTTL+5*time.Second, func() bool {
			var err error
			keys, err = leftoverKeys(node, true)
			return err == nil && len(keys) == 0
		})
		if !drained {
			t.Errorf("keys other than fence keys, slot marks and audit streams still there %v after the traffic stopped: %s", auxTTL+ttl+15*time.Second, withTTLs(node, keys))
		}
	}
	// The sampler goes on through the drain, so the plot shows it.
	close(sstop)
	<-sdone
	fenceKeys, maxPTTL := fenceKeyStats(t, node)
	keysEnd, _ := keyCount(node)

	// Growth of the server (the instance running since its last restart).
	var srvG, srvHeap float64
	var srvFD int
	srvSettled := waitFor(15*time.Second, func() bool {
		srvG, srvHeap, err = srv.metrics(scrape)
		srvFD = fdCount(srv.pid())
		return err == nil && srvG <= srvG0+srvGoroutineSlack && srvFD <= srvFD0+srvFDSlack && srvHeap <= srvHeap0+srvHeapSlack
	})
	scrape.CloseIdleConnections()
	srvUp := time.Since(srv.started)
	srv.kill()

	// Growth of this process.
	chk.forget()
	var libG, tpG, libFD, tpFD int
	var libHeap uint64
	var fdText string
	libSettled := waitFor(15*time.Second, func() bool {
		libG, tpG = goroutines()
		libFD, tpFD, fdText = ownFDs(proxyPorts, upstreamPorts)
		libHeap = liveHeap()
		return libG <= libG0+libGoroutineSlack && libFD <= libFD0+libFDSlack && libHeap <= libHeap0+libHeapSlack
	})

	tot := reg.totals()
	chk.mu.Lock()
	r := report{
		t0: t0, dur: d, traffic: trafficEnd, seed: seed, step: step, samples: samples, faults: in.events, faultSummary: in.summary(), nfaults: in.total(),
		grants: chk.grants.Load(), holds: chk.holdsN, empty: chk.empty, long: chk.long, overlaps: chk.overlap, semOver: chk.semOver,
		dups: chk.dups, order: chk.order, reentries: chk.reentries, violations: append([]string(nil), chk.samples...),
		reg: tot, out: out,
		keys0: keys0, keysEnd: keysEnd, fenceKeys: fenceKeys, maxFencePTTL: maxPTTL, drained: drained,
		libG0: libG0, libG: libG, tpG0: tpG0, tpG: tpG, libFD0: libFD0, libFD: libFD, tpFD: tpFD, libHeap0: libHeap0, libHeap: libHeap,
		srvG0: srvG0, srvG: srvG, srvFD0: srvFD0, srvFD: srvFD, srvHeap0: srvHeap0, srvHeap: srvHeap, srvUp: srvUp,
		libOK: libSettled, srvOK: srvSettled,
	}
	chk.mu.Unlock()
	t.Log(r.summary())

	if r.overlaps != 0 || r.semOver != 0 {
		t.Errorf("%d overlapping exclusive holds, %d semaphore over-limit points (must be 0): %q", r.overlaps, r.semOver, r.violations)
	}
	if r.dups != 0 || r.order != 0 {
		t.Errorf("fences: %d repeated, %d not increasing (must be 0): %q", r.dups, r.order, r.violations)
	}
	if tot.staleAccepted != 0 || tot.lost != 0 {
		t.Errorf("register: %d stale writes accepted, %d updates lost (must be 0)", tot.staleAccepted, tot.lost)
	}
	if r.grants == 0 || tot.accepted == 0 {
		t.Errorf("no traffic: %d grants, %d register writes accepted", r.grants, tot.accepted)
	}
	if !srvSettled {
		t.Errorf("dlock serve grew: goroutines %v -> %v (bound +%d), fds %d -> %d (bound +%d), heap %.1f -> %.1f MiB (bound +%d MiB)",
			srvG0, srvG, srvGoroutineSlack, srvFD0, srvFD, srvFDSlack, srvHeap0/(1<<20), srvHeap/(1<<20), srvHeapSlack>>20)
	}
	if !libSettled {
		t.Errorf("this process grew: goroutines %d -> %d (bound +%d; toxiproxy's %d -> %d not counted), fds %d -> %d (bound +%d), heap %.1f -> %.1f MiB (bound +%d MiB)\n%s",
			libG0, libG, libGoroutineSlack, tpG0, tpG, libFD0, libFD, libFDSlack, float64(libHeap0)/(1<<20), float64(libHeap)/(1<<20), libHeapSlack>>20, fdText+"\n"+goroutineDump())
	}
	path := *docFlag
	if path == "" {
		path = filepath.Join(dir, "soak.md")
		if d >= 10*time.Minute {
			path = filepath.Join("..", "..", "docs", "soak.md")
		}
	}
	r.failed = t.Failed()
	if err := r.write(path); err != nil {
		t.Errorf("write the report: %v", err)
	}
	t.Logf("report written to %s", path)
}

// waitFor polls cond every 100ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// goroutines counts this process's goroutines, apart from toxiproxy's
// (returned second).
func goroutines() (own, toxiproxy int) {
	for _, g := range strings.Split(goroutineDump(), "\n\n") {
		switch {
		case strings.TrimSpace(g) == "":
		case strings.Contains(g, "github.com/Shopify/toxiproxy"):
			toxiproxy++
		default:
			own++
		}
	}
	return own, toxiproxy
}

func goroutineDump() string {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func keyCount(node *testredis.Server) (int, error) {
	v, err := node.DoTimeout(500*time.Millisecond, "DBSIZE")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(v)
}

// auxTTL bounds the time to live of a name's bookkeeping keys after their
// last use: the longest lease or queue TTL (a second here) plus a minute.
const auxTTL = ttl + time.Minute

// retained reports whether k is kept for the retention: a name's fence
// key (61 s after its last hold's TTL) or a fair lock's audit stream (a day
// after the last grant); or for good: a hash slot's fence mark, one per
// slot whatever the number of names.
func retained(k string) bool {
	if strings.HasSuffix(k, "}:fence-mark") {
		return true
	}
	for _, n := range names {
		if k == "{lock:"+n+"}:fence" || k == "{lock:"+n+"}:fair:audit" {
			return true
		}
	}
	return false
}

// leftoverKeys returns the keys that should be gone: every key but the
// retained ones when all is set, else the lock keys and the bookkeeping
// keys without a TTL within auxTTL.
func leftoverKeys(node *testredis.Server, all bool) ([]string, error) {
	v, err := node.DoTimeout(time.Second, "KEYS", "*")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range strings.Split(v, "\n") {
		if k == "" || retained(k) {
			continue
		}
		if !all && !strings.HasPrefix(k, "lock:") {
			ms, err := node.DoTimeout(time.Second, "PTTL", k)
			if err != nil {
				return nil, err
			}
			if n, _ := strconv.ParseInt(ms, 10, 64); n == -2 || (n >= 0 && n <= auxTTL.Milliseconds()) {
				continue
			}
		}
		out = append(out, k)
	}
	return out, nil
}

func retainedKeys() []string {
	var ks []string
	for _, n := range names {
		ks = append(ks, "{lock:"+n+"}:fence", "{lock:"+n+"}:fair:audit")
	}
	return ks
}

// fenceKeyStats returns how many retained keys (fence counters, audit
// streams) remain and the longest
// time to live among them, which must be within the retention (a day by
// default).
func fenceKeyStats(t *testing.T, node *testredis.Server) (int, time.Duration) {
	n, longest := 0, time.Duration(0)
	for _, key := range retainedKeys() {
		v, err := node.DoTimeout(time.Second, "PTTL", key)
		if err != nil {
			t.Errorf("PTTL %s: %v", key, err)
			continue
		}
		ms, _ := strconv.ParseInt(v, 10, 64)
		switch {
		case ms == -2: // not there
		case ms < 0:
			t.Errorf("%s has no expiry (PTTL %d), want within the retention", key, ms)
		default:
			n++
			longest = max(longest, time.Duration(ms)*time.Millisecond)
		}
	}
	if longest > 24*time.Hour+time.Minute+ttl {
		t.Errorf("a retained key lives %v, longer than the retention (24h) + a minute", longest)
	}
	return n, longest
}

// withTTLs renders keys with their remaining time to live.
func withTTLs(node *testredis.Server, keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		v, err := node.DoTimeout(time.Second, "PTTL", k)
		if err != nil {
			v = err.Error()
		}
		fmt.Fprintf(&b, "%s (PTTL %s ms) ", k, v)
	}
	return b.String()
}

func port(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}
