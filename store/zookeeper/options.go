package zookeeper

import (
	"strings"
	"time"
)

// Defaults of a Store.
const (
	DefaultRoot           = "/dlock"
	DefaultSessionTimeout = 40 * time.Second
)

// An Option configures a [Store].
type Option func(*Store)

// WithRoot sets the znode under which the store keeps its locks. Default
// [DefaultRoot] ("/dlock").
func WithRoot(path string) Option { return func(s *Store) { s.root = strings.TrimRight(path, "/") } }

// WithSessionTimeout sets the session timeout the store asks for. Default
// [DefaultSessionTimeout] (40s, ZooKeeper's default maximum). The server
// may grant less; a lease TTL must not exceed the granted timeout (see
// [Store]).
func WithSessionTimeout(d time.Duration) Option { return func(s *Store) { s.askTimeout = d } }
