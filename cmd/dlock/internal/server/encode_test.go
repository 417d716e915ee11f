package server

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// encodeStrings are the strings the hand-written encoders are checked on:
// every byte, escapes, HTML characters, invalid UTF-8, U+2028.
func encodeStrings() []string {
	ss := []string{"", "orders", "a/b:c", `q"uote`, `back\slash`, "<b>&amp;</b>", "tab\tnew\nline\r", "\x00\x1f\x7f",
		"é€😀", "\xff\xfe", "a\u2028b\u2029", "0123456789abcdef0123456789abcdef"}
	for c := range 256 {
		ss = append(ss, string([]byte{'x', byte(c), 'y'}))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		ss = append(ss, string(b))
	}
	return ss
}

func checkEncoding(t *testing.T, what string, v jsonBody) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.appendJSON(nil); string(got) != string(want) {
		t.Errorf("%s: appendJSON = %s, want %s", what, got, want)
	}
}

// TestAppendJSON: the hand-written encodings write what json.Marshal
// writes for the same values.
func TestAppendJSON(t *testing.T) {
	for i, s := range encodeStrings() {
		n := int64(i*7919 - 3000)
		checkEncoding(t, "grant", &grantBody{Name: s, Token: s, Fence: n, TTLMs: -n, Mode: s, Count: i - 10})
		checkEncoding(t, "release", &releaseBody{Name: s, Released: i%2 == 0})
		checkEncoding(t, "extend", &extendBody{Name: s, Fence: n * int64(i%2), TTLMs: n})
		checkEncoding(t, "event", &eventBody{Type: s, Name: s, Mode: s, Result: s[:len(s)*(i%2)], Fence: n * int64(i%3),
			DurationMs: n, Waited: i%4 == 0, Time: 1 << 40, Replica: s, By: s[:len(s)*(i%2)], Owners: []string{s, "", s}[:i%4]})
	}
	checkEncoding(t, "grant", &grantBody{Fence: 1<<63 - 1, TTLMs: -1 << 63})
}

// FuzzAppendString: any string is escaped as json.Marshal escapes it.
func FuzzAppendString(f *testing.F) {
	for _, s := range encodeStrings()[:20] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString([]byte("x"), s); string(got[1:]) != string(want) {
			t.Errorf("appendString(%q) = %s, want %s", s, got[1:], want)
		}
	})
}
