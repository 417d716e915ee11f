package valkey_test

import (
	"testing"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// TestScriptKeys runs the checks of the keys the scripts leave (a foreign
// value in the main key untouched, TTLs on every key) through this store.
func TestScriptKeys(t *testing.T) {
	srv := testredis.Start(t)
	prototest.Run(t, srv, dial(t, srv.URL()))
}
