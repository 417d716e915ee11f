package redisproto

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

func TestMark(t *testing.T) {
	for _, prefix := range []string{"lock:", "", "{locks}:", "a{b:", "{x"} {
		l := NewLayout(prefix, time.Hour)
		marks := map[string]uint16{}
		for i := range 3000 {
			name := "n" + strconv.Itoa(i)
			if i%3 == 0 {
				name = "{user:" + strconv.Itoa(i%7) + "}:job"
			}
			m := l.Mark(name)
			if Slot(m) != Slot(l.Key(name)) {
				t.Fatalf("prefix %q: Mark(%q) = %q in slot %d, want the slot of %q, %d", prefix, name, m, Slot(m), l.Key(name), Slot(l.Key(name)))
			}
			if s, ok := marks[m]; ok && s != Slot(m) {
				t.Fatalf("prefix %q: mark %q shared by slots %d and %d", prefix, m, s, Slot(m))
			}
			marks[m] = Slot(m)
			// No lock name's main key is a mark.
			if name, ok := strings.CutPrefix(m, prefix); ok && l.CheckName(name) == nil {
				t.Fatalf("prefix %q: mark %q is the main key of the valid name %q", prefix, m, name)
			}
		}
		// One mark per slot: no more marks than slots the names fall in.
		slots := map[uint16]bool{}
		for _, s := range marks {
			slots[s] = true
		}
		if len(marks) != len(slots) {
			t.Errorf("prefix %q: %d marks for %d slots, want one per slot", prefix, len(marks), len(slots))
		}
	}
	if got, want := NewLayout("lock:", time.Hour).Mark("x"), "{"+strconv.FormatUint(uint64(slotTag(Slot("lock:x"))), 10)+"}:fence-mark"; got != want {
		t.Errorf("Mark(x) = %q, want %q", got, want)
	}
	for s := range uint16(16384) {
		if got := Slot(strconv.FormatUint(uint64(slotTag(s)), 10)); got != s {
			t.Fatalf("slotTag(%d) hashes to slot %d", s, got)
		}
	}
}

// TestMarkBySlotAlone: two prefixes that reach one main key are one lock
// (one fence key) and share one mark, and every prefix's names of a slot
// share the slot's one mark. On 636d7c8 the mark carried the prefix: prefix
// "lock:" with name "app:x" and prefix "lock:app:" with name "x" had two
// marks, and after a clock step back that lock's fences went down.
func TestMarkBySlotAlone(t *testing.T) {
	a, b := NewLayout("lock:", time.Hour), NewLayout("lock:app:", time.Hour)
	if a.Aux("app:x", "fence") != b.Aux("x", "fence") {
		t.Fatalf("fence keys %q and %q differ", a.Aux("app:x", "fence"), b.Aux("x", "fence"))
	}
	if ma, mb := a.Mark("app:x"), b.Mark("x"); ma != mb {
		t.Errorf("Mark(app:x) under prefix lock: = %q, Mark(x) under prefix lock:app: = %q, want one mark", ma, mb)
	}
	for _, prefix := range []string{"", "{", "{1", "x"} {
		l := NewLayout(prefix, time.Hour)
		m := NewLayout("lock:", time.Hour).Mark("x")
		if name, ok := strings.CutPrefix(m, prefix); ok && l.CheckName(name) == nil {
			t.Errorf("prefix %q: name %q is valid, and its key is the mark %q", prefix, name, m)
		}
	}
}

// TestCheckTokenRefusesMarkers: every request's token is checked (acquire,
// extend, release, fence raise) and one shaped like a marker the scripts
// keep in a main key is refused, naming the field.
func TestCheckTokenRefusesMarkers(t *testing.T) {
	l := NewLayout("lock:", time.Hour)
	for _, tok := range []string{"dlock:", "dlock:read", "dlock:write", "dlock:reentrant", "dlock:fair", "dlock:election", "dlock:semaphore:3"} {
		req := store.Request{Name: "a", Token: tok, TTL: time.Second}
		for _, check := range []func(store.Request) error{l.CheckToken, l.CheckRequest} {
			var inv *store.InvalidError
			if err := check(req); !errors.As(err, &inv) || inv.Field != "token" {
				t.Errorf("check of token %q = %v, want an *InvalidError naming token", tok, err)
			}
		}
	}
	for _, tok := range []string{"DLOCK:read", "xdlock:read", "dlock", "0123456789abcdef"} {
		if err := l.CheckRequest(store.Request{Name: "a", Token: tok, TTL: time.Second}); err != nil {
			t.Errorf("CheckRequest with token %q = %v, want nil", tok, err)
		}
	}
}
