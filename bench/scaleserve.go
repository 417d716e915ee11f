package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// svcMetrics reads the Go runtime figures of a service from its /metrics:
// goroutines, live heap and resident memory.
type svcMetrics struct {
	goroutines, heap, rss float64
}

func scrape(addr string) (svcMetrics, error) {
	var m svcMetrics
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			m.goroutines = f
		case "go_memstats_heap_inuse_bytes":
			m.heap = f
		case "process_resident_memory_bytes":
			m.rss = f
		}
	}
	return m, sc.Err()
}

// settled scrapes addr until goroutines is at least want and the last
// three scrapes, 200 ms apart, agree, or until timeout.
func settled(ctx context.Context, addr string, want float64, timeout time.Duration) (svcMetrics, error) {
	deadline := time.Now().Add(timeout)
	var last []float64
	for {
		m, err := scrape(addr)
		if err != nil {
			return m, err
		}
		last = append(last, m.goroutines)
		if n := len(last); m.goroutines >= want && n >= 3 && last[n-1] == last[n-2] && last[n-2] == last[n-3] {
			return m, nil
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("service goroutines %v after %v, want at least %v and steady", m.goroutines, timeout, want)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return m, err
		}
	}
}

// dialAll dials n connections to addr, 32 at a time (a burst of 10 000
// would overflow the listen backlog and wait for SYN retries).
func dialAll(ctx context.Context, addr string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	err := parallelDoN(32, n, func(i int) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		conns[i] = c
		return err
	})
	if err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return conns, nil
}

// parallelDoN runs fn(i) for i in [0, n) on g goroutines.
func parallelDoN(g, n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return e
	}
	return nil
}

// serveWaiters starts `dlock serve` over the server, holds one name
// through /v1, and puts n clients, each on its own keep-alive connection,
// in a waiting acquire of it. It reports the service's goroutines and live
// heap per waiter, then lets the lock pass from waiter to waiter (each
// holds it cfg.hold, releases it and waits again, so n stay waiting) and
// reports the release-to-grant gap through the service.
func serveWaiters(ctx context.Context, nodes cluster, n int, cfg scaleConfig) (metrics, error) {
	if err := nodes.flush(ctx); err != nil {
		return nil, err
	}
	svc, err := startService(ctx, "--redis-url", "redis://"+nodes[0].addr, "--log-level", "error")
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	m0, err := settled(ctx, svc.addr, 0, 10*time.Second)
	if err != nil {
		return nil, err
	}
	path := "/v1/locks/hot-" + strconv.FormatInt(cellSeq.Add(1), 10)
	holder := &httpConn{addr: svc.addr}
	defer holder.close()
	body, err := holder.post(path+"/acquire", []byte(`{"ttlMs":60000}`))
	if err != nil {
		return nil, fmt.Errorf("serve: holder: %w", err)
	}
	var g struct{ Token string }
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, err
	}
	holderToken := g.Token
	conns, err := dialAll(ctx, svc.addr, n)
	if err != nil {
		return nil, fmt.Errorf("serve: dial %d: %w", n, err)
	}
	h := &handoffs{w: &window{nodes: nodes}, base: time.Now()}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			h.waiter(&httpConn{addr: svc.addr, c: c, br: bufio.NewReaderSize(c, 4096), timeout: 6 * time.Minute}, path, cfg.hold)
		})
	}
	defer func() {
		h.w.stopped.Store(true)
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	m1, err := settled(ctx, svc.addr, m0.goroutines+float64(n), 60*time.Second+time.Duration(n)*10*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("serve: %d waiters: %w", n, err)
	}
	h.lastRelease.Store(h.now())
	if _, err := holder.post(path+"/release", []byte(`{"token":"`+holderToken+`"}`)); err != nil {
		return nil, fmt.Errorf("serve: holder release: %w", err)
	}
	cpu0 := svc.cpu()
	if err := h.w.run(ctx, cfg.warm, cfg.dur); err != nil {
		return nil, err
	}
	cpu := svc.cpu() - cpu0
	return h.metrics(n, m0, m1, cpu)
}

// handoffs is the lock passing from waiter to waiter through the service.
type handoffs struct {
	w           *window
	base        time.Time
	lastRelease atomic.Int64 // ns since base
	holders     atomic.Int32
	violations  atomic.Int64
	errs        atomic.Int64
	first       atomic.Value
	mu          sync.Mutex
	gaps        []time.Duration
}

func (h *handoffs) now() int64 { return int64(time.Since(h.base)) }

// waiter acquires (waiting up to 5 minutes), holds, releases, and again,
// until the window stops or its connection is closed.
func (h *handoffs) waiter(c *httpConn, path string, hold time.Duration) {
	wait := []byte(`{"ttlMs":60000,"waitMs":300000}`)
	var g struct{ Token string }
	var rel []byte
	for !h.w.stopped.Load() {
		body, err := c.post(path+"/acquire", wait)
		if err == nil {
			err = json.Unmarshal(body, &g)
		}
		if err != nil {
			if !h.w.stopped.Load() {
				h.errs.Add(1)
				h.first.CompareAndSwap(nil, err.Error())
			}
			return
		}
		tg := h.now()
		if h.holders.Add(1) != 1 {
			h.violations.Add(1)
		}
		if h.w.done() {
			h.mu.Lock()
			h.gaps = append(h.gaps, time.Duration(tg-h.lastRelease.Load()))
			h.mu.Unlock()
		}
		time.Sleep(hold)
		h.holders.Add(-1)
		h.lastRelease.Store(h.now())
		rel = append(append(append(rel[:0], `{"token":"`...), g.Token...), `"}`...)
		if _, err := c.post(path+"/release", rel); err != nil {
			if !h.w.stopped.Load() {
				h.errs.Add(1)
				h.first.CompareAndSwap(nil, err.Error())
			}
			return
		}
	}
}

func (h *handoffs) metrics(n int, m0, m1 svcMetrics, cpu time.Duration) (metrics, error) {
	h.mu.Lock()
	gaps := slices.Clone(h.gaps)
	h.mu.Unlock()
	if len(gaps) == 0 {
		return nil, fmt.Errorf("serve: no handoff with %d waiters (%d errors, first: %v)", n, h.errs.Load(), h.first.Load())
	}
	slices.Sort(gaps)
	k := float64(len(gaps))
	return metrics{
		"waiters":               float64(n),
		"goroutines_per_waiter": (m1.goroutines - m0.goroutines) / float64(n),
		"heap_per_waiter_b":     (m1.heap - m0.heap) / float64(n),
		"rss_per_waiter_b":      (m1.rss - m0.rss) / float64(n),
		"handoffs_per_s":        k / h.w.wall.Seconds(),
		"gap_p50_us":            pct(gaps, 50),
		"gap_p99_us":            pct(gaps, 99),
		"svc_cpu_us_handoff":    float64(cpu) / float64(time.Microsecond) / k,
		"srv_cmds_per_handoff":  float64(h.w.srv.calls) / k,
		"srv_cpu_us_handoff":    h.w.srv.cpu * 1e6 / k,
		"violations":            float64(h.violations.Load()),
		"errors":                float64(h.errs.Load()),
	}, nil
}

// serveSubscribers starts `dlock serve` over the server with room for n
// event streams, opens n /v1/events streams, and reports the service's
// goroutines and live heap per stream, its CPU while idle (each stream
// gets a snapshot of the locks every second), and how long an acquire's
// event takes to reach every stream.
func serveSubscribers(ctx context.Context, nodes cluster, n int, cfg scaleConfig) (metrics, error) {
	if err := nodes.flush(ctx); err != nil {
		return nil, err
	}
	svc, err := startService(ctx, "--redis-url", "redis://"+nodes[0].addr, "--log-level", "error",
		"--max-event-streams", strconv.Itoa(n))
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	m0, err := settled(ctx, svc.addr, 0, 10*time.Second)
	if err != nil {
		return nil, err
	}
	conns, err := dialAll(ctx, svc.addr, n)
	if err != nil {
		return nil, fmt.Errorf("events: dial %d: %w", n, err)
	}
	prefix := "ev-" + strconv.FormatInt(cellSeq.Add(1), 10) + "-"
	const probes = 20
	subs := make([]*subscriber, n)
	var wg sync.WaitGroup
	ready := make(chan struct{}, n)
	base := time.Now()
	for i, c := range conns {
		subs[i] = &subscriber{c: c, prefix: prefix, base: base, got: make([]int64, probes)}
		wg.Go(func() { subs[i].read(svc.addr, ready) })
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	for range n {
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(60 * time.Second):
			return nil, fmt.Errorf("events: not every stream opened within 60s")
		}
	}
	m1, err := settled(ctx, svc.addr, m0.goroutines+float64(n), 30*time.Second)
	if err != nil {
		return nil, err
	}
	// Idle: the streams' snapshots are all the service does.
	s0, err := nodes.stats(ctx)
	if err != nil {
		return nil, err
	}
	cpu0, t0 := svc.cpu(), time.Now()
	if err := sleepCtx(ctx, max(cfg.dur, 2*time.Second)); err != nil {
		return nil, err
	}
	idle, idleWall := svc.cpu()-cpu0, time.Since(t0)
	s1, err := nodes.stats(ctx)
	if err != nil {
		return nil, err
	}
	sent, err := sendProbes(ctx, svc.addr, prefix, probes, base)
	if err != nil {
		return nil, err
	}
	lat, missing := collectDeliveries(ctx, subs, sent)
	if len(lat) == 0 {
		return nil, fmt.Errorf("events: no probe event reached any of %d streams", n)
	}
	slices.Sort(lat)
	srv := s1.sub(s0)
	return metrics{
		"subscribers":           float64(n),
		"goroutines_per_sub":    (m1.goroutines - m0.goroutines) / float64(n),
		"heap_per_sub_b":        (m1.heap - m0.heap) / float64(n),
		"rss_per_sub_b":         (m1.rss - m0.rss) / float64(n),
		"idle_cpu_pct":          float64(idle) / float64(idleWall) * 100,
		"idle_srv_cmds_per_s":   float64(srv.calls) / idleWall.Seconds(),
		"delivery_p50_us":       pct(lat, 50),
		"delivery_p99_us":       pct(lat, 99),
		"delivery_max_us":       pct(lat, 100),
		"deliveries_missing":    float64(missing),
		"idle_cpu_us_per_sub_s": float64(idle) / float64(time.Microsecond) / idleWall.Seconds() / float64(n),
	}, nil
}

// subscriber reads one /v1/events stream and notes when each probe's
// acquire event arrives.
type subscriber struct {
	c      net.Conn
	prefix string
	base   time.Time
	mu     sync.Mutex
	got    []int64 // ns since base, by probe; 0 until it arrived
}

func (s *subscriber) read(addr string, ready chan<- struct{}) {
	signalled := false
	defer func() {
		if !signalled {
			ready <- struct{}{}
		}
	}()
	if _, err := s.c.Write([]byte("GET /v1/events HTTP/1.1\r\nHost: " + addr + "\r\nAccept: text/event-stream\r\n\r\n")); err != nil {
		return
	}
	br := bufio.NewReader(s.c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		return
	}
	chunked := false
	for { // headers
		h, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if h = strings.TrimSpace(h); h == "" {
			break
		}
		chunked = chunked || strings.EqualFold(h, "Transfer-Encoding: chunked")
	}
	body := br
	if chunked {
		body = bufio.NewReaderSize(httputil.NewChunkedReader(br), 64<<10)
	}
	var event string
	for {
		line, err := body.ReadBytes('\n')
		if err != nil {
			return
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			event = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			if event == "snapshot" && !signalled {
				signalled = true
				ready <- struct{}{}
			}
			if event == "acquire" {
				s.note(line[len("data: "):])
			}
		}
	}
}

func (s *subscriber) note(data []byte) {
	at := int64(time.Since(s.base))
	var ev struct{ Name string }
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	i, err := strconv.Atoi(strings.TrimPrefix(ev.Name, s.prefix))
	if err != nil || !strings.HasPrefix(ev.Name, s.prefix) || i < 0 || i >= len(s.got) {
		return
	}
	s.mu.Lock()
	if s.got[i] == 0 {
		s.got[i] = at
	}
	s.mu.Unlock()
}

// sendProbes acquires and releases count names, 20 ms apart, and returns
// when each acquire was sent (ns since base).
func sendProbes(ctx context.Context, addr, prefix string, count int, base time.Time) ([]int64, error) {
	c := &httpConn{addr: addr}
	defer c.close()
	sent := make([]int64, count)
	var g struct{ Token string }
	for i := range count {
		path := "/v1/locks/" + prefix + strconv.Itoa(i)
		sent[i] = int64(time.Since(base))
		body, err := c.post(path+"/acquire", []byte(`{"ttlMs":30000}`))
		if err == nil {
			err = json.Unmarshal(body, &g)
		}
		if err == nil {
			_, err = c.post(path+"/release", []byte(`{"token":"`+g.Token+`"}`))
		}
		if err != nil {
			return nil, fmt.Errorf("events: probe %d: %w", i, err)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return sent, nil
}

// collectDeliveries waits (up to 10 s) until every stream saw every probe
// and returns the delays from each probe's send to its arrival, and how
// many never arrived.
func collectDeliveries(ctx context.Context, subs []*subscriber, sent []int64) ([]time.Duration, int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var lat []time.Duration
		missing := 0
		for _, s := range subs {
			s.mu.Lock()
			for i, at := range s.got {
				if at == 0 {
					missing++
				} else {
					lat = append(lat, time.Duration(at-sent[i]))
				}
			}
			s.mu.Unlock()
		}
		if missing == 0 || time.Now().After(deadline) || sleepCtx(ctx, 50*time.Millisecond) != nil {
			return lat, missing
		}
	}
}
