package cli

import (
	"context"
	"errors"
	"log/slog"
)

// serve runs the HTTP service until ctx ends.
func serve(ctx context.Context, x *cmd, f *serveFlags, b *backend, log *slog.Logger) error {
	return errors.New("dlock: the HTTP service is not available in this build yet")
}
