package cli

import (
	"context"
	"errors"
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
// Nodes that cannot be reached now are dialled again later (see
// lazyNode), as long as a majority answers at start.
func (s *storeFlags) openRedlock(ctx context.Context, urls []string, log *slog.Logger) (dlock.Store, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var closers []io.Closer
	nodes := make([]dlock.Store, len(urls))
	var failed []error
	for i, u := range urls {
		n := &lazyNode{url: u, opts: s.valkeyOptions(log), log: log}
		closers = append(closers, n)
		nodes[i] = n
		if _, err := n.get(ctx); err != nil {
			if !errors.Is(err, dlock.ErrUnavailable) { // a bad URL or option
				closeAll(closers)()
				return nil, nil, fmt.Errorf("node %d (%s): %w", i, redactURL(u), err)
			}
			log.Warn("dlock: redlock node unreachable; retrying in the background", "node", i, "url", redactURL(u), "err", err)
			failed = append(failed, fmt.Errorf("node %d (%s): %w", i, redactURL(u), err))
		}
	}
	if len(urls)-len(failed) < len(urls)/2+1 {
		closeAll(closers)()
		return nil, nil, fmt.Errorf("%w: only %d of %d nodes reachable: %w", dlock.ErrNoQuorum, len(urls)-len(failed), len(urls), errors.Join(failed...))
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
