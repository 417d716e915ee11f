package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// The cluster store is store/valkey on a Redis Cluster: -addrs are seed
// nodes (the harness's proxies to the masters); valkey-go learns the
// cluster's topology from them and talks to every node directly, following
// MOVED and ASK redirections and refreshing the topology after a failover.
// It takes no -opt.
func init() {
	extraStores["cluster"] = func(ctx context.Context, c config) (store.Store, func(), error) {
		if len(c.addrs) == 0 {
			return nil, nil, fmt.Errorf("store cluster takes the seed nodes in -addrs")
		}
		s, err := valkey.Dial(ctx, "redis://"+strings.Join(c.addrs, ","))
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}
}
