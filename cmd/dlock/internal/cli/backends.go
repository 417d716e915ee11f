package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

// dialTimeout bounds connecting to a store and its start-up checks.
const dialTimeout = 10 * time.Second

func (s *storeFlags) valkeyOptions(log *slog.Logger) []valkey.Option {
	return []valkey.Option{valkey.WithLogger(log), valkey.WithPrefix(s.prefix), valkey.WithFenceRetention(s.fenceRetention)}
}

// dialValkey opens a store/valkey Store on url.
func (s *storeFlags) dialValkey(ctx context.Context, url string, log *slog.Logger) (store.Store, func(), error) {
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
func (s *storeFlags) openRedlock(ctx context.Context, urls []string, log *slog.Logger) (store.Store, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var closers []io.Closer
	nodes := make([]store.Store, len(urls))
	var failed []error
	for i, u := range urls {
		n := &lazyNode{url: u, opts: s.valkeyOptions(log), log: log}
		closers = append(closers, n)
		nodes[i] = n
		if _, err := n.get(ctx); err != nil {
			err = &codedError{msg: fmt.Sprintf("node %d (%s): %s", i, redactURL(u), strings.TrimPrefix(err.Error(), "dlock: ")), err: err}
			if errors.Is(err, dlock.ErrInvalid) { // a bad URL or option
				closeAll(closers)()
				return nil, nil, err
			}
			failed = append(failed, err)
		}
	}
	if up := len(urls) - len(failed); up < len(urls)/2+1 {
		closeAll(closers)()
		return nil, nil, &codedError{
			msg: fmt.Sprintf("no quorum: only %d of %d nodes reachable; %v", up, len(urls), errors.Join(failed...)),
			err: dlock.ErrNoQuorum,
		}
	}
	for _, err := range failed {
		log.Warn("dlock: redlock node unreachable; dialling it again on use", "err", err)
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
