package valkey_test

import (
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/storetest"
)

func TestBroadcast(t *testing.T) {
	srv := testredis.Start(t)
	storetest.Broadcast(t, dial(t, srv.URL()), dial(t, srv.URL()))
}

func TestBroadcastCluster(t *testing.T) {
	c := testredis.StartCluster(t, 3)
	url := "redis://" + strings.Join(c.Addrs(), ",")
	storetest.Broadcast(t, dial(t, url), dial(t, url))
}
