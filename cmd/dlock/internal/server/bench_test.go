package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/valkey"
)

// benchClients is the number of concurrent clients of the throughput
// benchmarks, each on its own keep-alive connection.
const benchClients = 64

func benchStores(b *testing.B, fn func(b *testing.B, st store.Store)) {
	b.Run("memory", func(b *testing.B) { fn(b, memory.New()) })
	b.Run("valkey", func(b *testing.B) {
		srv := testredis.Start(b)
		s, err := valkey.Dial(context.Background(), srv.URL())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		fn(b, s)
	})
}

// reportCPU reports the process's CPU time (user and system) per op from
// now until the returned func is called: on a busy machine a steadier
// figure than ns/op.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0 := cpu()
	return func() { b.ReportMetric(float64(cpu()-c0)/float64(b.N), "cpu-ns/op") }
}

// parallel runs body on benchClients goroutines whatever GOMAXPROCS is.
func parallel(b *testing.B, body func(id int, pb *testing.PB)) {
	var ids atomic.Int64
	b.SetParallelism(max(1, benchClients/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) { body(int(ids.Add(1)), pb) })
}

// BenchmarkV1AcquireRelease measures acquire+release pairs through the /v1
// API over loopback HTTP with 64 keep-alive clients, each on its own locks.
func BenchmarkV1AcquireRelease(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		m := dlockprom.New()
		l, err := dlock.New(st, dlock.WithObserver(m.Observe))
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		srv, err := New(l, Config{Metrics: m})
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		tr := &http.Transport{MaxIdleConns: benchClients * 2, MaxIdleConnsPerHost: benchClients * 2}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		post := func(path string, body []byte, out any) int {
			resp, err := client.Post(ts.URL+path, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return 0
			}
			defer resp.Body.Close()
			if out != nil {
				json.NewDecoder(resp.Body).Decode(out)
			}
			io.Copy(io.Discard, resp.Body)
			return resp.StatusCode
		}
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		parallel(b, func(id int, pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				name := fmt.Sprintf("/v1/locks/bench-%d-%d", id, i%16)
				var g grantBody
				if code := post(name+"/acquire", []byte(`{"ttlMs":10000}`), &g); code != http.StatusOK {
					b.Errorf("acquire: status %d", code)
					return
				}
				if code := post(name+"/release", []byte(`{"token":"`+g.Token+`"}`), nil); code != http.StatusOK {
					b.Errorf("release: status %d", code)
					return
				}
			}
		})
	})
}

// BenchmarkLibraryAcquireRelease is the same work through the library
// directly, for comparison.
func BenchmarkLibraryAcquireRelease(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		l, err := dlock.New(st, dlock.WithObserver(dlockprom.New().Observe))
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		parallel(b, func(id int, pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				ls, err := l.Mutex(fmt.Sprintf("bench-%d-%d", id, i%16), dlock.WithTTL(10e9)).TryLock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := ls.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkV1Handler is BenchmarkV1AcquireRelease without the network:
// the server's handler called directly, which is what the server spends
// per request on top of net/http.
func BenchmarkV1Handler(b *testing.B) {
	benchStores(b, func(b *testing.B, st store.Store) {
		m := dlockprom.New()
		l, err := dlock.New(st, dlock.WithObserver(m.Observe))
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		srv, err := New(l, Config{Metrics: m})
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		post := func(path string, body []byte) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			req, err := http.NewRequest(http.MethodPost, "http://dlock"+path, bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			srv.ServeHTTP(rec, req)
			return rec
		}
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		parallel(b, func(id int, pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				name := fmt.Sprintf("/v1/locks/bench-%d-%d", id, i%16)
				rec := post(name+"/acquire", []byte(`{"ttlMs":10000}`))
				var g grantBody
				if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &g) != nil {
					b.Errorf("acquire: status %d: %s", rec.Code, rec.Body)
					return
				}
				if rec := post(name+"/release", []byte(`{"token":"`+g.Token+`"}`)); rec.Code != http.StatusOK {
					b.Errorf("release: status %d: %s", rec.Code, rec.Body)
					return
				}
			}
		})
	})
}
