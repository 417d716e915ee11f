package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/store/redlock"
)

// serve runs the HTTP service on b until ctx ends, then shuts it down
// gracefully and closes the Locker (releasing what it still holds).
func serve(ctx context.Context, x *cmd, f *serveFlags, b *backend, log *slog.Logger) error {
	m := dlockprom.New()
	locker, err := newLocker(b, log, dlock.WithObserver(m.Observe))
	if err != nil {
		return err
	}
	storeName := b.name
	if rl, ok := b.store.(*redlock.Store); ok {
		storeName = fmt.Sprintf("redlock(%d)", rl.Nodes())
	}
	srv, err := server.New(locker, server.Config{
		Addr:      f.addr,
		AuthToken: x.store.authToken,
		Logger:    log,
		Metrics:   m,
		StoreName: storeName,
		Version:   buildVersion().Version,

		ShutdownTimeout: f.shutdownTimeout,
	})
	if err != nil {
		locker.Close()
		return err
	}
	err = srv.ListenAndServe(ctx)
	if cerr := locker.Close(); cerr != nil && err == nil {
		log.Warn("dlock: releasing leases at shutdown", "err", cerr)
	}
	return err
}
