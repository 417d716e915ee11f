package main

import (
	"context"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd"
)

// The etcd store (store/etcd): -addrs are the client endpoints (host:port)
// of the cluster's members the worker may use; etcd's client balances
// between them and moves on when one fails. A worker given one member talks
// to that member only, as a client on its side of a partition does. It
// takes no -opt.
func init() {
	extraStores["etcd"] = openEtcd
}

func openEtcd(ctx context.Context, c config) (store.Store, func(), error) {
	s, err := etcd.New(ctx, c.addrs)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}
