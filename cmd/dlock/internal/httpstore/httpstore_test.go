package httpstore_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/httpstore"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a dlock server on backend until the test ends and returns its
// URL.
func serve(t testing.TB, backend store.Store, authToken string) string {
	t.Helper()
	m := dlockprom.New()
	locker, err := dlock.New(backend, dlock.WithObserver(m.Observe))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(locker, server.Config{AuthToken: authToken, Metrics: m, StoreName: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		locker.Close()
	})
	return "http://" + ln.Addr().String()
}

func newStore(t *testing.T, url string, opts ...httpstore.Option) *httpstore.Store {
	t.Helper()
	st, err := httpstore.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestConformance runs the store conformance suite through the HTTP API
// against a server on the memory store.
func TestConformance(t *testing.T) {
	url := serve(t, memory.New(), "tok")
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return newStore(t, url, httpstore.WithAuthToken("tok")) },
		Unsupported: []store.Mode{store.ModeReentrant, store.ModeRead, store.ModeWrite,
			store.ModeFair, store.ModeSemaphore, store.ModeElection},
		DefaultsHolder: true, // the service records the caller as the holder of a request without one
		NoResume:       true, // the service resumes an extend of a lease it does not know by itself
	})
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "localhost:3009", "ftp://x", "http://", "http://user:pw@host"} {
		if _, err := httpstore.New(u); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("New(%q) = %v, want ErrInvalid", u, err)
		}
	}
}

func TestErrors(t *testing.T) {
	url := serve(t, memory.New(), "tok")
	ctx := context.Background()
	req := store.Request{Name: "x", Token: "0123456789abcdef0123456789abcdef", TTL: time.Second}

	wrong := newStore(t, url, httpstore.WithAuthToken("nope"))
	if _, err := wrong.Acquire(ctx, req); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Acquire with a wrong auth token = %v, want ErrInvalid", err)
	}

	st := newStore(t, url, httpstore.WithAuthToken("tok"))
	bad := req
	bad.Token = "not hex"
	if _, err := st.Acquire(ctx, bad); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Acquire with a bad token = %v, want ErrInvalid", err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Errorf("Ping = %v", err)
	}
	// A name that needs escaping in a URL path.
	odd := req
	odd.Name = "a/b c?d#e%f"
	if g, err := st.Acquire(ctx, odd); err != nil || !g.Acquired {
		t.Fatalf("Acquire(%q) = %+v, %v", odd.Name, g, err)
	}
	if s, err := st.State(ctx, odd.Name); err != nil || s.Holders != 1 || s.Name != odd.Name {
		t.Errorf("State(%q) = %+v, %v; want one holder", odd.Name, s, err)
	}
	if err := st.Release(ctx, odd); err != nil {
		t.Errorf("Release(%q) = %v", odd.Name, err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	down := newStore(t, closed)
	if _, err := down.Acquire(ctx, req); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Acquire on a closed port = %v, want ErrUnavailable", err)
	}
	if err := down.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ping on a closed port = %v, want ErrUnavailable", err)
	}
}

func serveB(b *testing.B) string { return serve(b, memory.New(), "") }

func newBenchStore(url string) (*httpstore.Store, error) { return httpstore.New(url) }
