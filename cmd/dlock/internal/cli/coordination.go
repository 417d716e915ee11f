package cli

import (
	"context"
	"log/slog"
	"strings"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/zookeeper"
)

// openCoordination opens one of the coordination-service stores: kind is
// etcd, postgres or zookeeper, value the flag's value.
func (s *storeFlags) openCoordination(ctx context.Context, kind, value string, log *slog.Logger) (*backend, error) {
	if s.prefix != "lock:" {
		return nil, &dlock.InvalidError{Field: "key-prefix", Reason: "applies to Valkey/Redis stores only"}
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var (
		st interface {
			store.Store
			Close() error
		}
		err  error
		desc = value
	)
	switch kind {
	case "etcd":
		st, err = etcd.New(ctx, splitList(value))
	case "postgres":
		st, err = postgres.New(ctx, value, postgres.WithLogger(log))
		desc = redactURL(value)
	case "zookeeper":
		var opts []zookeeper.Option
		if s.replica {
			opts = append(opts, zookeeper.WithTakeOver())
		}
		st, err = zookeeper.New(ctx, splitList(value), opts...)
	}
	if err != nil {
		return nil, err
	}
	return &backend{store: st, name: kind, desc: desc, close: func() { st.Close() }}, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
