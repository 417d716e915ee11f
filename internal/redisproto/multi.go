package redisproto

import (
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// The atomic multi-lock (store.MultiStore): the mutex keys of several names
// taken, extended and released by one script each. Every name keeps the
// mutex's keys (mutexKeys), so each is an ordinary mutex hold for every
// other client; the keys of all names must be on one node (on a cluster: in
// one hash slot, which names sharing a hash tag are).
var (
	MultiAcquireScript = withHold("scripts/multi_acquire.lua")
	MultiExtendScript  = withHold("scripts/multi_extend.lua")
	MultiReleaseScript = withHold("scripts/multi_release.lua")
)

// MultiKeys returns KEYS of the multi scripts: each name's main key, fence
// key, waiters, waiters flag, hold's record and slot's fence mark.
func (l *Layout) MultiKeys(names []string) []string {
	keys := make([]string, 0, 6*len(names))
	for _, n := range names {
		keys = append(append(keys, l.KeySet(true, n, "fence", "waiters", "waiters:flag", "hold")...), l.Mark(n))
	}
	return keys
}

// MultiReleaseKeys returns KEYS of MultiReleaseScript: MultiKeys.
func (l *Layout) MultiReleaseKeys(names []string) []string { return l.MultiKeys(names) }

// MultiArgs returns ARGV of the multi scripts: {token, fence retention ms,
// TTL ms of each request} (the release script reads the first two).
func (l *Layout) MultiArgs(reqs []store.Request) []string {
	args := make([]string, 0, 2+len(reqs))
	args = append(args, reqs[0].Token, l.Retention)
	for _, r := range reqs {
		args = append(args, Millis(r.TTL))
	}
	return args
}

// MultiAcquireArgs returns ARGV of MultiAcquireScript: MultiArgs, and with
// a record (the first request's: one holder takes every name), each TTL at
// most its max hold and the record after them.
func (l *Layout) MultiAcquireArgs(reqs []store.Request) []string {
	if !HasRecord(reqs[0]) {
		return l.MultiArgs(reqs)
	}
	capped := make([]store.Request, len(reqs))
	for i, r := range reqs {
		r.MaxHold = reqs[0].MaxHold
		r.TTL = acquireTTL(r)
		capped[i] = r
	}
	rec := reqs[0]
	rec.Mode = store.ModeMutex
	return recordArgs(l.MultiArgs(capped), rec)
}

// CheckMulti validates the requests of an atomic multi-lock operation:
// 1 to store.MaxMultiNames mutex requests on distinct valid names with one
// token (and, withTTL, positive TTLs). It returns their names.
func (l *Layout) CheckMulti(reqs []store.Request, withTTL bool) ([]string, error) {
	if len(reqs) == 0 || len(reqs) > store.MaxMultiNames {
		return nil, &store.InvalidError{Field: "names", Reason: "must hold 1-64 names"}
	}
	names := make([]string, len(reqs))
	seen := make(map[string]bool, len(reqs))
	for i, r := range reqs {
		if r.Mode != store.ModeMutex {
			return nil, fmt.Errorf("%w: multi-lock of mode %v", store.ErrNotSupported, r.Mode)
		}
		check := l.CheckToken
		if withTTL {
			check = l.CheckRequest
		}
		if err := check(r); err != nil {
			return nil, err
		}
		if r.Token != reqs[0].Token {
			return nil, &store.InvalidError{Field: "token", Reason: "must be the same for every name of a multi-lock"}
		}
		if seen[r.Name] {
			return nil, &store.InvalidError{Field: "names", Reason: fmt.Sprintf("%q appears twice", r.Name)}
		}
		seen[r.Name] = true
		names[i] = r.Name
	}
	return names, nil
}

// ParseMultiGrant decodes the reply of MultiAcquireScript for n names.
func ParseMultiGrant(v []int64, n int) (store.MultiGrant, error) {
	switch {
	case len(v) == n+1 && v[0] == 1:
		return store.MultiGrant{Acquired: true, Fences: v[1:]}, nil
	case len(v) == 4 && v[0] == 0 && v[1] >= 1 && v[1] <= int64(n):
		g := store.Grant{Held: store.Mode(v[3])}
		if v[2] > 0 {
			g.RetryAfter = time.Duration(v[2]) * time.Millisecond
		}
		return store.MultiGrant{Refused: int(v[1] - 1), Refusal: g}, nil
	}
	return store.MultiGrant{}, fmt.Errorf("dlock: multi-lock acquire script replied %v for %d names", v, n)
}

// ParseMultiHeld decodes the reply of MultiExtendScript or
// MultiReleaseScript for n names: nil or store.ErrNotHeld per name.
func ParseMultiHeld(v []int64, n int) ([]error, error) {
	if len(v) != n {
		return nil, fmt.Errorf("dlock: multi-lock script replied %v for %d names", v, n)
	}
	errs := make([]error, n)
	for i, r := range v {
		if r == 0 {
			errs[i] = store.ErrNotHeld
		}
	}
	return errs, nil
}

// SameSlot reports whether every key hashes to one Redis Cluster slot.
func SameSlot(keys []string) bool {
	for _, k := range keys[1:] {
		if Slot(k) != Slot(keys[0]) {
			return false
		}
	}
	return true
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key when it has none, modulo 16384.
func Slot(key string) uint16 {
	if tag, ok := HashTag(key); ok {
		key = tag
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
