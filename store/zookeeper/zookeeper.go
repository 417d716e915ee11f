package zookeeper

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/go-zookeeper/zk"
)

var (
	_ store.Store        = (*Store)(nil)
	_ store.Inspector    = (*Store)(nil)
	_ store.Pinger       = (*Store)(nil)
	_ store.GrantWatcher = (*Store)(nil)
)

// Store is a [store.Store] on ZooKeeper. The zero value is not usable; call
// [New]. A Store is safe for concurrent use.
type Store struct {
	conn       *zk.Conn
	root       string
	askTimeout time.Duration
	acl        []zk.ACL
	takeOver   bool // WithTakeOver

	mu      sync.Mutex
	timeout time.Duration     // negotiated session timeout
	local   map[string]*local // nodes created through this store, by path
	dirs    map[string]bool   // kind directories known to exist
	closed  bool
	nets    map[*netConn]struct{} // the client's TCP connections
	kick    chan struct{}
	reaped  chan struct{} // a pass of the reaper ended (for Close)
	stop    chan struct{}
	wg      sync.WaitGroup // event pump, reaper, watchers
	// dead are the nodes deleted for a lapsed TTL, for deadFor: an
	// operation racing the deletion renews nothing.
	dead map[string]time.Time
	// floor is the clock floor of a new fence (wallFloor; tests pin it).
	floor func() int64
	// orphans are nodes this store released or let lapse whose delete
	// failed (the client cut off from the ensemble): the reaper retries
	// them (see remove).
	orphans map[string]bool
}

// handshakeTimeout bounds the wait for a server's answer to a new
// connection. go-zookeeper waits ten receive timeouts (4.4 minutes with a
// 40s session) for it, so a server that accepts a connection while it is
// not serving yet (during a restart) would stall the store that long.
const handshakeTimeout = 3 * time.Second

// netConn is a connection of the ZooKeeper client: its reads are bounded by
// handshakeTimeout until the server has answered, and Close of the store
// closes it, so no read of the client outlives the store.
type netConn struct {
	net.Conn
	s        *Store
	answered atomic.Bool
}

func (c *netConn) SetReadDeadline(t time.Time) error {
	if !c.answered.Load() {
		if lim := time.Now().Add(handshakeTimeout); t.IsZero() || t.After(lim) {
			t = lim
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *netConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.answered.Store(true)
	}
	return n, err
}

func (c *netConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.nets, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

func (s *Store) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	nc, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &netConn{Conn: nc, s: s}
	c.Conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		nc.Close()
		return nil, net.ErrClosed
	}
	s.nets[c] = struct{}{}
	return c, nil
}

// New connects to the ZooKeeper ensemble at servers (host:port) and returns
// once it has a session, or when ctx ends. Close ends the session, which
// deletes every node of the store at once, after the holds kept by their
// MinHold have ended (see [Store.Close]).
func New(ctx context.Context, servers []string, opts ...Option) (*Store, error) {
	if len(servers) == 0 {
		return nil, &store.InvalidError{Field: "zookeeper servers", Reason: "none given"}
	}
	s := &Store{
		root: DefaultRoot, askTimeout: DefaultSessionTimeout, acl: zk.WorldACL(zk.PermAll),
		local: map[string]*local{}, dead: map[string]time.Time{}, dirs: map[string]bool{}, nets: map[*netConn]struct{}{},
		kick: make(chan struct{}, 1), reaped: make(chan struct{}, 1), stop: make(chan struct{}), floor: wallFloor, orphans: map[string]bool{},
	}
	for _, o := range opts {
		o(s)
	}
	s.timeout = s.askTimeout
	conn, events, err := zk.Connect(servers, s.askTimeout, zk.WithLogger(sessionLogger{s}), zk.WithDialer(s.dial))
	if err != nil {
		return nil, storeErr("connect", err)
	}
	s.conn = conn
	ready := make(chan struct{})
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.pump(events, ready)
	}()
	go func() {
		defer s.wg.Done()
		s.reap()
	}()
	select {
	case <-ready:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, storeErr("connect", ctx.Err())
	}
}

// sessionLogger reads the session timeout the server granted from the
// client's log line (go-zookeeper keeps it unexported) and drops the rest.
type sessionLogger struct{ s *Store }

func (l sessionLogger) Printf(format string, args ...any) {
	if strings.HasPrefix(format, "authenticated:") && len(args) == 2 {
		if ms, ok := args[1].(int32); ok && ms > 0 {
			l.s.mu.Lock()
			l.s.timeout = time.Duration(ms) * time.Millisecond
			l.s.mu.Unlock()
		}
	}
}

// pump follows the session's events until the connection closes: a new
// session means the old one expired and every node of this store is gone.
func (s *Store) pump(events <-chan zk.Event, ready chan struct{}) {
	var once sync.Once
	for ev := range events {
		switch ev.State {
		case zk.StateHasSession:
			once.Do(func() { close(ready) })
		case zk.StateExpired:
			s.mu.Lock()
			clear(s.local)
			clear(s.orphans) // gone with the session
			s.mu.Unlock()
		}
	}
}

// Close ends the store's session (ZooKeeper deletes its nodes at once),
// stops its goroutines and waits for them. A hold released before grant +
// MinHold (through this Store, or through another without WithTakeOver)
// is kept by this Store's session until then, so Close first waits for
// the reaper to end every such hold at its time: up to the longest
// remaining MinHold among them (each capped at its MaxHold end). A hold
// not released is ended at once, as is every hold if the process dies
// (then with its session, after the session timeout).
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	s.waitKept()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	s.conn.Close()
	// Unblock the client's reads at once (it may be waiting for a server
	// that does not answer).
	s.mu.Lock()
	for c := range s.nets {
		c.Conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Conn returns the store's ZooKeeper connection.
func (s *Store) Conn() *zk.Conn { return s.conn }

// SessionTimeout returns the session timeout the server granted: the
// longest lease TTL the store accepts.
func (s *Store) SessionTimeout() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timeout
}

func storeErr(op string, err error) error { return &store.StoreError{Op: op, Node: -1, Err: err} }

// Ping implements [store.Pinger].
func (s *Store) Ping(ctx context.Context) error {
	if _, _, err := s.conn.Exists("/"); err != nil {
		return storeErr("ping", err)
	}
	return nil
}
