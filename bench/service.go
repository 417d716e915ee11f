package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// httpService runs W5: acquire+release pairs through the /v1 API of a
// `dlock serve` process (cmd/dlock, built once, over a valkey store, on a
// loopback port), from clients goroutines each on its own keep-alive
// connection, on fresh names. The clients are lean HTTP/1.1 (httpConn),
// so that the cores the server shares with them go to the server.
func httpService(ctx context.Context, nodes cluster, clients int, warm, dur time.Duration) (metrics, error) {
	if err := nodes.flush(ctx); err != nil {
		return nil, err
	}
	svc, err := startService(ctx, "--redis-url", "redis://"+nodes[0].addr)
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	return httpLoad(ctx, nodes, svc.addr, svc.cpu, clients, warm, dur)
}

// httpFloor runs W5's load against net/http configured as `dlock serve`
// configures it, in this process, answering acquire and release with
// fixed bodies of the same shape and doing nothing else: the most any
// HTTP service in Go can do on these cores with these clients.
func httpFloor(ctx context.Context, nodes cluster, clients int, warm, dur time.Duration) (metrics, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	grant := []byte(`{"name":"x","token":"0123456789abcdef0123456789abcdef","fence":1,"ttlMs":30000,"mode":"mutex","count":1}` + "\n")
	released := []byte(`{"name":"x","released":true}` + "\n")
	srv := likeDlockServe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			writeJSON(w, grant)
		} else {
			writeJSON(w, released)
		}
	}))
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	return httpLoad(ctx, nodes, ln.Addr().String(), nil, clients, warm, dur)
}

// lockServiceEnv, when set (to a lockServiceArgs in JSON), makes the
// driver's binary run a least lock service instead of the benchmarks.
const lockServiceEnv = "DLOCK_BENCH_LOCK_SERVICE"

type lockServiceArgs struct {
	Contender string
	Addrs     []string
	Listen    string
}

func lockServiceMode() bool { return os.Getenv(lockServiceEnv) != "" }

// httpLockFloor runs W5's load against the least HTTP lock service over
// the contender named over (lockServiceMain), in a process of its own as `dlock
// serve` is: what any Go HTTP lock service over c pays on these cores.
func httpLockFloor(ctx context.Context, over string, nodes cluster, clients int, warm, dur time.Duration) (metrics, error) {
	if err := nodes.flush(ctx); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(lockServiceArgs{Contender: over, Addrs: nodes.addrs(), Listen: addr})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), lockServiceEnv+"="+string(js))
	svc, err := startProcess(ctx, addr, cmd)
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	return httpLoad(ctx, nodes, svc.addr, svc.cpu, clients, warm, dur)
}

// lockServiceMain serves the least HTTP lock service until SIGTERM: net/http
// configured as `dlock serve` configures it; acquire takes the path's name
// with the contender's Lock and keeps the unlock by a token, release
// unlocks by token; bodies of the shape `dlock serve` answers. No auth,
// metrics, limits or validation.
func lockServiceMain() int {
	var a lockServiceArgs
	if err := json.Unmarshal([]byte(os.Getenv(lockServiceEnv)), &a); err != nil {
		fmt.Fprintln(os.Stderr, "lock service: bad", lockServiceEnv+":", err)
		return 2
	}
	c, ok := contenderByName(a.Contender)
	if !ok {
		fmt.Fprintf(os.Stderr, "lock service: unknown contender %q\n", a.Contender)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	l, err := c.open(ctx, a.Addrs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lock service: open:", err)
		return 1
	}
	defer l.Close()
	ln, err := net.Listen("tcp", a.Listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lock service:", err)
		return 1
	}
	var (
		held   sync.Map // token -> unlockFunc
		tokens atomic.Uint64
	)
	srv := likeDlockServe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rest, _ := strings.CutPrefix(r.URL.Path, "/v1/locks/")
		name, op, _ := strings.Cut(rest, "/")
		out := append(make([]byte, 0, 128), `{"name":"`...)
		out = append(out, name...)
		switch op {
		case "acquire":
			unlock, err := l.Lock(r.Context(), name)
			if err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			n := tokens.Add(1)
			token := fmt.Sprintf("%032x", n)
			held.Store(token, unlock)
			out = append(out, `","token":"`...)
			out = append(out, token...)
			out = append(out, `","fence":`...)
			out = strconv.AppendUint(out, n, 10)
			out = append(out, `,"ttlMs":30000,"mode":"mutex","count":1}`+"\n"...)
		case "release":
			var b struct{ Token string }
			if err := json.Unmarshal(body, &b); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			unlock, ok := held.LoadAndDelete(b.Token)
			if !ok {
				http.Error(w, "lease lost", http.StatusGone)
				return
			}
			if err := unlock.(unlockFunc)(r.Context()); err != nil {
				http.Error(w, err.Error(), http.StatusGone)
				return
			}
			out = append(out, `","released":true}`+"\n"...)
		default:
			http.Error(w, "no such route", http.StatusNotFound)
			return
		}
		writeJSON(w, out)
	}))
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "lock service:", err)
		return 1
	}
	return 0
}

// likeDlockServe returns a server of h with the timeouts `dlock serve` sets.
func likeDlockServe(h http.Handler) *http.Server {
	return &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		Handler:           h,
	}
}

// writeJSON answers 200 with body and the headers `dlock serve` sends.
func writeJSON(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// httpLoad runs W5's clients against the HTTP server at addr; svcCPU,
// when not nil, is the CPU time the server's process used so far.
func httpLoad(ctx context.Context, nodes cluster, addr string, svcCPU func() time.Duration, clients int, warm, dur time.Duration) (metrics, error) {
	prefix := "/v1/locks/h" + strconv.FormatInt(cellSeq.Add(1), 10) + "-"
	acquireBody := []byte(`{"ttlMs":` + strconv.FormatInt(lockTTL.Milliseconds(), 10) + `}`)
	w := &window{nodes: nodes, counted: true}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		all   []time.Duration
		seq   atomic.Int64
		errs  atomic.Int64
		first atomic.Value
	)
	for range clients {
		wg.Go(func() {
			c := &httpConn{addr: addr}
			defer c.close()
			var lat []time.Duration
			var g struct{ Token string }
			var body []byte
			for !w.stopped.Load() {
				path := prefix + strconv.FormatInt(seq.Add(1), 10)
				t0 := time.Now()
				resp, err := c.post(path+"/acquire", acquireBody)
				if err == nil {
					g.Token = ""
					if err = json.Unmarshal(resp, &g); err == nil {
						body = append(append(append(body[:0], `{"token":"`...), g.Token...), `"}`...)
						_, err = c.post(path+"/release", body)
					}
				}
				d := time.Since(t0)
				if err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, err.Error())
					c.close()
					continue
				}
				if w.done() {
					lat = append(lat, d)
				}
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	var cpu0, cpu1 time.Duration
	if svcCPU != nil {
		cpu0 = svcCPU()
	}
	werr := w.run(ctx, warm, dur)
	if svcCPU != nil {
		cpu1 = svcCPU()
	}
	wg.Wait()
	if werr != nil {
		return nil, werr
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("w5: no operation completed (%d errors, first: %v)", errs.Load(), first.Load())
	}
	slices.Sort(all)
	n := float64(len(all))
	m := metrics{
		"ops_per_s":        n / w.wall.Seconds(),
		"p50_us":           pct(all, 50),
		"p99_us":           pct(all, 99),
		"srv_cmds_per_op":  float64(w.srv.calls) / n,
		"client_cpu_us_op": float64(w.client) / float64(time.Microsecond) / n,
		"errors":           float64(errs.Load()),
	}
	if svcCPU != nil {
		m["svc_cpu_us_op"] = float64(cpu1-cpu0) / float64(time.Microsecond) / n
	}
	return m, nil
}

// httpConn is one keep-alive HTTP/1.1 connection of W5's load: a request
// is one write, a response is read through a bufio.Reader. Only what the
// server sends is understood (a status line, headers, a Content-Length
// body); anything else is an error, and the connection is dialled again.
type httpConn struct {
	addr    string
	timeout time.Duration // per request; 0 is 10 s
	c       net.Conn
	br      *bufio.Reader
	req     []byte
	body    []byte
}

func (h *httpConn) close() {
	if h.c != nil {
		h.c.Close()
		h.c = nil
	}
}

// post sends a POST of a JSON body to path and returns the body of its
// 200 response, valid until the next call; any other status is an error.
func (h *httpConn) post(path string, body []byte) ([]byte, error) {
	if h.c == nil {
		c, err := net.DialTimeout("tcp", h.addr, 10*time.Second)
		if err != nil {
			return nil, err
		}
		h.c = c
		h.br = bufio.NewReaderSize(c, 4096)
	}
	timeout := h.timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	h.c.SetDeadline(time.Now().Add(timeout))
	r := append(h.req[:0], "POST "...) //nolint:gocritic // appendAssign: reuses h.req's array; stored back in h.req below
	r = append(r, path...)
	r = append(r, " HTTP/1.1\r\nHost: "...)
	r = append(r, h.addr...)
	r = append(r, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	r = strconv.AppendInt(r, int64(len(body)), 10)
	r = append(r, "\r\n\r\n"...)
	r = append(r, body...)
	h.req = r
	if _, err := h.c.Write(r); err != nil {
		return nil, err
	}
	line, err := h.br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	status, ok := 0, false
	if f := bytes.Fields(line); len(f) >= 2 && bytes.HasPrefix(f[0], []byte("HTTP/1.")) {
		status, err = strconv.Atoi(string(f[1]))
		ok = err == nil
	}
	if !ok {
		return nil, fmt.Errorf("%s: bad status line %q", path, line)
	}
	length := -1
	for {
		line, err := h.br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, _ := bytes.Cut(line, []byte(":"))
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				return nil, fmt.Errorf("%s: bad Content-Length %q", path, v)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")), bytes.EqualFold(k, []byte("Connection")) && bytes.EqualFold(bytes.TrimSpace(v), []byte("close")):
			return nil, fmt.Errorf("%s: unexpected %s", path, line)
		}
	}
	if length < 0 {
		return nil, fmt.Errorf("%s: response without Content-Length", path)
	}
	if cap(h.body) < length {
		h.body = make([]byte, length)
	}
	h.body = h.body[:length]
	if _, err := io.ReadFull(h.br, h.body); err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d: %s", path, status, h.body)
	}
	return h.body, nil
}

// countingStore passes everything to a valkey store and counts Extend
// calls (one pipelined round trip each) and the leases they renew.
type countingStore struct {
	store.Store
	calls, reqs atomic.Int64
	maxBatch    atomic.Int64
	failed      atomic.Int64 // renewals that returned an error other than ErrNotHeld
	maxCall     atomic.Int64 // longest Extend call, ns
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		m := a.Load()
		if v <= m || a.CompareAndSwap(m, v) {
			return
		}
	}
}

func (c *countingStore) Extend(ctx context.Context, reqs []dlock.Request) []error {
	c.calls.Add(1)
	c.reqs.Add(int64(len(reqs)))
	storeMax(&c.maxBatch, int64(len(reqs)))
	t0 := time.Now()
	errs := c.Store.Extend(ctx, reqs)
	storeMax(&c.maxCall, int64(time.Since(t0)))
	for _, err := range errs {
		if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			c.failed.Add(1)
		}
	}
	return errs
}

// steadyHeap returns heapAlloc once two readings 200 ms apart differ by
// less than 1 MiB (what earlier cells closed may still be freeing), or
// after 5 s.
func steadyHeap(ctx context.Context) uint64 {
	h := heapAlloc()
	for range 25 {
		if sleepCtx(ctx, 200*time.Millisecond) != nil {
			return h
		}
		next := heapAlloc()
		if d := int64(next) - int64(h); d > -1<<20 && d < 1<<20 {
			return next
		}
		h = next
	}
	return h
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// manyLeases runs W6: n leases with auto-renewal held by one Locker for
// window, TTL ttl (renewed every ttl/3). It reports the heap per lease,
// the process CPU over the window as a share of one core, and how the
// renewals went out: Extend calls (each one pipelined round trip), leases
// per call, and server commands per renewal.
func manyLeases(ctx context.Context, nodes cluster, n int, ttl, window time.Duration) (metrics, error) {
	return manyLeasesFor(ctx, nodes, n, ttl, ttl/3, window, 64)
}

// manyLeasesFor is manyLeases with settle, the time between the last
// acquisition and the measured window, and conc goroutines acquiring and
// releasing.
func manyLeasesFor(ctx context.Context, nodes cluster, n int, ttl, settle, window time.Duration, conc int) (metrics, error) {
	if err := nodes.flush(ctx); err != nil {
		return nil, err
	}
	vs, err := valkey.Dial(ctx, "redis://"+nodes[0].addr)
	if err != nil {
		return nil, err
	}
	defer vs.Close()
	cs := &countingStore{Store: vs}
	l, err := dlock.New(cs, dlock.WithTTL(ttl), dlock.WithAutoRenew())
	if err != nil {
		return nil, err
	}
	defer l.Close()
	prefix := "r" + strconv.FormatInt(cellSeq.Add(1), 10) + "-"
	leases := make([]*dlock.Lease, n)
	h0 := steadyHeap(ctx)
	t0 := time.Now()
	// An acquire that fails (its op timeout on a loaded machine) is
	// counted, and the cell goes on with the leases it has; more than one
	// in a thousand fails the cell.
	var acqFailed atomic.Int64
	var firstAcqErr atomic.Value
	err = parallelDoN(conc, n, func(i int) error {
		ls, err := l.Mutex(prefix + strconv.Itoa(i)).TryLock(ctx)
		if err != nil && ctx.Err() == nil {
			acqFailed.Add(1)
			firstAcqErr.CompareAndSwap(nil, err)
			return nil
		}
		leases[i] = ls
		return err
	})
	acquireTime := time.Since(t0)
	if err == nil && acqFailed.Load() > int64(n/1000) {
		err = firstAcqErr.Load().(error)
	}
	if err != nil {
		return nil, fmt.Errorf("w6: acquire (%d failed): %w", acqFailed.Load(), err)
	}
	leases = slices.DeleteFunc(leases, func(ls *dlock.Lease) bool { return ls == nil })
	h1 := heapAlloc()
	// Let the acquisitions' renewal schedule settle into its rounds, then
	// measure over the window.
	if err := sleepCtx(ctx, settle); err != nil {
		return nil, err
	}
	s0, err := nodes.stats(ctx)
	if err != nil {
		return nil, err
	}
	c0, r0, b0, w0 := processCPU(), cs.reqs.Load(), cs.calls.Load(), time.Now()
	if err := sleepCtx(ctx, window); err != nil {
		return nil, err
	}
	cpu, renewed, batches, wall := processCPU()-c0, cs.reqs.Load()-r0, cs.calls.Load()-b0, time.Since(w0)
	s1, err := nodes.stats(ctx)
	if err != nil {
		return nil, err
	}
	srv := s1.sub(s0)
	lost := 0
	for _, ls := range leases {
		select {
		case <-ls.Done():
			lost++
		default:
		}
	}
	// Release in parallel (Locker.Close would release one by one). A
	// lease the Locker still held but the store no longer did is counted:
	// it should never happen.
	rctx := context.WithoutCancel(ctx)
	var notHeld, relFailed atomic.Int64
	var firstRelErr atomic.Value
	relErr := parallelDoN(conc, len(leases), func(i int) error {
		err := leases[i].Release(rctx)
		switch {
		case err == nil, errors.Is(err, dlock.ErrLeaseLost):
			return nil
		case errors.Is(err, dlock.ErrNotHeld):
			notHeld.Add(1)
			return nil
		}
		// A release that fails (its op timeout) is counted as an acquire
		// is; the key expires with its TTL.
		relFailed.Add(1)
		firstRelErr.CompareAndSwap(nil, err)
		return nil
	})
	if relErr == nil && relFailed.Load() > int64(n/1000) {
		relErr = firstRelErr.Load().(error)
	}
	if relErr != nil {
		return nil, fmt.Errorf("w6: release (%d failed): %w", relFailed.Load(), relErr)
	}
	held := len(leases)
	rounds := float64(renewed) / float64(held)
	return metrics{
		"leases":              float64(held),
		"ttl_ms":              float64(ttl.Milliseconds()),
		"window_s":            wall.Seconds(),
		"acquire_s":           acquireTime.Seconds(),
		"heap_per_lease_b":    float64(int64(h1)-int64(h0)) / float64(held),
		"acquire_failed":      float64(acqFailed.Load()),
		"release_failed":      float64(relFailed.Load()),
		"cpu_pct_one_core":    float64(cpu) / float64(wall) * 100,
		"renewals_per_s":      float64(renewed) / wall.Seconds(),
		"renewal_rounds":      rounds,
		"extend_calls":        float64(batches),
		"leases_per_extend":   float64(renewed) / float64(max(batches, 1)),
		"max_batch":           float64(cs.maxBatch.Load()),
		"srv_cmds_per_renew":  float64(srv.calls) / float64(max(renewed, 1)),
		"srv_cpu_pct":         srv.cpu / wall.Seconds() * 100,
		"cpu_us_per_renewal":  float64(cpu) / float64(time.Microsecond) / float64(max(renewed, 1)),
		"lost":                float64(lost),
		"not_held_at_release": float64(notHeld.Load()),
		"renewals_failed":     float64(cs.failed.Load()),
		"longest_extend_ms":   float64(cs.maxCall.Load()) / 1e6,
	}, nil
}
