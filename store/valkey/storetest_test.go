package valkey_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
	"github.com/dlock-dev/dlock/storetest"
)

// TestConformance runs the conformance of a store over redisproto on one
// non-persistent redis-server.
func TestConformance(t *testing.T) {
	srv := testredis.Start(t)
	prototest.Conformance(t, srv, func(t *testing.T) store.Store { return dial(t, srv.URL()) })
}

// TestConformanceWaitReplicas runs storetest on a primary with a replica,
// through Stores that confirm every write a lease counts on by WAIT: every
// pattern works with grant watches refused and grants, extensions and
// raised fences confirmed.
func TestConformanceWaitReplicas(t *testing.T) {
	primary := testredis.Start(t)
	testredis.StartReplica(t, primary)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return dial(t, primary.URL(), valkey.WithWaitReplicas(1, time.Second)) },
	})
}

// TestConformanceCluster runs storetest on a Redis Cluster of three masters;
// the locks' keys spread over all of them, and MOVED/ASK are the client's.
func TestConformanceCluster(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	url := "redis://" + strings.Join(c.Addrs(), ",")
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return dial(t, url) },
	})
}

// TestModel checks one redis-server against storetest's model of the lock
// semantics.
func TestModel(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	storetest.RunModel(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return dial(t, srv.URL()) },
	}, storetest.ModelConfig{})
}

// TestModelCluster checks a Redis Cluster of three masters against
// storetest's model of the lock semantics.
func TestModelCluster(t *testing.T) {
	t.Parallel()
	c := testredis.StartCluster(t, 3)
	url := "redis://" + strings.Join(c.Addrs(), ",")
	storetest.RunModel(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return dial(t, url) },
	}, storetest.ModelConfig{})
}
