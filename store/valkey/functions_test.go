package valkey_test

import (
	"testing"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/store"
)

// TestFunctionFallback: see prototest.FunctionFallback.
func TestFunctionFallback(t *testing.T) {
	prototest.FunctionFallback(t, func(t *testing.T, url string) store.Store { return dial(t, url) })
}
