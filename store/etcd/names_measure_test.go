package etcd_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestMeasureKeysPerName measures what distinct names leave in etcd once
// each was acquired and released: the keys under the store's prefix and
// the database's size in use (after a compaction and defragmentation, so
// that old revisions do not count), per name. A measurement, not a check:
// it runs when DLOCK_MEASURE_NAMES is set to the number of names, e.g.
//
//	DLOCK_MEASURE_NAMES=20000 go test -run TestMeasureKeysPerName -v ./store/etcd
func TestMeasureKeysPerName(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DLOCK_MEASURE_NAMES"))
	if n <= 0 {
		t.Skip("a measurement: set DLOCK_MEASURE_NAMES to the number of names")
	}
	srv := etcdtest.Start(t)
	s := newStore(t, srv.Endpoint())
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	size := func() int64 {
		t.Helper()
		r, err := cli.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, r.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Defragment(ctx, srv.Endpoint()); err != nil {
			t.Fatal(err)
		}
		st, err := cli.Status(ctx, srv.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		return st.DbSizeInUse
	}
	base := size()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				req := store.Request{Name: "name-" + strconv.Itoa(i), Token: "t", TTL: 30 * time.Second}
				if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
					t.Errorf("Acquire = %+v, %v", g, err)
					return
				}
				if err := s.Release(ctx, req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	r, err := cli.Get(ctx, "dlock/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	used := size()
	t.Logf("%d names acquired and released: %d keys under dlock/, db size in use %d -> %d bytes, %.1f bytes per name",
		n, r.Count, base, used, float64(used-base)/float64(n))
}
