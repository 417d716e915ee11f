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

// WithTakeOver makes Extend, a repeated Acquire and an early Release
// (kept by MinHold) through this Store of a hold granted through another
// Store move the hold into this Store's session first, as [Store.Resume]
// always does: the hold then lives as long as this Store's session, its
// TTL and bounds kept by this process. For long-lived processes that
// share leases, such as replicas of `dlock serve`; not for short-lived ones
// (a CLI command), whose session, and with it the hold, ends when they
// exit. Default off: such a hold stays in its granting session (see the
// package doc).
func WithTakeOver() Option { return func(s *Store) { s.takeOver = true } }

// WithSessionTimeout sets the session timeout the store asks for. Default
// [DefaultSessionTimeout] (40s, ZooKeeper's default maximum). The server
// may grant less; a lease TTL must not exceed the granted timeout (see
// [Store]).
func WithSessionTimeout(d time.Duration) Option { return func(s *Store) { s.askTimeout = d } }
