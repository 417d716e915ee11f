package valkey

import (
	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// Supports reports whether the store runs mode m (for the tests' Harness).
func Supports(m store.Mode) bool { return redisproto.Supports(m) }

// AuxKey exposes Store.aux to the tests.
func (s *Store) AuxKey(name, suffix string) string { return s.aux(name, suffix) }

// ParseURL exposes parseURL to the tests.
var ParseURL = parseURL

// KeySet exposes Store.keySet to the tests.
func (s *Store) KeySet(withMain bool, name string, suffixes ...string) []string {
	return s.keySet(withMain, name, suffixes...)
}
