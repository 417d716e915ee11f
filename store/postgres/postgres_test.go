package postgres_test

import (
	"context"
	"os"
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/dlock-dev/dlock/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := 0
	func() {
		defer pgtest.Cleanup()
		code = goleakRun(m)
	}()
	os.Exit(code)
}

// goleakRun runs the tests and then checks for leaked goroutines.
func goleakRun(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			return 1
		}
	}
	return code
}

func newStore(t *testing.T, url string, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	s, err := postgres.New(t.Context(), url, opts...)
	if err != nil {
		t.Fatalf("postgres.New(%q) = %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) dlock.Store { return newStore(t, srv.URL()) },
		Restart: func(t *testing.T) { srv.Restart(t) },
	})
}

var _ = context.Background
