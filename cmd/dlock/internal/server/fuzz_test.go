package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/store/memory"
)

// FuzzDecodeAcquire: any name and body decode to a valid request or to a
// 400 naming the field; never a panic.
func FuzzDecodeAcquire(f *testing.F) {
	for _, s := range []struct{ name, body string }{
		{"orders", ``},
		{"orders", `{}`},
		{"orders", `{"ttlMs":5000,"waitMs":1000}`},
		{"a/b", `{"mode":"shared","limit":3}`},
		{"x", `{"mode":"exclusive","fair":true,"queue":true,"queueTtlMs":2000}`},
		{"x", `{"owner":"w1","token":"0123456789abcdef0123456789abcdef"}`},
		{"x", `{"mode":"write","waitMs":300000}`},
		{"x", `{"ttlMs":1e309}`},
		{"x", `{"ttlMs":-1,"bogus":true}`},
		{"x", `{"ttlMs":100}{"ttlMs":100}`},
		{"x", `{"mode":null,"limit":null}`},
		{"x", `[{"ttlMs":1}]`},
		{"", `{}`},
		{"\x00", `{}`},
		{strings.Repeat("é", 200), `{}`},
		{"x", "{\"owner\":\"\\u0000\"}"},
		{"x", "\xff\xfe"},
	} {
		f.Add(s.name, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		p, e := decodeAcquire(name, bytes.NewReader(body))
		if e != nil {
			if e.Status != http.StatusBadRequest || e.Field == "" || e.Message == "" || e.Error == "" {
				t.Fatalf("decodeAcquire(%q, %q) error = %+v, want a 400 naming the field", name, body, e)
			}
			if _, err := json.Marshal(e); err != nil {
				t.Fatalf("error body does not encode: %v", err)
			}
			return
		}
		r := p.req
		if dlock.ValidName(r.Name) != nil || r.Name != name {
			t.Fatalf("accepted name %q", name)
		}
		if r.TTL < dlock.MinTTL || r.TTL > dlock.MaxTTL {
			t.Fatalf("accepted ttl %v", r.TTL)
		}
		if p.wait < 0 || p.wait > MaxWaitMs*time.Millisecond {
			t.Fatalf("accepted wait %v", p.wait)
		}
		if r.Mode.String() == "unknown" {
			t.Fatalf("accepted mode %v", r.Mode)
		}
		if (r.Mode == dlock.ModeSemaphore) != (r.Limit > 0) || r.Limit > maxLimit {
			t.Fatalf("accepted mode %v with limit %d", r.Mode, r.Limit)
		}
		if r.Token != "" && validToken(r.Token) != nil {
			t.Fatalf("accepted token %q", r.Token)
		}
		if r.Owner != "" && (r.Mode != dlock.ModeReentrant || validText("owner", r.Owner) != nil) {
			t.Fatalf("accepted owner %q in mode %v", r.Owner, r.Mode)
		}
	})
}

// FuzzHandler sends arbitrary requests through the whole handler on the
// memory store: no input may produce a 5xx or a panic, and every error is
// JSON.
func FuzzHandler(f *testing.F) {
	tok := "0123456789abcdef0123456789abcdef"
	for _, s := range []struct{ method, path, body string }{
		{"POST", "/api/locks/simple/resource1?durationMs=0", ""},
		{"POST", "/api/locks/retry/r?durationMs=1&waitMs=5", ""},
		{"POST", "/api/locks/semaphore/r?limit=2&durationMs=0", ""},
		{"POST", "/api/locks/reentrant/r?owner=me&durationMs=0", ""},
		{"POST", "/api/locks/nope/r", ""},
		{"POST", "/v1/locks/a/acquire", `{"ttlMs":1000}`},
		{"POST", "/v1/locks/a/acquire", `{"token":"` + tok + `"}`},
		{"POST", "/v1/locks/a/extend", `{"token":"` + tok + `","ttlMs":2000}`},
		{"POST", "/v1/locks/a/release", `{"token":"` + tok + `"}`},
		{"POST", "/v1/locks/a/release", `{"token":"` + tok + `","mode":"semaphore"}`},
		{"POST", "/v1/locks/a%2Fb/acquire", `{"mode":"shared"}`},
		{"GET", "/v1/locks/a", ""},
		{"GET", "/v1/locks", ""},
		{"GET", "/v1/events", ""},
		{"GET", "/health", ""},
		{"GET", "/metrics", ""},
		{"GET", "/", ""},
		{"GET", "/static/dashboard.js", ""},
		{"DELETE", "/v1/locks/a", ""},
		{"POST", "/v1/locks//acquire", "{}"},
		{"POST", "/v1/locks/../acquire", "{}"},
		{"OPTIONS", "*", ""},
		{"GET", "/v1/locks/%ff", ""},
	} {
		f.Add(s.method, s.path, []byte(s.body))
	}
	store := memory.New()
	m := dlockprom.New()
	l, err := dlock.New(store, dlock.WithObserver(m.Observe))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	srv, err := New(l, Config{Metrics: m, SnapshotInterval: time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		req, err := http.NewRequest(method, "http://dlock.test"+path, bytes.NewReader(body))
		if err != nil || req.URL.Path == "" {
			return // not a request a client could send
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		req = req.WithContext(ctx)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %q %q: status %d: %s", method, path, body, w.Code, w.Body.Bytes())
		}
		if w.Code >= 400 && w.Code != 499 {
			var e apiError
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" || e.Message == "" {
				t.Fatalf("%s %q %q: status %d with body %q, want a JSON error", method, path, body, w.Code, w.Body.Bytes())
			}
		}
	})
}
