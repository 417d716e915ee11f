package redisproto

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dlock-dev/dlock/store"
)

// allKeys returns every key (and handoff channel) of lock name in every
// mode, as the scripts get them, each once, the main key first.
func allKeys(l *Layout, name string) []string {
	var keys []string
	for _, f := range []func(*Layout, string) []string{mutexKeys, reentrantKeys, rwKeys, fairKeys, semaphoreKeys} {
		for _, k := range f(l, name) {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// fuzzPrefixes are the key prefixes the fuzz target picks from.
var fuzzPrefixes = []string{"lock:", "app/locks:", "x", "", "{locks}:"}

// clusterSlot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash
// tag (the bytes between the first "{" and the first "}" after it, when
// not empty) or of the whole key, modulo 16384. Written from the cluster
// spec, independently of the store's hashTag.
func clusterSlot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
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

func TestClusterSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	tests := []struct {
		key  string
		want uint16
	}{
		{"123456789", 12739}, // the spec's CRC16 check value 0x31C3
		{"foo", 12182},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", 8363}, // empty first tag: the whole key
		{"foo{{bar}}zap", 4015},
		{"foo{bar}{zap}", 5061}, // "bar"
	}
	for _, tt := range tests {
		if got := clusterSlot(tt.key); got != tt.want {
			t.Errorf("clusterSlot(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}

// FuzzKeys checks the key layout of two lock names: a name the store
// refuses is refused with a *store.InvalidError (never a panic); every key
// of an accepted name, in every mode, is in one cluster slot; and two
// different accepted names share no key but their slot's fence mark.
func FuzzKeys(f *testing.F) {
	long := strings.Repeat("n", 256)
	for _, seed := range [][2]string{
		{"x", "y"},
		{"x", "{lock:x}:fence"},
		{"{user:1}:job", "{user:1}:job:fence"},
		{"a{b}c", "{b}c"},
		{"}{x}", "{x}"},
		{"a{b}}c", "{x}{y}"},
		{"{}x", "{"},
		{long, long[:255] + "m"},
		{long + "x", "x"},
		{"\xff\xfe", "é"},
		{"a\x00b", "a\nb"},
		{"fair", "fair:queue"},
		{"x}:fence", "{x"},
		{"x", "{x}:fence"},
		{"x", "{locks}:x:fence"},
	} {
		for p := range len(fuzzPrefixes) {
			f.Add(uint8(p), seed[0], seed[1])
		}
	}
	f.Fuzz(func(t *testing.T, p uint8, a, b string) {
		prefix := fuzzPrefixes[int(p)%len(fuzzPrefixes)]
		ka := checkedKeys(t, prefix, a)
		kb := checkedKeys(t, prefix, b)
		if ka == nil || kb == nil || a == b {
			return
		}
		seen := make(map[string]bool, len(ka))
		for _, k := range ka {
			seen[k] = true
		}
		// Names of one slot share its fence mark, and only that.
		l := NewLayout(prefix, time.Hour)
		ma, mb := l.Mark(a), l.Mark(b)
		for _, k := range kb {
			if seen[k] && (k != ma || ma != mb) {
				t.Fatalf("prefix %q: names %q and %q share the key %q", prefix, a, b, k)
			}
		}
	})
}

// checkedKeys returns the keys of name, or nil when the store refuses it,
// checking the refusal and the slot of the keys.
func checkedKeys(t *testing.T, prefix, name string) []string {
	t.Helper()
	l := NewLayout(prefix, time.Hour)
	var keys []string
	err := l.CheckName(name)
	if err == nil {
		keys = allKeys(l, name)
	}
	if err != nil {
		var inv *store.InvalidError
		if !errors.As(err, &inv) || inv.Field != "name" {
			t.Fatalf("CheckName(%q, %q) = %#v, want a *store.InvalidError naming the name", prefix, name, err)
		}
		if store.ValidName(name) == nil && !strings.Contains(prefix+name, "}") {
			t.Fatalf("CheckName(%q, %q) = %v; the name is valid and its key has no \"}\"", prefix, name, err)
		}
		return nil
	}
	if store.ValidName(name) != nil {
		t.Fatalf("CheckName(%q, %q) accepted a name that store.ValidName refuses", prefix, name)
	}
	if !utf8.ValidString(name) || len(name) == 0 || len(name) > 256 {
		t.Fatalf("CheckName(%q, %q) accepted an invalid name", prefix, name)
	}
	if len(keys) < 20 || keys[0] != prefix+name {
		t.Fatalf("keys of %q (prefix %q) = %q; want the main key %q first and every auxiliary key", name, prefix, keys, prefix+name)
	}
	slot := clusterSlot(keys[0])
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if s := clusterSlot(k); s != slot {
			t.Fatalf("name %q (prefix %q): key %q is in slot %d, the main key %q in %d", name, prefix, k, s, keys[0], slot)
		}
		seen[k] = true
	}
	return keys
}
