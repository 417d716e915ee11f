package dlock

import (
	"crypto/rand"
	"encoding/hex"
	"unicode/utf8"
)

// newToken returns 128 random bits as 32 hex characters.
func newToken() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand panics if the OS cannot supply)
	return hex.EncodeToString(b[:])
}

// ValidName reports whether name is a valid lock name: 1-256 bytes of
// valid UTF-8 without control characters.
func ValidName(name string) error {
	if name == "" || len(name) > 256 {
		return invalid("name", "must be 1-256 bytes")
	}
	if !utf8.ValidString(name) {
		return invalid("name", "must be valid UTF-8")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return invalid("name", "must not contain control characters")
		}
	}
	return nil
}
