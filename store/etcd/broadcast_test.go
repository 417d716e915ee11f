package etcd_test

import (
	"testing"

	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	"github.com/dlock-dev/dlock/storetest"
)

func TestBroadcast(t *testing.T) {
	srv := etcdtest.Start(t)
	storetest.Broadcast(t, newStore(t, srv.Endpoint()), newStore(t, srv.Endpoint()))
}
