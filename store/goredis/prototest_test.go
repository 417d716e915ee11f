package goredis_test

import (
	"testing"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
)

// TestScriptKeys runs the checks of the keys the scripts leave (a foreign
// value in the main key untouched, TTLs on every key) through this store,
// as store/valkey does: both run the same scripts.
func TestScriptKeys(t *testing.T) {
	srv := testredis.Start(t)
	prototest.Run(t, srv, open(t, srv.Addr()))
}
