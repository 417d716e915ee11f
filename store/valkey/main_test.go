package valkey_test

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store/valkey"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// valkey-go's cluster client closes connections to nodes dropped by
		// a topology refresh after 5 seconds, on a goroutine of its own
		// that outlives Close.
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
		// Its Close closes each node's connections on goroutines it does
		// not wait for, and a topology refresh in flight at Close asks the
		// other nodes on goroutines that end when they answer; under load
		// both may still run when the tests end (a Store made by Dial
		// holds two clients, see the package doc).
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*mux).Close"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient).refreshConns.func1"),
	)
}

// dial returns a Store on url, closed when the test ends.
func dial(t *testing.T, url string, opts ...valkey.Option) *valkey.Store {
	t.Helper()
	s, err := valkey.Dial(prototest.Context(t), url, opts...)
	if err != nil {
		t.Fatalf("Dial(%q) = %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// mustDo runs a raw command on srv and fails t on error.
func mustDo(t *testing.T, srv *testredis.Server, args ...string) string {
	t.Helper()
	r, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("%v = %v", args, err)
	}
	return r
}

// logBuffer is a concurrency-safe buffer for a captured slog output.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// infoInt returns the integer field of an INFO reply, or -1.
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

func strconvI(n int64) string { return strconv.FormatInt(n, 10) }

// dialB is dial for benchmarks.
func dialB(b *testing.B, url string) *valkey.Store {
	b.Helper()
	s, err := valkey.Dial(b.Context(), url)
	if err != nil {
		b.Fatalf("Dial(%q) = %v", url, err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
