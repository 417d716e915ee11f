package cli

import (
	"context"
	"errors"

	"github.com/dlock-dev/dlock"
)

// dialValkey opens a store/valkey Store on url.
func dialValkey(ctx context.Context, url string) (dlock.Store, func(), error) {
	return nil, nil, errors.New("dlock: the valkey store is not available in this build yet")
}

// openRedlock opens a store/redlock Store over one valkey Store per URL.
func openRedlock(ctx context.Context, urls []string) (dlock.Store, func(), error) {
	return nil, nil, errors.New("dlock: the redlock store is not available in this build yet")
}
