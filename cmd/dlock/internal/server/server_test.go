package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		pgtest.Cleanup() // replicas_test.go
		os.Exit(code)
	}))
}

// stores are the stores every handler test runs against.
var stores = []struct {
	name string
	new  func(t *testing.T) store.Store
}{
	{"memory", func(t *testing.T) store.Store { return memory.New() }},
	{"valkey", func(t *testing.T) store.Store {
		srv := testredis.Start(t)
		s, err := valkey.Dial(t.Context(), srv.URL())
		if err != nil {
			t.Fatalf("valkey.Dial(%q) = %v", srv.URL(), err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

func forEachStore(t *testing.T, fn func(t *testing.T, st store.Store)) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { fn(t, st.new(t)) })
	}
}

// env is a running server on a store, with an event tap.
type env struct {
	t       *testing.T
	store   store.Store
	locker  *dlock.Locker
	metrics *dlockprom.Metrics
	srv     *Server
	ts      *httptest.Server
	events  chan dlock.Event
}

func newEnv(t *testing.T, st store.Store, cfg Config) *env {
	t.Helper()
	m := dlockprom.New()
	l, err := dlock.New(st, dlock.WithObserver(m.Observe))
	if err != nil {
		t.Fatalf("dlock.New = %v", err)
	}
	cfg.Metrics = m
	if cfg.StoreName == "" {
		cfg.StoreName = "test"
	}
	srv, err := New(l, cfg)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	e := &env{t: t, store: st, locker: l, metrics: m, srv: srv, events: make(chan dlock.Event, 4096)}
	unsub := m.Subscribe(func(ev dlock.Event) {
		select {
		case e.events <- ev:
		default:
		}
	})
	e.ts = httptest.NewServer(checkContract(t, srv, srv.Handler()))
	t.Cleanup(func() {
		e.ts.Close()
		srv.Close()
		unsub()
		l.Close()
	})
	return e
}

// response is a finished request.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

func (e *env) do(ctx context.Context, method, path, body string, hdr ...string) response {
	e.t.Helper()
	r, err := e.try(ctx, method, path, body, hdr...)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// try is do for goroutines other than the test's: it returns errors.
func (e *env) try(ctx context.Context, method, path, body string, hdr ...string) (response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.ts.URL+path, rd)
	if err != nil {
		return response{}, fmt.Errorf("NewRequest(%s %s) = %v", method, path, err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: reading body: %v", method, path, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: b}, nil
}

func (e *env) post(path, body string, hdr ...string) response {
	e.t.Helper()
	return e.do(e.t.Context(), http.MethodPost, path, body, hdr...)
}

func (e *env) get(path string, hdr ...string) response {
	e.t.Helper()
	return e.do(e.t.Context(), http.MethodGet, path, "", hdr...)
}

// waitEvent returns the next event of kind on name.
// waitEvent waits for an event of kind (or one of more) on name.
func (e *env) waitEvent(kind dlock.EventKind, name string, more ...dlock.EventKind) dlock.Event {
	e.t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case ev := <-e.events:
			if (ev.Kind == kind || slices.Contains(more, ev.Kind)) && ev.Name == name {
				return ev
			}
		case <-timeout.C:
			e.t.Fatalf("no event %v on %q within 30s", kind, name)
		}
	}
}

func wantCode(t *testing.T, what string, r response, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: status %d, want %d (body %s)", what, r.code, code, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s: Content-Type %q, want application/json", what, ct)
	}
}

// TestSeedWalkthrough is the curl session of seed 000 "Running Examples":
// a held resource answers 409 with Retry-After and retryAfterMs, another
// resource succeeds at once; for the simple and the redlock pattern.
func TestSeedWalkthrough(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		for _, pattern := range []string{"simple", "redlock"} {
			t.Run(pattern, func(t *testing.T) {
				e := newEnv(t, st, Config{})
				res1 := pattern + "-resource1"
				// Terminal 1: acquire and hold for the default 15 s.
				ctx, cancel := context.WithCancel(t.Context())
				first := make(chan response, 1)
				go func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.ts.URL+"/api/locks/"+pattern+"/"+res1, nil)
					resp, err := e.ts.Client().Do(req)
					if err != nil {
						first <- response{}
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					first <- response{code: resp.StatusCode, body: b}
				}()
				acq := e.waitEvent(dlock.EventAcquire, res1)
				if acq.Result != "acquired" {
					t.Fatalf("first acquire result %q, want acquired", acq.Result)
				}

				// Terminal 2: immediate conflict.
				r := e.post("/api/locks/"+pattern+"/"+res1, "")
				wantCode(t, "second request", r, http.StatusConflict)
				body := r.json(t)
				if body["error"] != "Resource locked" {
					t.Errorf("409 error = %v, want %q", body["error"], "Resource locked")
				}
				ms, _ := body["retryAfterMs"].(float64)
				if ms <= 0 || ms > 20000 {
					t.Errorf("retryAfterMs = %v, want in (0, 20000]", body["retryAfterMs"])
				}
				ra, err := strconv.Atoi(r.header.Get("Retry-After"))
				if err != nil || int64(ra) != retryAfterSeconds(int64(ms)) {
					t.Errorf("Retry-After = %q, want %d (retryAfterMs %v rounded up)", r.header.Get("Retry-After"), retryAfterSeconds(int64(ms)), ms)
				}

				// A different resource succeeds immediately.
				r = e.post("/api/locks/"+pattern+"/"+pattern+"-resource2?durationMs=0", "")
				wantCode(t, "other resource", r, http.StatusOK)
				body = r.json(t)
				if body["success"] != true || body["resourceId"] != pattern+"-resource2" || body["durationMs"] != 0.0 {
					t.Errorf("200 body = %s", r.body)
				}
				if f, _ := body["fence"].(float64); f <= 0 {
					t.Errorf("fence = %v, want > 0", body["fence"])
				}

				// Terminal 1 gives up: the lock is released at once (the
				// release event comes just before the store's release, so
				// the check waits for the lock, as the retry pattern does).
				cancel()
				<-first
				e.waitEvent(dlock.EventRelease, res1)
				r = e.post("/api/locks/retry/"+res1+"?durationMs=0&waitMs=10000", "")
				wantCode(t, "after release", r, http.StatusOK)
				if w, _ := r.json(t)["waitedMs"].(float64); w > 5000 {
					t.Errorf("the lock was freed after %vms, want at once", w)
				}
			})
		}
	})
}

// TestDemoCompletes runs a short operation to its end for every pattern.
func TestDemoCompletes(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		for _, p := range demoPatterns {
			r := e.post("/api/locks/"+p+"/done-"+p+"?durationMs=10", "")
			wantCode(t, p, r, http.StatusOK)
			body := r.json(t)
			if body["success"] != true || body["resourceId"] != "done-"+p || body["durationMs"] != 10.0 {
				t.Errorf("%s: body %s", p, r.body)
			}
			st := e.get("/v1/locks/done-" + p).json(t)
			if st["holders"] != 0.0 {
				t.Errorf("%s: after the operation the lock has %v holders, want 0", p, st["holders"])
			}
		}
	})
}

// TestDemoShared: read locks and semaphore permits are shared, a write
// lock is refused while readers hold.
func TestDemoShared(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan struct{}, 4)
		hold := func(path, name string) {
			go func() {
				e.try(ctx, http.MethodPost, path, "")
				done <- struct{}{}
			}()
			e.waitEvent(dlock.EventAcquire, name)
		}
		hold("/api/locks/read/doc", "doc")
		hold("/api/locks/read/doc", "doc")
		wantCode(t, "write while read", e.post("/api/locks/write/doc?durationMs=0", ""), http.StatusConflict)
		hold("/api/locks/semaphore/pool?limit=2", "pool")
		hold("/api/locks/semaphore/pool?limit=2", "pool")
		wantCode(t, "third permit", e.post("/api/locks/semaphore/pool?limit=2&durationMs=0", ""), http.StatusConflict)
		cancel()
		for range 4 {
			<-done
		}
	})
}

// TestV1TokenShapes: extend and release with a token that does not hold the
// lease answer 410 whatever the token's shape (docs/http.md), and leave the
// holder's lease untouched.
func TestV1TokenShapes(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		r := e.post("/v1/locks/shapes/acquire", `{"ttlMs":5000}`)
		wantCode(t, "acquire", r, http.StatusOK)
		token := r.json(t)["token"].(string)
		for _, wrong := range []string{"", "not-the-token", "abc", "ключ", strings.Repeat("g", 32), strings.Repeat("ab", 64),
			strings.Repeat("x", MaxTokenBytes), token[:31], token + "0", `\u0000`, "a b"} {
			for _, op := range []string{"extend", "release"} {
				body := `{"token":"` + wrong + `"}`
				wantCode(t, op+" with token "+body, e.post("/v1/locks/shapes/"+op, body), http.StatusGone)
			}
		}
		if h := e.get("/v1/locks/shapes").json(t)["holders"]; h != 1.0 {
			t.Fatalf("after wrong-token calls holders = %v, want 1", h)
		}
		wantCode(t, "holder's release", e.post("/v1/locks/shapes/release", `{"token":"`+token+`"}`), http.StatusOK)
	})
}

// TestV1OneNameOneLock: whatever pattern holds a name, a request of
// another pattern is refused with 409 naming the held mode; a semaphore
// limit mismatch is a 400 naming limit.
func TestV1OneNameOneLock(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		conflict := func(what, path, body, held string) {
			t.Helper()
			r := e.post(path, body)
			wantCode(t, what, r, http.StatusConflict)
			if got := r.json(t)["heldMode"]; got != held {
				t.Errorf("%s: heldMode = %v, want %q (%s)", what, got, held, r.body)
			}
			if r.header.Get("Retry-After") == "" {
				t.Errorf("%s: no Retry-After", what)
			}
		}
		wantCode(t, "first shared", e.post("/v1/locks/mixed/acquire", `{"mode":"shared"}`), http.StatusOK)
		wantCode(t, "second shared", e.post("/v1/locks/mixed/acquire", `{"mode":"shared"}`), http.StatusOK)
		conflict("exclusive over readers", "/v1/locks/mixed/acquire", `{"mode":"exclusive"}`, "read")
		conflict("fair over readers", "/v1/locks/mixed/acquire", `{"fair":true}`, "read")
		conflict("semaphore over readers", "/v1/locks/mixed/acquire", `{"mode":"shared","limit":3}`, "read")

		wantCode(t, "plain exclusive", e.post("/v1/locks/plain/acquire", `{}`), http.StatusOK)
		conflict("fair over a mutex", "/v1/locks/plain/acquire", `{"fair":true}`, "mutex")
		conflict("shared over a mutex", "/v1/locks/plain/acquire", `{"mode":"shared"}`, "mutex")

		wantCode(t, "fair", e.post("/v1/locks/fairly/acquire", `{"fair":true}`), http.StatusOK)
		conflict("exclusive over a fair hold", "/v1/locks/fairly/acquire", `{}`, "fair")

		wantCode(t, "permit", e.post("/v1/locks/permits/acquire", `{"mode":"shared","limit":2}`), http.StatusOK)
		conflict("exclusive over permits", "/v1/locks/permits/acquire", `{}`, "semaphore")
		r := e.post("/v1/locks/permits/acquire", `{"mode":"shared","limit":5}`)
		wantCode(t, "limit mismatch", r, http.StatusBadRequest)
		if b := r.json(t); b["field"] != "limit" || !strings.Contains(b["message"].(string), "5") || !strings.Contains(b["message"].(string), "2") {
			t.Errorf("limit mismatch body = %s, want field limit and a message naming both limits", r.body)
		}
	})
}

// TestV1Lifecycle: acquire, state, conflict, extend, wrong-token release,
// release, and the 410s after it.
func TestV1Lifecycle(t *testing.T) {
	forEachStore(t, func(t *testing.T, backend store.Store) {
		e := newEnv(t, backend, Config{})
		r := e.post("/v1/locks/orders/acquire", `{"ttlMs":5000}`)
		wantCode(t, "acquire", r, http.StatusOK)
		g := r.json(t)
		token, _ := g["token"].(string)
		fence, _ := g["fence"].(float64)
		if len(token) < 32 || fence <= 0 || g["ttlMs"] != 5000.0 || g["name"] != "orders" || g["mode"] != "mutex" {
			t.Fatalf("grant = %s", r.body)
		}

		r = e.get("/v1/locks/orders")
		wantCode(t, "state", r, http.StatusOK)
		if strings.Contains(string(r.body), token) {
			t.Fatalf("state reveals the token: %s", r.body)
		}
		st := r.json(t)
		if st["holders"] != 1.0 || st["fence"] != fence || st["held"] != true {
			t.Errorf("state = %s", r.body)
		}
		if ttl, _ := st["ttlMs"].(float64); ttl <= 0 || ttl > 5000 {
			t.Errorf("state ttlMs = %v, want in (0, 5000]", st["ttlMs"])
		}

		r = e.post("/v1/locks/orders/acquire", `{"ttlMs":5000}`)
		wantCode(t, "second acquire", r, http.StatusConflict)
		if r.header.Get("Retry-After") == "" || r.json(t)["retryAfterMs"] == nil {
			t.Errorf("409 without Retry-After or retryAfterMs: %v %s", r.header, r.body)
		}

		r = e.post("/v1/locks/orders/extend", `{"token":"`+token+`","ttlMs":20000}`)
		wantCode(t, "extend", r, http.StatusOK)
		if ttl, _ := r.json(t)["ttlMs"].(float64); ttl <= 5000 {
			t.Errorf("extend ttlMs = %v, want > 5000", ttl)
		}

		wrong := strings.Repeat("ab", 16)
		wantCode(t, "release with a wrong token", e.post("/v1/locks/orders/release", `{"token":"`+wrong+`"}`), http.StatusGone)
		wantCode(t, "extend with a wrong token", e.post("/v1/locks/orders/extend", `{"token":"`+wrong+`"}`), http.StatusGone)
		if h := e.get("/v1/locks/orders").json(t)["holders"]; h != 1.0 {
			t.Fatalf("after wrong-token calls holders = %v, want 1", h)
		}
		wantCode(t, "holder's extend after wrong-token calls", e.post("/v1/locks/orders/extend", `{"token":"`+token+`"}`), http.StatusOK)

		r = e.get("/v1/locks")
		wantCode(t, "list", r, http.StatusOK)
		if !strings.Contains(string(r.body), `"name":"orders"`) || strings.Contains(string(r.body), token) {
			t.Errorf("list = %s", r.body)
		}

		wantCode(t, "release", e.post("/v1/locks/orders/release", `{"token":"`+token+`"}`), http.StatusOK)
		r = e.post("/v1/locks/orders/release", `{"token":"`+token+`"}`)
		wantCode(t, "second release", r, http.StatusGone)
		if r.json(t)["error"] != "lease lost" {
			t.Errorf("410 body = %s, want error \"lease lost\"", r.body)
		}
		wantCode(t, "extend after release", e.post("/v1/locks/orders/extend", `{"token":"`+token+`"}`), http.StatusGone)
		wantCode(t, "acquire after release", e.post("/v1/locks/orders/acquire", `{"ttlMs":1000}`), http.StatusOK)
	})
}

// TestV1ClientToken: a retried acquire with the client's token is
// idempotent and returns the same fence; another token is refused.
func TestV1ClientToken(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		token := strings.Repeat("0123456789abcdef", 2)
		body := `{"ttlMs":3000,"token":"` + token + `"}`
		r1 := e.post("/v1/locks/idem/acquire", body)
		wantCode(t, "acquire", r1, http.StatusOK)
		r2 := e.post("/v1/locks/idem/acquire", body)
		wantCode(t, "retried acquire", r2, http.StatusOK)
		g1, g2 := r1.json(t), r2.json(t)
		if g1["fence"] != g2["fence"] || g2["token"] != token {
			t.Errorf("retried acquire = %s, first = %s: want the same token and fence", r2.body, r1.body)
		}
		other := strings.Repeat("f", 64)
		wantCode(t, "other token", e.post("/v1/locks/idem/acquire", `{"token":"`+other+`"}`), http.StatusConflict)
		wantCode(t, "release", e.post("/v1/locks/idem/release", `{"token":"`+token+`"}`), http.StatusOK)
	})
}

// TestV1UnknownToken: a lease granted by one server instance can be
// extended and released through another on the same store.
func TestV1UnknownToken(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		a := newEnv(t, st, Config{})
		b := newEnv(t, st, Config{})
		r := a.post("/v1/locks/moved/acquire", `{"ttlMs":5000}`)
		wantCode(t, "acquire on a", r, http.StatusOK)
		token := r.json(t)["token"].(string)
		wantCode(t, "extend on b", b.post("/v1/locks/moved/extend", `{"token":"`+token+`","ttlMs":8000}`), http.StatusOK)
		wantCode(t, "release on b", b.post("/v1/locks/moved/release", `{"token":"`+token+`"}`), http.StatusOK)
		wantCode(t, "release on b again", b.post("/v1/locks/moved/release", `{"token":"`+token+`"}`), http.StatusGone)
		wantCode(t, "acquire on b", b.post("/v1/locks/moved/acquire", `{}`), http.StatusOK)
	})
}

// TestV1LeasesBelongToClients: the server never releases a /v1 lease on
// its own — not when it counts it lost at the end of the validity it
// measured (the client extended it through another instance), nor when it
// shuts down.
func TestV1LeasesBelongToClients(t *testing.T) {
	forEachStore(t, func(t *testing.T, backend store.Store) {
		a := newEnv(t, backend, Config{})
		b := newEnv(t, backend, Config{})
		r := a.post("/v1/locks/roaming/acquire", `{"ttlMs":300}`)
		wantCode(t, "acquire on a", r, http.StatusOK)
		token := r.json(t)["token"].(string)
		wantCode(t, "extend on b", b.post("/v1/locks/roaming/extend", `{"token":"`+token+`","ttlMs":60000}`), http.StatusOK)
		// a stops tracking the lease: its own count of it ran out (lost),
		// or b told it through the store that the client extended it there
		// (released quietly).
		a.waitEvent(dlock.EventLeaseLost, "roaming", dlock.EventRelease)
		a.srv.Close() // waits for a's Locker, and any release it made
		if st := b.get("/v1/locks/roaming").json(t); st["holders"] != 1.0 {
			t.Fatalf("after a counted the lease lost, the store has %v holders, want 1 (the client extended it on b)", st["holders"])
		}
		wantCode(t, "release on b", b.post("/v1/locks/roaming/release", `{"token":"`+token+`"}`), http.StatusOK)

		r = b.post("/v1/locks/kept/acquire", `{"ttlMs":60000}`)
		wantCode(t, "acquire on b", r, http.StatusOK)
		b.srv.Close()
		st, err := backend.(store.Inspector).State(t.Context(), "kept")
		if err != nil || st.Holders != 1 {
			t.Fatalf("after b closed, State(kept) = %+v, %v; want the client's lease kept", st, err)
		}
		if err := backend.Release(t.Context(), dlock.Request{Name: "kept", Token: r.json(t)["token"].(string)}); err != nil {
			t.Errorf("releasing the kept lease by its token: %v", err)
		}
	})
}

// TestV1Wait: an acquire with waitMs gets the lock when the holder
// releases it.
func TestV1Wait(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		token := e.post("/v1/locks/w/acquire", `{"ttlMs":60000}`).json(t)["token"].(string)
		got := make(chan response, 1)
		go func() {
			r, err := e.try(t.Context(), http.MethodPost, "/v1/locks/w/acquire", `{"ttlMs":1000,"waitMs":60000}`)
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		e.waitEvent(dlock.EventAcquire, "w") // the first
		wantCode(t, "release", e.post("/v1/locks/w/release", `{"token":"`+token+`"}`), http.StatusOK)
		wantCode(t, "waiting acquire", <-got, http.StatusOK)

		// A wait that runs out is a 409.
		r := e.post("/v1/locks/w/acquire", `{"ttlMs":1000,"waitMs":1}`)
		wantCode(t, "wait that times out", r, http.StatusConflict)
	})
}

// TestV1Modes: shared locks, semaphores, fair and reentrant locks through
// the /v1 API.
func TestV1Modes(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		wantCode(t, "read 1", e.post("/v1/locks/rw/acquire", `{"mode":"shared"}`), http.StatusOK)
		wantCode(t, "read 2", e.post("/v1/locks/rw/acquire", `{"mode":"read"}`), http.StatusOK)
		wantCode(t, "write", e.post("/v1/locks/rw/acquire", `{"mode":"write"}`), http.StatusConflict)
		if st := e.get("/v1/locks/rw").json(t); st["holders"] != 2.0 || st["mode"] != "read" {
			t.Errorf("rw state = %v", st)
		}
		wantCode(t, "permit 1", e.post("/v1/locks/sem/acquire", `{"mode":"shared","limit":2}`), http.StatusOK)
		wantCode(t, "permit 2", e.post("/v1/locks/sem/acquire", `{"mode":"semaphore","limit":2}`), http.StatusOK)
		wantCode(t, "permit 3", e.post("/v1/locks/sem/acquire", `{"mode":"semaphore","limit":2}`), http.StatusConflict)
		r := e.post("/v1/locks/re/acquire", `{"owner":"worker-1"}`)
		wantCode(t, "reentrant", r, http.StatusOK)
		if r.json(t)["mode"] != "reentrant" {
			t.Errorf("reentrant grant = %s", r.body)
		}
		r = e.post("/v1/locks/re/acquire", `{"owner":"worker-1"}`)
		wantCode(t, "re-entry", r, http.StatusOK)
		if c := r.json(t)["count"]; c != 2.0 {
			t.Errorf("re-entry count = %v, want 2", c)
		}
		wantCode(t, "other owner", e.post("/v1/locks/re/acquire", `{"owner":"worker-2"}`), http.StatusConflict)
		wantCode(t, "fair", e.post("/v1/locks/fq/acquire", `{"fair":true}`), http.StatusOK)
		wantCode(t, "fair 2", e.post("/v1/locks/fq/acquire", `{"mode":"fair"}`), http.StatusConflict)
	})
}

// TestHealth: ok on a live store, 503 with the reason on a dead one.
func TestHealth(t *testing.T) {
	e := newEnv(t, memory.New(), Config{StoreName: "memory", Version: "v1.2.3"})
	r := e.get("/health")
	wantCode(t, "health", r, http.StatusOK)
	h := r.json(t)
	if h["status"] != "ok" || h["service"] != "distributed-lock" || h["store"] != "memory" || h["version"] != "v1.2.3" {
		t.Errorf("health = %s", r.body)
	}

	srv := testredis.Start(t)
	s, err := valkey.Dial(t.Context(), srv.URL())
	if err != nil {
		t.Fatalf("valkey.Dial = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	v := newEnv(t, s, Config{StoreName: "valkey"})
	wantCode(t, "valkey health", v.get("/health"), http.StatusOK)
	srv.Kill()
	r = v.get("/health")
	wantCode(t, "health of a dead store", r, http.StatusServiceUnavailable)
	if h := r.json(t); h["status"] != "unavailable" || h["error"] == nil || h["message"] == nil {
		t.Errorf("unhealthy body = %s", r.body)
	}
	r = v.post("/v1/locks/x/acquire", `{}`)
	wantCode(t, "acquire on a dead store", r, http.StatusServiceUnavailable)
	r = v.post("/api/locks/simple/x?durationMs=0", ``)
	wantCode(t, "demo on a dead store", r, http.StatusServiceUnavailable)
}

// TestRedlockNoQuorum: with a majority of Redlock nodes down, the seed's
// redlock endpoint answers its 503 "Quorum not reached", and /v1 a 503 "no
// quorum".
func TestRedlockNoQuorum(t *testing.T) {
	var nodes []*testredis.Server
	var stores []store.Store
	for range 3 {
		srv := testredis.Start(t)
		s, err := valkey.Dial(t.Context(), srv.URL())
		if err != nil {
			t.Fatalf("valkey.Dial(%q) = %v", srv.URL(), err)
		}
		t.Cleanup(func() { s.Close() })
		nodes = append(nodes, srv)
		stores = append(stores, s)
	}
	rl, err := redlock.New(stores)
	if err != nil {
		t.Fatalf("redlock.New = %v", err)
	}
	t.Cleanup(func() { rl.Close() })
	e := newEnv(t, rl, Config{StoreName: "redlock(3)"})
	// (Names are not reused below: a release by a Redlock store may still be
	// reaching its last node when it returns.)
	r := e.post("/api/locks/redlock/warmup-resource?durationMs=0", "")
	wantCode(t, "redlock with every node up", r, http.StatusOK)
	if b := r.json(t); b["success"] != true || b["resourceId"] != "warmup-resource" {
		t.Errorf("200 body = %s", r.body)
	}
	nodes[0].Kill()
	nodes[1].Kill()
	r = e.post("/api/locks/redlock/critical-resource?durationMs=0", "")
	wantCode(t, "redlock with 2 of 3 nodes down", r, http.StatusServiceUnavailable)
	if b := r.json(t); b["error"] != "Quorum not reached" || b["message"] != "Unable to acquire lock on majority of instances" {
		t.Errorf("503 body = %s, want the seed's", r.body)
	}
	// A failed grant may leave a hold on the live node until its TTL,
	// which the store then reports as a refusal: another name again.
	r = e.post("/v1/locks/another-resource/acquire", `{}`)
	wantCode(t, "/v1 with 2 of 3 nodes down", r, http.StatusServiceUnavailable)
	if b := r.json(t); b["error"] != "no quorum" {
		t.Errorf("/v1 503 body = %s, want error \"no quorum\"", r.body)
	}
}

// TestMetrics: /metrics exports the DESIGN §8 names, without lock names.
func TestMetrics(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	token := e.post("/v1/locks/secret-lock-name/acquire", `{}`).json(t)["token"].(string)
	e.post("/v1/locks/secret-lock-name/acquire", `{}`)
	e.post("/v1/locks/secret-lock-name/release", `{"token":"`+token+`"}`)
	r := e.get("/metrics")
	if r.code != http.StatusOK {
		t.Fatalf("/metrics status %d", r.code)
	}
	text := string(r.body)
	for _, want := range []string{
		`dlock_acquire_total{pattern="mutex",result="acquired"} 1`,
		`dlock_acquire_total{pattern="mutex",result="locked"} 1`,
		`dlock_acquire_duration_seconds_bucket{pattern="mutex"`,
		`dlock_wait_duration_seconds`,
		`dlock_hold_duration_seconds_count{pattern="mutex"} 1`,
		`dlock_renewals_total{result="ok"}`,
		`dlock_leases_lost_total 0`,
		`dlock_fencing_rejections_total 0`,
		`dlock_store_errors_total{op="acquire"} 0`,
		`dlock_leases_held 0`,
		`dlock_http_requests_total{code="200",route="POST /v1/locks/{name}/acquire"} 1`,
		`dlock_http_requests_total{code="409",route="POST /v1/locks/{name}/acquire"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(text, "secret-lock-name") || strings.Contains(text, token) {
		t.Errorf("/metrics contains a lock name or token")
	}
}

// TestInputErrorsAreNotStoreErrors: a 400 for a client's bad input (a
// semaphore acquire with another limit than its holders') counts as result
// "invalid": not as a store error in /metrics, which operators alert on, nor
// in the dashboard's error total.
func TestInputErrorsAreNotStoreErrors(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	wantCode(t, "permit", e.post("/v1/locks/permits/acquire", `{"mode":"shared","limit":2}`), http.StatusOK)
	wantCode(t, "limit mismatch", e.post("/v1/locks/permits/acquire", `{"mode":"shared","limit":5}`), http.StatusBadRequest)
	text := string(e.get("/metrics").body)
	for _, want := range []string{
		`dlock_acquire_total{pattern="semaphore",result="invalid"} 1`,
		`dlock_acquire_total{pattern="semaphore",result="error"} 0`,
		`dlock_store_errors_total{op="acquire"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if tot := e.srv.history.total(); tot.Errors != 0 || tot.Acquired != 1 {
		t.Errorf("dashboard totals = %+v, want 1 acquired and 0 errors", tot)
	}
}

// TestEvents: the stream starts with a snapshot and delivers an acquire
// event without tokens.
func TestEvents(t *testing.T) {
	e := newEnv(t, memory.New(), Config{SnapshotInterval: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/events", nil)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("GET /v1/events: %v", err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	next := func() (string, string) {
		var event string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = line[7:]
			case strings.HasPrefix(line, "data: "):
				return event, line[6:]
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return "", ""
	}
	if ev, data := next(); ev != "snapshot" || !strings.Contains(data, `"history"`) {
		t.Fatalf("first event %q %s, want a snapshot with history", ev, data)
	}
	token := e.post("/v1/locks/streamed/acquire", `{}`).json(t)["token"].(string)
	for {
		ev, data := next()
		if strings.Contains(data, token) {
			t.Fatalf("event %s carries the token: %s", ev, data)
		}
		if ev == "acquire" {
			var b eventBody
			if err := json.Unmarshal([]byte(data), &b); err != nil {
				t.Fatalf("acquire event %s: %v", data, err)
			}
			if b.Name != "streamed" || b.Result != "acquired" || b.Fence <= 0 || b.Mode != "mutex" {
				t.Errorf("acquire event = %+v", b)
			}
			break
		}
	}
	// A client's extend is no event of the stream (the Locker reports it
	// to its observers, for tracing); the release that follows is.
	e.post("/v1/locks/streamed/extend", `{"token":"`+token+`"}`)
	e.post("/v1/locks/streamed/release", `{"token":"`+token+`"}`)
	for {
		ev, data := next()
		if ev == "release" {
			if strings.Contains(data, `"result"`) {
				t.Errorf("release event %s carries a result; docs/http.md lists none", data)
			}
			break
		}
		if ev != "snapshot" {
			t.Fatalf("event %q %s between the acquire and the release, want none", ev, data)
		}
	}
}

// TestEventStreamLimit: streams beyond MaxEventStreams get a JSON 503.
func TestEventStreamLimit(t *testing.T) {
	e := newEnv(t, memory.New(), Config{MaxEventStreams: 1, SnapshotInterval: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/events", nil)
	resp, err := e.ts.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	r := e.get("/v1/events")
	wantCode(t, "second stream", r, http.StatusServiceUnavailable)
	if r.json(t)["error"] != "too many streams" {
		t.Errorf("503 body = %s", r.body)
	}
}

// TestAuth: with a token configured, /api and /v1 need it; /health,
// /metrics and the dashboard do not.
func TestAuth(t *testing.T) {
	e := newEnv(t, memory.New(), Config{AuthToken: "s3cret-token"})
	for _, tc := range []struct {
		method, path, auth string
		code               int
	}{
		{"POST", "/v1/locks/a/acquire", "", http.StatusUnauthorized},
		{"POST", "/v1/locks/a/acquire", "Bearer wrong", http.StatusUnauthorized},
		{"POST", "/v1/locks/a/acquire", "Bearer s3cret-token-and-more", http.StatusUnauthorized},
		{"POST", "/v1/locks/a/acquire", "Basic s3cret-token", http.StatusUnauthorized},
		{"POST", "/v1/locks/a/acquire", "s3cret-token", http.StatusUnauthorized},
		{"GET", "/v1/locks", "", http.StatusUnauthorized},
		{"GET", "/v1/events", "", http.StatusUnauthorized},
		{"GET", "/v1/nope", "", http.StatusUnauthorized},
		{"POST", "/api/locks/simple/a?durationMs=0", "", http.StatusUnauthorized},
		{"POST", "/api/locks/simple/a?durationMs=0", "Bearer s3cret-token", http.StatusOK},
		{"POST", "/v1/locks/a/acquire", "Bearer s3cret-token", http.StatusOK},
		{"POST", "/v1/locks/b/acquire", "bearer s3cret-token", http.StatusOK},
		{"GET", "/health", "", http.StatusOK},
		{"GET", "/metrics", "", http.StatusOK},
		{"GET", "/", "", http.StatusOK},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		r := e.do(t.Context(), tc.method, tc.path, "", hdr...)
		if r.code != tc.code {
			t.Errorf("%s %s with %q: status %d, want %d (%s)", tc.method, tc.path, tc.auth, r.code, tc.code, r.body)
		}
		if tc.code == http.StatusUnauthorized {
			if r.json(t)["error"] != "unauthorized" || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 = %v %s", r.header, r.body)
			}
			if strings.Contains(string(r.body), "s3cret") {
				t.Errorf("401 body reveals the token")
			}
		}
	}
}

// TestBadInput: every bad input is a JSON 4xx naming the field.
func TestBadInput(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		long := strings.Repeat("n", 257)
		tok := strings.Repeat("a", 32)
		for _, tc := range []struct {
			method, path, body string
			code               int
			field              string
		}{
			// names
			{"POST", "/v1/locks/" + long + "/acquire", `{}`, 400, "name"},
			{"POST", "/v1/locks/a%00b/acquire", `{}`, 400, "name"},
			{"POST", "/v1/locks/a%0Ab/acquire", `{}`, 400, "name"},
			{"POST", "/v1/locks/a%7Fb/acquire", `{}`, 400, "name"},
			{"POST", "/v1/locks/%FF%FE/acquire", `{}`, 400, "name"},
			{"GET", "/v1/locks/%C2%85", ``, 400, "name"},
			{"POST", "/v1/locks/" + long + "/release", `{"token":"` + tok + `"}`, 400, "name"},
			{"POST", "/api/locks/simple/" + long, ``, 400, "resourceId"},
			{"POST", "/api/locks/simple/a%01", ``, 400, "resourceId"},
			{"POST", "/api/locks/nosuch/a", ``, 400, "pattern"},
			// ranges
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":99}`, 400, "ttlMs"},
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":0}`, 400, "ttlMs"},
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":-5}`, 400, "ttlMs"},
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":86400001}`, 400, "ttlMs"},
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":1e30}`, 400, "ttlMs"},
			{"POST", "/v1/locks/a/acquire", `{"waitMs":300001}`, 400, "waitMs"},
			{"POST", "/v1/locks/a/acquire", `{"waitMs":-1}`, 400, "waitMs"},
			{"POST", "/v1/locks/a/acquire", `{"mode":"sharded"}`, 400, "mode"},
			{"POST", "/v1/locks/a/acquire", `{"mode":"semaphore"}`, 400, "limit"},
			{"POST", "/v1/locks/a/acquire", `{"mode":"shared","limit":0}`, 400, "limit"},
			{"POST", "/v1/locks/a/acquire", `{"limit":3}`, 400, "limit"},
			{"POST", "/v1/locks/a/acquire", `{"mode":"shared","fair":true}`, 400, "fair"},
			{"POST", "/v1/locks/a/acquire", `{"fair":true,"owner":"x\u0007"}`, 400, "owner"},
			{"POST", "/v1/locks/a/acquire", `{"mode":"read","minHoldMs":1000}`, 400, "minHoldMs"},
			{"POST", "/v1/locks/a/acquire", `{"data":"` + strings.Repeat("d", 1025) + `"}`, 400, "data"},
			{"POST", "/v1/locks/a/acquire", `{"owner":"` + long + `"}`, 400, "owner"},
			{"POST", "/v1/locks/a/acquire", `{"token":"abc"}`, 400, "token"},
			{"POST", "/v1/locks/a/acquire", `{"token":"` + strings.Repeat("g", 32) + `"}`, 400, "token"},
			{"POST", "/v1/locks/a/acquire", `{"token":"` + strings.Repeat("a", 129) + `"}`, 400, "token"},
			{"POST", "/v1/locks/a/acquire", `{"queue":true}`, 400, "queue"},
			{"POST", "/v1/locks/a/acquire", `{"queueTtlMs":1000}`, 400, "queueTtlMs"},
			{"POST", "/v1/locks/a/acquire", `{"maxHoldMs":99}`, 400, "maxHoldMs"},
			{"POST", "/v1/locks/a/acquire", `{"maxHoldMs":-1}`, 400, "maxHoldMs"},
			{"POST", "/v1/locks/a/acquire", `{"maxHoldMs":31536000001}`, 400, "maxHoldMs"},
			{"POST", "/api/locks/simple/a?durationMs=300001", ``, 400, "durationMs"},
			{"POST", "/api/locks/simple/a?durationMs=-1", ``, 400, "durationMs"},
			{"POST", "/api/locks/simple/a?durationMs=1.5", ``, 400, "durationMs"},
			{"POST", "/api/locks/retry/a?waitMs=x", ``, 400, "waitMs"},
			{"POST", "/api/locks/semaphore/a?limit=0", ``, 400, "limit"},
			{"POST", "/v1/locks/a/extend", `{"token":"` + tok + `","ttlMs":50}`, 400, "ttlMs"},
			{"POST", "/v1/locks/a/extend", `{}`, 400, "token"},
			{"POST", "/v1/locks/a/release", `{}`, 400, "token"},
			{"POST", "/v1/locks/a/release", `{"token":1}`, 400, "token"},
			{"POST", "/v1/locks/a/extend", `{"token":"` + strings.Repeat("a", MaxTokenBytes+1) + `"}`, 400, "token"},
			{"POST", "/v1/locks/a/release", `{"token":"` + tok + `","ttlMs":1000}`, 400, "ttlMs"},
			{"POST", "/v1/locks/a/release", `{"token":"` + tok + `","mode":"x"}`, 400, "mode"},
			// JSON shape
			{"POST", "/v1/locks/a/acquire", `{"ttl":1000}`, 400, "ttl"},
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":"1000"}`, 400, "ttlMs"},
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":1000.5}`, 400, "ttlMs"},
			{"POST", "/v1/locks/a/acquire", `{"fair":"yes"}`, 400, "fair"},
			{"POST", "/v1/locks/a/acquire", `{"mode":1}`, 400, "mode"},
			{"POST", "/v1/locks/a/acquire", `[]`, 400, "body"},
			{"POST", "/v1/locks/a/acquire", `"x"`, 400, "body"},
			{"POST", "/v1/locks/a/acquire", `{`, 400, "body"},
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":1000}x`, 400, "body"},
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":1000}{}`, 400, "body"},
			{"POST", "/v1/locks/a/acquire", `nul`, 400, "body"},
			{"POST", "/v1/locks/a/release", ``, 400, "body"},
			{"POST", "/v1/locks/a/acquire", `{"ttlMs":1000,` + strings.Repeat(" ", MaxBodyBytes) + `}`, 413, ""},
			{"POST", "/v1/locks/a/release", `"` + strings.Repeat("x", MaxBodyBytes) + `"`, 413, ""},
			// routes and methods
			{"GET", "/v1/locks/a/acquire", ``, 405, ""},
			{"DELETE", "/v1/locks/a", ``, 405, ""},
			{"PUT", "/api/locks/simple/a", ``, 405, ""},
			{"POST", "/health", ``, 405, ""},
			{"POST", "/metrics", ``, 405, ""},
			{"GET", "/nope", ``, 404, ""},
			{"GET", "/v1/locks/a/b/c", ``, 404, ""},
			{"POST", "/v1/locks/a/steal", `{}`, 404, ""},
			{"GET", "/static/nope.js", ``, 404, ""},
			{"GET", "/static/../../etc/passwd", ``, 404, ""},
		} {
			r := e.do(t.Context(), tc.method, tc.path, tc.body)
			if r.code != tc.code {
				t.Errorf("%s %.60s %.60s: status %d, want %d (%s)", tc.method, tc.path, tc.body, r.code, tc.code, r.body)
				continue
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s %.60s: Content-Type %q", tc.method, tc.path, ct)
				continue
			}
			body := r.json(t)
			if body["error"] == nil || body["message"] == nil {
				t.Errorf("%s %.60s %.60s: body %s lacks error or message", tc.method, tc.path, tc.body, r.body)
			}
			if tc.field != "" && body["field"] != tc.field {
				t.Errorf("%s %.60s %.60s: field %v, want %q (%s)", tc.method, tc.path, tc.body, body["field"], tc.field, r.body)
			}
			if tc.code == 405 && r.header.Get("Allow") == "" {
				t.Errorf("%s %s: 405 without Allow", tc.method, tc.path)
			}
		}
		// Nothing above took a lock.
		if st := e.get("/v1/locks").json(t); len(st["locks"].([]any)) != 0 {
			t.Errorf("bad input left locks behind: %v", st)
		}
	})
}

// TestEscapedName: names with a slash travel percent-encoded.
func TestEscapedName(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	r := e.post("/v1/locks/jobs%2Fnightly%20report/acquire", `{}`)
	wantCode(t, "acquire", r, http.StatusOK)
	if n := r.json(t)["name"]; n != "jobs/nightly report" {
		t.Errorf("name = %v, want %q", n, "jobs/nightly report")
	}
	if st := e.get("/v1/locks/jobs%2Fnightly%20report").json(t); st["holders"] != 1.0 {
		t.Errorf("state = %v", st)
	}
}

// TestGracefulShutdown: an in-flight demo operation finishes and releases
// its lock after shutdown begins; new connections are refused; an event
// stream ends.
func TestGracefulShutdown(t *testing.T) {
	backend := memory.New()
	m := dlockprom.New()
	l, err := dlock.New(backend, dlock.WithObserver(m.Observe))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv, err := New(l, Config{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	acquired := make(chan struct{}, 1)
	unsub := m.Subscribe(func(ev dlock.Event) {
		if ev.Kind == dlock.EventAcquire && ev.Name == "inflight" {
			acquired <- struct{}{}
		}
	})
	defer unsub()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	stream, err := client.Get(base + "/v1/events")
	if err != nil {
		t.Fatalf("GET /v1/events: %v", err)
	}
	defer stream.Body.Close()

	type result struct {
		code int
		body string
		err  error
	}
	inflight := make(chan result, 1)
	go func() {
		resp, err := client.Post(base+"/api/locks/simple/inflight?durationMs=300", "", nil)
		if err != nil {
			inflight <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		inflight <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-acquired

	// An acquire waiting for a held lock is answered 503 "shutting down".
	waiting := make(chan struct{}, 1)
	testHookWaiting = func(name string) {
		if name == "contended" {
			waiting <- struct{}{}
		}
	}
	defer func() { testHookWaiting = nil }()
	if resp, err := client.Post(base+"/v1/locks/contended/acquire", "", strings.NewReader(`{}`)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("acquire = %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	waiter := make(chan result, 1)
	go func() {
		resp, err := client.Post(base+"/v1/locks/contended/acquire", "", strings.NewReader(`{"waitMs":60000}`))
		if err != nil {
			waiter <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		waiter <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-waiting

	stop()
	if w := <-waiter; w.err != nil || w.code != http.StatusServiceUnavailable || !strings.Contains(w.body, `"shutting down"`) {
		t.Errorf("waiting acquire during shutdown = %d %q %v, want 503 shutting down", w.code, w.body, w.err)
	}
	r := <-inflight
	if r.err != nil || r.code != http.StatusOK || !strings.Contains(r.body, `"success":true`) {
		t.Fatalf("in-flight request during shutdown = %d %q %v, want 200 success", r.code, r.body, r.err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve = %v", err)
	}
	if _, err := io.ReadAll(stream.Body); err != nil {
		t.Logf("event stream ended with %v", err)
	}
	st, _ := backend.State(t.Context(), "inflight")
	if st.Holders != 0 {
		t.Errorf("after shutdown the demo lock has %d holders, want 0", st.Holders)
	}
	if _, err := client.Get(base + "/health"); err == nil {
		t.Errorf("GET after shutdown succeeded, want connection refused")
	}
}

// TestDashboard: the page and its assets are served.
func TestDashboard(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	r := e.get("/")
	if r.code != 200 || !strings.Contains(r.header.Get("Content-Type"), "text/html") || !strings.Contains(string(r.body), "dlock") {
		t.Fatalf("GET / = %d %q", r.code, r.header.Get("Content-Type"))
	}
	for _, asset := range []string{"/static/dashboard.js", "/static/dashboard.css", "/static/favicon.svg"} {
		if r := e.get(asset); r.code != 200 {
			t.Errorf("GET %s = %d", asset, r.code)
		}
	}
}
