package valkey_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

func TestAuxKeys(t *testing.T) {
	srv := testredis.Start(t)
	tests := []struct {
		prefix, name, want string
	}{
		{"lock:", "x", "{lock:x}:fence"},
		{"lock:", "{user:1}:job", "{user:1}:lock:{user:1}:job:fence"},
		{"{locks}:", "x", "{locks}:{locks}:x:fence"},
		{"", "x", "{x}:fence"},
	}
	for _, tt := range tests {
		s := dial(t, srv.URL(), valkey.WithPrefix(tt.prefix))
		if got := s.AuxKey(tt.name, "fence"); got != tt.want {
			t.Errorf("prefix %q: AuxKey(%q, fence) = %q, want %q", tt.prefix, tt.name, got, tt.want)
		}
	}
}

// TestKeySet: the keys built in one string are the main key and the
// auxiliary keys, each exactly as on its own.
func TestKeySet(t *testing.T) {
	srv := testredis.Start(t)
	tests := []struct {
		prefix, name string
		want         []string
	}{
		{"lock:", "x", []string{"lock:x", "{lock:x}:fence", "{lock:x}:waiters"}},
		{"lock:", "{user:1}:job", []string{"lock:{user:1}:job", "{user:1}:lock:{user:1}:job:fence", "{user:1}:lock:{user:1}:job:waiters"}},
		{"", "é", []string{"é", "{é}:fence", "{é}:waiters"}},
	}
	for _, tt := range tests {
		s := dial(t, srv.URL(), valkey.WithPrefix(tt.prefix))
		if got := s.KeySet(true, tt.name, "fence", "waiters"); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("prefix %q: KeySet(true, %q) = %q, want %q", tt.prefix, tt.name, got, tt.want)
		}
		if got := s.KeySet(false, tt.name, "fence", "waiters"); !reflect.DeepEqual(got, tt.want[1:]) {
			t.Errorf("prefix %q: KeySet(false, %q) = %q, want %q", tt.prefix, tt.name, got, tt.want[1:])
		}
		if got := s.KeySet(true, tt.name); !reflect.DeepEqual(got, tt.want[:1]) {
			t.Errorf("prefix %q: KeySet(true, %q) with no suffix = %q, want %q", tt.prefix, tt.name, got, tt.want[:1])
		}
	}
}

// TestKeysShareSlot checks with the server's own hash that a lock's
// auxiliary keys live in its main key's slot.
func TestKeysShareSlot(t *testing.T) {
	c := testredis.StartCluster(t, 1)
	node := c.Nodes()[0]
	s := dial(t, node.URL())
	for _, name := range []string{"x", "orders/42", "{user:1}:job", "a{b}c", "}{x}", "a{b}}c", "{x}{y}"} {
		main := "lock:" + name
		aux := s.AuxKey(name, "fence")
		if m, a := mustDo(t, node, "CLUSTER", "KEYSLOT", main), mustDo(t, node, "CLUSTER", "KEYSLOT", aux); m != a {
			t.Errorf("CLUSTER KEYSLOT %q = %s, of %q = %s; want equal", main, m, aux, a)
		}
	}
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		url   string
		addrs []string
		user  string
		pass  string
		tls   bool
	}{
		{"redis://127.0.0.1:6380", []string{"127.0.0.1:6380"}, "", "", false},
		{"valkey://h", []string{"h:6379"}, "", "", false},
		{"rediss://u:p@h:7000/0", []string{"h:7000"}, "u", "p", true},
		{"redis://:pw@h1:7000,h2:7001,h3", []string{"h1:7000", "h2:7001", "h3:6379"}, "", "pw", false},
		{"redis://h1:7000,redis://h2:7001", []string{"h1:7000", "h2:7001"}, "", "", false},
		{"rediss://u:p@h1:1,h2:2/0?dial_timeout=1s", []string{"h1:1", "h2:2"}, "u", "p", true},
	}
	for _, tt := range tests {
		o, err := valkey.ParseURL(tt.url)
		if err != nil {
			t.Errorf("parseURL(%q) = %v", tt.url, err)
			continue
		}
		if !reflect.DeepEqual(o.InitAddress, tt.addrs) || o.Username != tt.user || o.Password != tt.pass || (o.TLSConfig != nil) != tt.tls {
			t.Errorf("parseURL(%q) = addrs %v user %q password %q TLS %v; want %v %q %q %v",
				tt.url, o.InitAddress, o.Username, o.Password, o.TLSConfig != nil, tt.addrs, tt.user, tt.pass, tt.tls)
		}
	}
	for _, bad := range []string{"http://h", "redis://h1,,h2", "redis://h/1/2"} {
		if _, err := valkey.ParseURL(bad); err == nil {
			t.Errorf("parseURL(%q) = nil error, want an error", bad)
		}
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []valkey.Option{valkey.WithWaitReplicas(0, 1), valkey.WithWaitReplicas(1, 0), valkey.WithLogger(nil)} {
		if _, err := valkey.Dial(prototest.Context(t), "redis://127.0.0.1:1", o); err == nil || !strings.Contains(err.Error(), "dlock: invalid") {
			t.Errorf("Dial with a bad option = %v, want an invalid-argument error", err)
		}
	}
	if _, err := valkey.New(nil); err == nil {
		t.Error("New(nil) = nil error, want an invalid-argument error")
	}
}

// TestBraceNames: a name whose key has a "}" but no hash tag is refused, as
// no auxiliary key could share its slot.
func TestBraceNames(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	for _, name := range []string{"a}b", "{}x", "}{x"} {
		req := store.Request{Name: name, Token: "t", TTL: time.Second, Mode: store.ModeMutex}
		if g, err := s.Acquire(ctx, req); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Acquire(%q) = %+v, %v; want ErrInvalid", name, g, err)
		}
	}
}
