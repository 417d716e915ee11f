package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/store"
)

func TestParseMode(t *testing.T) {
	for m := store.ModeMutex; m <= store.ModeElection; m++ {
		if got, ok := store.ParseMode(m.String()); !ok || got != m {
			t.Errorf("ParseMode(%q) = %v, %v, want %v, true", m.String(), got, ok, m)
		}
	}
	if got, ok := store.ParseMode("unknown"); ok {
		t.Errorf("ParseMode(%q) = %v, true, want false", "unknown", got)
	}
}

func TestCoexist(t *testing.T) {
	for held := store.ModeMutex; held <= store.ModeElection; held++ {
		for asked := store.ModeMutex; asked <= store.ModeElection; asked++ {
			want := held == asked && (held == store.ModeRead || held == store.ModeSemaphore)
			if got := store.Coexist(held, asked); got != want {
				t.Errorf("Coexist(%v, %v) = %v, want %v", held, asked, got, want)
			}
		}
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"job", true},
		{"{tag}:a/b c", true},
		{"ünïcode", true},
		{strings.Repeat("x", 256), true},
		{"", false},
		{strings.Repeat("x", 257), false},
		{"bad\xff", false},
		{"tab\there", false},
		{"del\x7f", false},
		{"c1\u0085", false},
	}
	for _, tt := range tests {
		err := store.ValidName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidName(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
		var ie *store.InvalidError
		if err != nil && (!errors.As(err, &ie) || ie.Field != "name" || !errors.Is(err, store.ErrInvalid)) {
			t.Errorf("ValidName(%q) = %#v, want an *InvalidError for name wrapping ErrInvalid", tt.name, err)
		}
	}
}

func TestErrorsWrap(t *testing.T) {
	cause := errors.New("connection refused")
	tests := []struct {
		err  error
		want []error
	}{
		{&store.StoreError{Op: "acquire", Node: -1, Err: cause}, []error{store.ErrUnavailable, cause}},
		{&store.LimitError{Name: "s", Held: 2, Asked: 3}, []error{store.ErrInvalid}},
		{&store.InvalidError{Field: "ttl", Reason: "too short"}, []error{store.ErrInvalid}},
		{store.ErrNoQuorum, []error{store.ErrUnavailable}},
	}
	for _, tt := range tests {
		for _, w := range tt.want {
			if !errors.Is(tt.err, w) {
				t.Errorf("errors.Is(%v, %v) = false, want true", tt.err, w)
			}
		}
		if !strings.HasPrefix(tt.err.Error(), "dlock: ") {
			t.Errorf("%v: want the dlock: prefix", tt.err)
		}
	}
}
