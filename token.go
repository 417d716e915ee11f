package dlock

import (
	"crypto/rand"
	"encoding/hex"
)

// newToken returns 128 random bits as 32 hex characters.
func newToken() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand panics if the OS cannot supply)
	return hex.EncodeToString(b[:])
}
