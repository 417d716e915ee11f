package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper"
)

// The ZooKeeper store (store/zookeeper): -addrs are the ensemble's servers
// (host:port) the worker may use; the client connects to one and moves to
// another when it fails. A worker given one server talks to that server
// only, as a client on its side of a partition does.
//
// Options (-opt):
//
//	session-timeout=d   the session timeout the store asks for
//	                    (zookeeper.WithSessionTimeout; default the store's, 40s)
func init() {
	extraStores["zookeeper"] = openZooKeeper
}

func openZooKeeper(ctx context.Context, c config) (store.Store, func(), error) {
	var opts []zookeeper.Option
	if v := c.opts["session-timeout"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, nil, fmt.Errorf("-opt session-timeout=%q: %v", v, err)
		}
		opts = append(opts, zookeeper.WithSessionTimeout(d))
	}
	s, err := zookeeper.New(ctx, c.addrs, opts...)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}
