package etcd_test

import (
	"testing"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/etcd"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	"github.com/dlock-dev/dlock/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T, endpoint string, opts ...etcd.Option) *etcd.Store {
	t.Helper()
	s, err := etcd.New(t.Context(), []string{endpoint}, opts...)
	if err != nil {
		t.Fatalf("etcd.New(%q) = %v", endpoint, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) dlock.Store { return newStore(t, srv.Endpoint()) },
		Restart: func(t *testing.T) { srv.Restart(t) },
	})
}
