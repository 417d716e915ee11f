package valkey

import (
	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// Supports reports whether the store runs mode m (for the tests' Harness).
func Supports(m store.Mode) bool { return redisproto.Supports(m) }

// AuxKey exposes the Store's auxiliary keys to the tests.
func (s *Store) AuxKey(name, suffix string) string { return s.l.Aux(name, suffix) }

// ParseURL exposes parseURL to the tests.
var ParseURL = parseURL

// KeySet exposes the Store's key sets to the tests.
func (s *Store) KeySet(withMain bool, name string, suffixes ...string) []string {
	return s.l.KeySet(withMain, name, suffixes...)
}

// MarkKey exposes the key of the fence mark of name's hash slot.
func (s *Store) MarkKey(name string) string { return s.l.Mark(name) }
