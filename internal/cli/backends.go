package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

// dialTimeout bounds connecting to a store and its start-up checks.
const dialTimeout = 10 * time.Second

func (s *storeFlags) valkeyOptions(log *slog.Logger) []valkey.Option {
	return []valkey.Option{valkey.WithLogger(log), valkey.WithPrefix(s.prefix)}
}

// dialValkey opens a store/valkey Store on url.
func (s *storeFlags) dialValkey(ctx context.Context, url string, log *slog.Logger) (dlock.Store, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	st, err := valkey.Dial(ctx, url, s.valkeyOptions(log)...)
	if err != nil {
		return nil, nil, err
	}
	return st, func() { st.Close() }, nil
}

// openRedlock opens a store/redlock Store over one valkey Store per URL.
func (s *storeFlags) openRedlock(ctx context.Context, urls []string, log *slog.Logger) (dlock.Store, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var closers []io.Closer
	nodes := make([]dlock.Store, 0, len(urls))
	for i, u := range urls {
		st, err := valkey.Dial(ctx, u, s.valkeyOptions(log)...)
		if err != nil {
			closeAll(closers)()
			return nil, nil, fmt.Errorf("node %d (%s): %w", i, redactURL(u), err)
		}
		closers = append(closers, st)
		nodes = append(nodes, st)
	}
	rl, err := redlock.New(nodes, redlock.WithLogger(log))
	if err != nil {
		closeAll(closers)()
		return nil, nil, err
	}
	return rl, func() {
		rl.Close()
		closeAll(closers)()
	}, nil
}
