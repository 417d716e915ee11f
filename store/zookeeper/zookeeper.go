package zookeeper

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/go-zookeeper/zk"
)

var (
	_ dlock.Store        = (*Store)(nil)
	_ dlock.Inspector    = (*Store)(nil)
	_ dlock.Pinger       = (*Store)(nil)
	_ dlock.GrantWatcher = (*Store)(nil)
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

// Store is a [dlock.Store] on ZooKeeper. The zero value is not usable; call
// [New]. A Store is safe for concurrent use.
type Store struct {
	conn       *zk.Conn
	root       string
	askTimeout time.Duration
	acl        []zk.ACL

	mu      sync.Mutex
	timeout time.Duration     // negotiated session timeout
	local   map[string]*local // nodes created through this store, by path
	dirs    map[string]bool   // kind directories known to exist
	closed  bool
	nets    map[*netConn]struct{} // the client's TCP connections
	kick    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup // event pump, reaper, watchers
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

// local is a node created through this store: its TTL deadline on this
// process's monotonic clock, and its fence once known.
type local struct {
	deadline time.Time
	czxid    int64
}

// New connects to the ZooKeeper ensemble at servers (host:port) and returns
// once it has a session, or when ctx ends. Close ends the session, which
// deletes every node of the store at once.
func New(ctx context.Context, servers []string, opts ...Option) (*Store, error) {
	if len(servers) == 0 {
		return nil, &dlock.InvalidError{Field: "zookeeper servers", Reason: "none given"}
	}
	s := &Store{
		root: DefaultRoot, askTimeout: DefaultSessionTimeout, acl: zk.WorldACL(zk.PermAll),
		local: map[string]*local{}, dirs: map[string]bool{}, nets: map[*netConn]struct{}{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
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
			s.mu.Unlock()
		}
	}
}

// Close ends the store's session (ZooKeeper deletes its nodes at once),
// stops its goroutines and waits for them.
func (s *Store) Close() error {
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

func storeErr(op string, err error) error { return &dlock.StoreError{Op: op, Node: -1, Err: err} }

func kindOf(m dlock.Mode) (string, error) {
	switch m {
	case dlock.ModeMutex:
		return "m", nil
	case dlock.ModeReentrant:
		return "r", nil
	case dlock.ModeRead, dlock.ModeWrite:
		return "w", nil
	case dlock.ModeFair:
		return "f", nil
	case dlock.ModeSemaphore:
		return "s", nil
	}
	return "", fmt.Errorf("%w: zookeeper store mode %v", dlock.ErrNotSupported, m)
}

var kindMode = map[string]dlock.Mode{"m": dlock.ModeMutex, "r": dlock.ModeReentrant, "w": dlock.ModeRead, "f": dlock.ModeFair, "s": dlock.ModeSemaphore}

var b64 = base64.RawURLEncoding

// namesDir is the parent of every lock's znode.
const namesDir = "x"

// dir is the znode of one lock name, whatever its kind (a name is one lock:
// the nodes of every kind queue under it): <root>/x/n<base64url(name)>.
func (s *Store) dir(_, name string) string {
	return s.root + "/" + namesDir + "/n" + b64.EncodeToString([]byte(name))
}

// nodePrefix is the name of a holder or waiter node before ZooKeeper's
// sequence suffix: <k><m>~<owner>~<token>-, k being the kind letter, m r
// (reader), w (writer) or x, owner and token base64url-encoded.
func nodePrefix(req dlock.Request) string {
	k, _ := kindOf(req.Mode)
	m := "x"
	switch req.Mode {
	case dlock.ModeRead:
		m = "r"
	case dlock.ModeWrite:
		m = "w"
	}
	return k + m + "~" + b64.EncodeToString([]byte(req.Owner)) + "~" + b64.EncodeToString([]byte(req.Token)) + "-"
}

type entry struct {
	name  string
	kind  byte // m, r, w, f or s
	mode  byte // r, w or x
	owner string
	token string
	seq   int64
}

// heldMode is the dlock.Mode of node e's hold.
func (e entry) heldMode() dlock.Mode {
	if e.mode == 'w' {
		return dlock.ModeWrite
	}
	return kindMode[string(e.kind)]
}

// parse reads a child name; ok is false for names that are not ours.
func parse(name string) (entry, bool) {
	if len(name) < 14 || name[len(name)-11] != '-' {
		return entry{}, false
	}
	seq, err := strconv.ParseInt(name[len(name)-10:], 10, 64)
	if err != nil {
		return entry{}, false
	}
	parts := strings.SplitN(name[:len(name)-11], "~", 3)
	if len(parts) != 3 || len(parts[0]) != 2 {
		return entry{}, false
	}
	owner, err1 := b64.DecodeString(parts[1])
	token, err2 := b64.DecodeString(parts[2])
	if err1 != nil || err2 != nil {
		return entry{}, false
	}
	return entry{name: name, kind: parts[0][0], mode: parts[0][1], owner: string(owner), token: string(token), seq: seq}, true
}

// list returns the lock's live nodes in sequence order (empty when the
// lock's znode does not exist). Nodes of this store whose TTL passed are
// deleted on the way, as every operation on a lock prunes it, without
// waiting for the reaper.
func (s *Store) list(dir string) ([]entry, error) {
	es, err := s.listAll(dir)
	if err != nil {
		return nil, err
	}
	kept := es[:0]
	for _, e := range es {
		if !s.lapsed(dir + "/" + e.name) {
			kept = append(kept, e)
		}
	}
	return kept, nil
}

func (s *Store) listAll(dir string) ([]entry, error) {
	names, _, err := s.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	es := make([]entry, 0, len(names))
	for _, n := range names {
		if e, ok := parse(n); ok {
			es = append(es, e)
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
	return es, nil
}

func find(es []entry, token string) int {
	for i, e := range es {
		if e.token == token {
			return i
		}
	}
	return -1
}

// holds reports whether node i holds the lock. A name is one lock: a node
// with a node of another kind ahead of it does not; otherwise the rules of
// its kind decide: the first node (mutex, fair, writer), the first limit
// nodes (semaphore), the nodes of the first node's owner (reentrant), a
// reader with no writer ahead other than the writer whose token is its
// owner (a downgrade).
func holds(_ string, es []entry, i, limit int) bool {
	e := es[i]
	for _, p := range es[:i] {
		if p.kind != e.kind {
			return false
		}
	}
	switch string(e.kind) {
	case "r":
		return es[0].owner == e.owner
	case "s":
		return i < max(limit, 1)
	case "w":
		if e.mode == 'w' {
			return i == 0
		}
		for _, p := range es[:i] {
			if p.mode == 'w' && p.token != e.owner {
				return false
			}
		}
		return true
	}
	return i == 0
}

// nodeData is the data of a node: what a refused caller needs to know.
type nodeData struct {
	TTL   int64 `json:"t"` // ms
	Limit int   `json:"l,omitempty"`
}

func validate(req dlock.Request, timeout time.Duration) error {
	if err := dlock.ValidName(req.Name); err != nil {
		return err
	}
	if req.Token == "" {
		return &dlock.InvalidError{Field: "token", Reason: "must not be empty"}
	}
	if req.TTL <= 0 {
		return &dlock.InvalidError{Field: "ttl", Reason: "must be positive"}
	}
	if req.TTL > timeout {
		return &dlock.InvalidError{Field: "ttl", Reason: fmt.Sprintf("longer than the ZooKeeper session timeout (%v): the server could end the hold before the lease runs out", timeout)}
	}
	if req.Mode == dlock.ModeSemaphore && req.Limit < 1 {
		return &dlock.InvalidError{Field: "limit", Reason: "must be at least 1"}
	}
	return nil
}

// ensure creates the lock's znode (a container, which ZooKeeper deletes
// once it is empty) and its parents.
func (s *Store) ensure(kind, dir string) error {
	s.mu.Lock()
	known := s.dirs[kind]
	s.mu.Unlock()
	if !known {
		for _, p := range []string{s.root, s.root + "/" + namesDir} {
			if _, err := s.conn.Create(p, nil, 0, s.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
		s.mu.Lock()
		s.dirs[kind] = true
		s.mu.Unlock()
	}
	if _, err := s.conn.CreateContainer(dir, nil, zk.FlagContainer, s.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return nil
}

// Acquire implements [dlock.Store] with the ephemeral-sequential recipe:
// the caller's node is created under the lock's znode, the children are
// listed, and the node holds when the rules of the mode say so (the first
// node for an exclusive lock). A node that does not hold is deleted again,
// unless the caller queues (fair waiter, writer intent). The fence is the
// node's czxid.
func (s *Store) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, error) {
	kind, err := kindOf(req.Mode)
	if err != nil {
		return dlock.Grant{}, err
	}
	if err := validate(req, s.SessionTimeout()); err != nil {
		return dlock.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return dlock.Grant{}, storeErr("acquire", err)
	}
	if kind == "r" && req.Owner == "" {
		req.Owner = req.Token
	}
	g, err := s.acquire(kind, req)
	if err != nil && !errors.Is(err, dlock.ErrUpgrade) && !errors.Is(err, dlock.ErrInvalid) {
		return dlock.Grant{}, storeErr("acquire", err)
	}
	return g, err
}

func (s *Store) acquire(kind string, req dlock.Request) (dlock.Grant, error) {
	dir := s.dir(kind, req.Name)
	es, err := s.list(dir)
	if err != nil {
		return dlock.Grant{}, err
	}
	queueable := req.Queue && (kind == "f" || req.Mode == dlock.ModeWrite)
	qttl := req.QueueTTL
	if qttl <= 0 {
		qttl = req.TTL
	}
	if i := find(es, req.Token); i >= 0 {
		path := dir + "/" + es[i].name
		if s.lapsed(path) {
			return s.refusal(kind, dir, es, -1, req.Limit), nil
		}
		if !holds(kind, es, i, req.Limit) {
			s.track(path, qttl, 0)
			return s.refusal(kind, dir, es, i, req.Limit), nil
		}
		return s.grant(kind, req, dir, path, es, i)
	}
	if req.Mode == dlock.ModeWrite && req.Owner != "" {
		for i, e := range es {
			if e.token == req.Owner && e.mode == 'r' && holds(kind, es, i, 0) {
				return dlock.Grant{}, dlock.ErrUpgrade
			}
		}
	}
	// Would a node appended now hold? If not and the caller does not queue,
	// refuse without writing.
	me := entry{kind: kind[0], mode: nodePrefix(req)[1], owner: req.Owner, token: req.Token, seq: 1 << 62}
	if kind == "s" && len(es) > 0 && es[0].kind == 's' {
		if held := s.limitOf(dir, es[0]); held != 0 && held != req.Limit {
			return dlock.Grant{}, &dlock.LimitError{Name: req.Name, Held: held, Asked: req.Limit}
		}
	}
	if !holds(kind, append(es[:len(es):len(es)], me), len(es), req.Limit) && !queueable {
		return s.refusal(kind, dir, es, -1, req.Limit), nil
	}
	data, _ := json.Marshal(nodeData{TTL: req.TTL.Milliseconds(), Limit: req.Limit})
	path, err := s.conn.Create(dir+"/"+nodePrefix(req), data, zk.FlagEphemeralSequential, s.acl)
	if errors.Is(err, zk.ErrNoNode) {
		if err = s.ensure(kind, dir); err == nil {
			path, err = s.conn.Create(dir+"/"+nodePrefix(req), data, zk.FlagEphemeralSequential, s.acl)
		}
	}
	if err != nil {
		return dlock.Grant{}, err
	}
	if es, err = s.list(dir); err != nil {
		s.conn.Delete(path, -1)
		return dlock.Grant{}, err
	}
	i := find(es, req.Token)
	if i < 0 {
		return dlock.Grant{}, errors.New("own node vanished")
	}
	if holds(kind, es, i, req.Limit) {
		return s.grant(kind, req, dir, path, es, i)
	}
	if queueable {
		s.track(path, qttl, 0)
		return s.refusal(kind, dir, es, i, req.Limit), nil
	}
	if err := s.conn.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return dlock.Grant{}, err
	}
	es = append(es[:i], es[i+1:]...)
	return s.refusal(kind, dir, es, -1, req.Limit), nil
}

// grant reports node i (path) as held by req, starting its TTL.
func (s *Store) grant(kind string, req dlock.Request, dir, path string, es []entry, i int) (dlock.Grant, error) {
	fence, err := s.fenceOf(kind, req.Mode, dir, path, es, i)
	if err != nil {
		return dlock.Grant{}, err
	}
	s.track(path, req.TTL, fence)
	count := 1
	if kind == "r" {
		count = 0
		for _, e := range es {
			if e.owner == req.Owner {
				count++
			}
		}
		// One hold, one expiry: every acquisition's TTL is pushed out.
		for _, e := range es {
			if e.owner == req.Owner {
				s.push(dir+"/"+e.name, req.TTL)
			}
		}
	}
	return dlock.Grant{Acquired: true, Fence: fence, Count: count}, nil
}

// fenceOf returns the fence of held node i: its czxid; for a re-entry the
// first acquisition's; for a reader the last writer's (recorded in the
// lock's znode data), or its own when there has been no writer.
func (s *Store) fenceOf(kind string, mode dlock.Mode, dir, path string, es []entry, i int) (int64, error) {
	if f := s.cached(path); f != 0 {
		return f, nil
	}
	if kind == "r" {
		path = dir + "/" + es[0].name
	}
	if mode == dlock.ModeRead {
		b, _, err := s.conn.Get(dir)
		if err != nil {
			return 0, err
		}
		if f, err := strconv.ParseInt(string(b), 10, 64); err == nil && f > 0 {
			return f, nil
		}
	}
	ok, st, err := s.conn.Exists(path)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errors.New("node vanished")
	}
	if mode != dlock.ModeRead {
		// Readers after this grant, of any kind, get its fence.
		if _, err := s.conn.Set(dir, []byte(strconv.FormatInt(st.Czxid, 10)), -1); err != nil {
			return 0, err
		}
	}
	return st.Czxid, nil
}

// limitOf is the limit semaphore node e was granted with (0: unknown).
func (s *Store) limitOf(dir string, e entry) int {
	b, _, err := s.conn.Get(dir + "/" + e.name)
	if err != nil {
		return 0
	}
	var d nodeData
	if json.Unmarshal(b, &d) != nil {
		return 0
	}
	return d.Limit
}

// refusal describes a refused Acquire. RetryAfter is the time left of the
// first holder: exact for a hold of this store, else the TTL it asked for
// (an upper bound). Position is the caller's place among the waiters (i its
// index, or -1: their number).
func (s *Store) refusal(kind, dir string, es []entry, i, limit int) dlock.Grant {
	g := dlock.Grant{Held: kindMode[kind]}
	if len(es) > 0 {
		g.Held = es[0].heldMode() // the first node always holds
	}
	for j := range es {
		if holds(kind, es, j, limit) {
			continue
		}
		if i < 0 || j < i {
			g.Position++
		}
	}
	for j, e := range es {
		if !holds(kind, es, j, limit) {
			continue
		}
		path := dir + "/" + e.name
		g.RetryAfter = time.Millisecond // a holder about to go
		if r, ok := s.remaining(path); ok {
			g.RetryAfter = r
		} else if b, _, err := s.conn.Get(path); err == nil {
			var d nodeData
			if json.Unmarshal(b, &d) == nil {
				g.RetryAfter = time.Duration(d.TTL) * time.Millisecond
			}
		}
		break
	}
	return g
}

// Extend implements [dlock.Store]: it lists each lock's nodes once (the
// lists are fetched concurrently, pipelined on the session) and renews the
// TTL of every request whose node still holds. A node gone with an expired
// session, or a queue place, reports [dlock.ErrNotHeld]; so does a hold of
// this store whose TTL passed.
func (s *Store) Extend(ctx context.Context, reqs []dlock.Request) []error {
	errs := make([]error, len(reqs))
	type job struct {
		dir  string
		es   []entry
		err  error
		done chan struct{}
	}
	jobs := map[string]*job{}
	for _, req := range reqs {
		kind, err := kindOf(req.Mode)
		if err != nil {
			continue
		}
		d := s.dir(kind, req.Name)
		if jobs[d] == nil {
			j := &job{dir: d, done: make(chan struct{})}
			jobs[d] = j
			go func() {
				defer close(j.done)
				j.es, j.err = s.list(j.dir)
			}()
		}
	}
	for _, j := range jobs {
		<-j.done
	}
	for i, req := range reqs {
		kind, err := kindOf(req.Mode)
		if err == nil {
			err = validate(req, s.SessionTimeout())
		}
		if err != nil {
			errs[i] = err
			continue
		}
		j := jobs[s.dir(kind, req.Name)]
		if j.err != nil {
			errs[i] = storeErr("extend", j.err)
			continue
		}
		k := find(j.es, req.Token)
		if k < 0 {
			errs[i] = dlock.ErrNotHeld
			continue
		}
		path := j.dir + "/" + j.es[k].name
		if s.lapsed(path) || !holds(kind, j.es, k, req.Limit) {
			errs[i] = dlock.ErrNotHeld
			continue
		}
		if kind == "r" {
			for _, e := range j.es {
				if e.owner == j.es[k].owner {
					s.push(j.dir+"/"+e.name, req.TTL)
				}
			}
		} else {
			s.push(path, req.TTL)
		}
	}
	return errs
}

// Release implements [dlock.Store]: it deletes the token's node. The next
// node's watcher (the fair queue's head, or a waiter's Watch) wakes and
// holds by the recipe's rule.
func (s *Store) Release(ctx context.Context, req dlock.Request) error {
	kind, err := kindOf(req.Mode)
	if err != nil {
		return err
	}
	dir := s.dir(kind, req.Name)
	es, err := s.list(dir)
	if err != nil {
		return storeErr("release", err)
	}
	i := find(es, req.Token)
	if i < 0 {
		return dlock.ErrNotHeld
	}
	path := dir + "/" + es[i].name
	if s.lapsed(path) {
		return dlock.ErrNotHeld
	}
	s.untrack(path)
	if err := s.conn.Delete(path, -1); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return dlock.ErrNotHeld
		}
		return storeErr("release", err)
	}
	return nil
}

// Watch implements [dlock.Store]: a ZooKeeper child watch on the lock's
// znode, set again after each event, wakes the caller when a node goes
// (release, reaped TTL or expired session). The fair lock's waiters use
// [Store.WatchGrant] instead, which watches only their predecessor.
func (s *Store) Watch(ctx context.Context, name string, mode dlock.Mode) (<-chan struct{}, func(), error) {
	kind, err := kindOf(mode)
	if err != nil {
		return nil, nil, err
	}
	dir := s.dir(kind, name)
	if err := s.ensure(kind, dir); err != nil {
		return nil, nil, storeErr("watch", err)
	}
	_, _, evc, err := s.conn.ChildrenW(dir)
	if err != nil {
		return nil, nil, storeErr("watch", err)
	}
	ch := make(chan struct{}, 1)
	return s.spawn(func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			case <-evc:
			}
			select {
			case ch <- struct{}{}:
			default:
			}
			for {
				if _, _, evc, err = s.conn.ChildrenW(dir); err == nil {
					break
				}
				if errors.Is(err, zk.ErrNoNode) {
					var ok bool
					if ok, _, evc, err = s.conn.ExistsW(dir); err == nil || ok {
						break
					}
				}
				if !sleep(stop, 100*time.Millisecond) {
					return
				}
			}
		}
	}, ch)
}

// spawn runs fn in a goroutine owned by the store; the returned stop ends
// it and waits.
func (s *Store) spawn(fn func(stop <-chan struct{}), ch chan struct{}) (<-chan struct{}, func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, storeErr("watch", errors.New("store closed"))
	}
	s.wg.Add(1)
	s.mu.Unlock()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer s.wg.Done()
		defer close(done)
		merged := make(chan struct{})
		fnDone := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			select {
			case <-stop:
			case <-s.stop:
			case <-fnDone:
			}
			close(merged)
		})
		fn(merged)
		close(fnDone)
		wg.Wait()
	}()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			close(stop)
			<-done
		})
	}, nil
}

func sleep(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// WatchGrant implements [dlock.GrantWatcher] for the fair lock with the
// recipe of seeds 001 and 002: the waiter watches only the node just
// before its own (one release wakes one waiter, no herd), looks again when
// it goes, and delivers the grant once its node is the first.
func (s *Store) WatchGrant(ctx context.Context, req dlock.Request) (<-chan dlock.Grant, func(), error) {
	if req.Mode != dlock.ModeFair {
		return nil, nil, fmt.Errorf("%w: zookeeper store grant watch for mode %v", dlock.ErrNotSupported, req.Mode)
	}
	gch := make(chan dlock.Grant, 1)
	dir := s.dir("f", req.Name)
	_, stop, err := s.spawn(func(stop <-chan struct{}) {
		for {
			names, _, evc, err := s.conn.ChildrenW(dir)
			if errors.Is(err, zk.ErrNoNode) {
				var ok bool
				ok, _, evc, err = s.conn.ExistsW(dir)
				if err == nil && ok {
					continue
				}
			}
			if err != nil {
				if !sleep(stop, 100*time.Millisecond) {
					return
				}
				continue
			}
			var es []entry
			for _, n := range names {
				if e, ok := parse(n); ok {
					es = append(es, e)
				}
			}
			sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
			i := find(es, req.Token)
			if i == 0 {
				g, err := s.grant("f", req, dir, dir+"/"+es[0].name, es, 0)
				if err == nil {
					gch <- g
					return
				}
			} else if i > 0 {
				// Watch the predecessor only.
				ok, _, pev, err := s.conn.ExistsW(dir + "/" + es[i-1].name)
				if err == nil && !ok {
					continue
				}
				if err == nil {
					evc = pev
				}
			}
			select {
			case <-stop:
				return
			case <-evc:
			}
		}
	}, nil)
	if err != nil {
		return nil, nil, err
	}
	return gch, stop, nil
}

// Ping implements [dlock.Pinger].
func (s *Store) Ping(ctx context.Context) error {
	if _, _, err := s.conn.Exists("/"); err != nil {
		return storeErr("ping", err)
	}
	return nil
}

func (s *Store) state(kind, name string, es []entry) dlock.State {
	dir := s.dir(kind, name)
	st := dlock.State{Name: name, Mode: kindMode[kind]}
	limit := 0
	if kind == "s" && len(es) > 0 {
		if b, _, err := s.conn.Get(dir + "/" + es[0].name); err == nil {
			var d nodeData
			if json.Unmarshal(b, &d) == nil {
				limit = d.Limit
			}
		}
		st.Limit = limit
	}
	for i, e := range es {
		if !holds(kind, es, i, limit) {
			st.Queue++
			continue
		}
		st.Holders++
		if e.mode == 'w' {
			st.Mode = dlock.ModeWrite
		}
		path := dir + "/" + e.name
		if r, ok := s.remaining(path); ok {
			st.TTL = max(st.TTL, r)
		}
		if _, stat, err := s.conn.Exists(path); err == nil && stat != nil && kind != "w" {
			st.Fence = max(st.Fence, stat.Czxid)
		}
	}
	if kind == "r" && len(es) > 0 {
		st.Fence = 0
		if _, stat, err := s.conn.Exists(dir + "/" + es[0].name); err == nil && stat != nil {
			st.Fence = stat.Czxid // the first acquisition's: the hold's fence
		}
	}
	if kind == "w" {
		if b, _, err := s.conn.Get(dir); err == nil {
			st.Fence, _ = strconv.ParseInt(string(b), 10, 64)
		}
		for i, e := range es {
			if holds(kind, es, i, 0) && e.mode == 'r' && st.Fence == 0 {
				if _, stat, err := s.conn.Exists(dir + "/" + e.name); err == nil && stat != nil {
					st.Fence = stat.Czxid
				}
			}
		}
	}
	if kind == "r" && st.Holders > 0 {
		st.Holders = 1
	}
	return st
}

// State implements [dlock.Inspector]: the first pattern of name with nodes.
// TTL is known only for holds of this store.
func (s *Store) State(ctx context.Context, name string) (dlock.State, error) {
	es, err := s.list(s.dir("", name))
	if err != nil {
		return dlock.State{}, storeErr("state", err)
	}
	if len(es) > 0 {
		return s.state(string(es[0].kind), name, es), nil
	}
	return dlock.State{Name: name}, nil
}

// List implements [dlock.Inspector]: every lock with a node, by name.
func (s *Store) List(ctx context.Context) ([]dlock.State, error) {
	var out []dlock.State
	dirs, _, err := s.conn.Children(s.root + "/" + namesDir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, storeErr("list", err)
	}
	for _, d := range dirs {
		nb, err := b64.DecodeString(strings.TrimPrefix(d, "n"))
		if err != nil {
			continue
		}
		es, err := s.list(s.root + "/" + namesDir + "/" + d)
		if err != nil {
			return nil, storeErr("list", err)
		}
		if len(es) > 0 {
			out = append(out, s.state(string(es[0].kind), string(nb), es))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// track starts or renews the TTL of a node created through this store.
func (s *Store) track(path string, ttl time.Duration, fence int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.local[path]
	if l == nil {
		l = &local{}
		s.local[path] = l
	}
	l.deadline = time.Now().Add(ttl)
	if fence != 0 {
		l.czxid = fence
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// push renews path's TTL to at least ttl from now (a reentrant hold's one
// expiry is pushed out, never in).
func (s *Store) push(path string, ttl time.Duration) {
	s.mu.Lock()
	l := s.local[path]
	s.mu.Unlock()
	if l == nil || time.Now().Add(ttl).After(l.deadline) {
		s.track(path, ttl, 0)
	}
}

func (s *Store) cached(path string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.local[path]; l != nil {
		return l.czxid
	}
	return 0
}

func (s *Store) untrack(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.local, path)
}

func (s *Store) remaining(path string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.local[path]; l != nil {
		return max(time.Until(l.deadline), time.Millisecond), true
	}
	return 0, false
}

// lapsed reports whether path is a node of this store whose TTL passed
// without renewal; such a node is deleted at once.
func (s *Store) lapsed(path string) bool {
	s.mu.Lock()
	l := s.local[path]
	gone := l != nil && !time.Now().Before(l.deadline)
	if gone {
		delete(s.local, path)
	}
	s.mu.Unlock()
	if gone {
		s.conn.Delete(path, -1)
	}
	return gone
}

// reap deletes the nodes of this store whose TTL passed without renewal:
// a TTL is kept to the millisecond while this process lives. When the
// process dies, its session expires and ZooKeeper deletes the nodes.
func (s *Store) reap() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		next := now.Add(time.Hour)
		var due []string
		for p, l := range s.local {
			if !now.Before(l.deadline) {
				due = append(due, p)
				delete(s.local, p)
			} else if l.deadline.Before(next) {
				next = l.deadline
			}
		}
		s.mu.Unlock()
		for _, p := range due {
			s.conn.Delete(p, -1)
		}
		timer.Reset(time.Until(next))
		select {
		case <-s.stop:
			return
		case <-s.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
	}
}
