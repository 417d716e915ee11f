package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var (
	_ dlock.Store        = (*Store)(nil)
	_ dlock.Inspector    = (*Store)(nil)
	_ dlock.Pinger       = (*Store)(nil)
	_ dlock.GrantWatcher = (*Store)(nil)
)

// DefaultPrefix is the key prefix of a Store unless [WithPrefix] says
// otherwise.
const DefaultPrefix = "dlock/"

// maxAttempts bounds the optimistic retries of one Acquire when other
// clients change the lock between its read and its write.
const maxAttempts = 16

// An Option configures a [Store].
type Option func(*Store)

// WithPrefix sets the prefix of every key the store writes. Default
// [DefaultPrefix] ("dlock/").
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// Store is a [dlock.Store] on etcd. The zero value is not usable; call [New]
// or [NewWithClient]. A Store is safe for concurrent use.
type Store struct {
	cli    *clientv3.Client
	own    bool
	prefix string

	mu     sync.Mutex
	closed bool
	local  map[string]*local // holds and queue places this store granted, by key
	kick   chan struct{}     // wakes the reaper when a deadline moved in
	stop   chan struct{}     // closed by Close
	wg     sync.WaitGroup    // the reaper and WatchGrant goroutines
}

// local is a hold or queue place granted through this store: its lease and
// its deadline on this process's monotonic clock.
type local struct {
	lease    clientv3.LeaseID
	deadline time.Time
}

// New connects to the etcd cluster at endpoints (host:port or URLs) and
// returns a store; Close closes the client. It fails when no endpoint
// answers within ctx (or 5s).
func New(ctx context.Context, endpoints []string, opts ...Option) (*Store, error) {
	if len(endpoints) == 0 {
		return nil, &dlock.InvalidError{Field: "etcd endpoints", Reason: "none given"}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, storeErr("connect", err)
	}
	s := NewWithClient(cli, opts...)
	s.own = true
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Ping(pctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// NewWithClient returns a store on the caller's client; Close leaves it
// open.
func NewWithClient(cli *clientv3.Client, opts ...Option) *Store {
	s := &Store{cli: cli, prefix: DefaultPrefix, local: map[string]*local{}, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.reap()
	}()
	return s
}

// Close stops the store's watchers, waits for them, and closes the client
// if New opened it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	s.wg.Wait()
	if s.own {
		return s.cli.Close()
	}
	return nil
}

// Client returns the store's etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

func storeErr(op string, err error) error { return &dlock.StoreError{Op: op, Node: -1, Err: err} }

// kindOf is the namespace letter of a mode: each pattern keeps its own keys
// (ModeWrite shares the read-write lock's).
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
	return "", fmt.Errorf("%w: etcd store mode %v", dlock.ErrNotSupported, m)
}

var kinds = []string{"m", "r", "w", "f", "s"}

var kindMode = map[string]dlock.Mode{"m": dlock.ModeMutex, "r": dlock.ModeReentrant, "w": dlock.ModeRead, "f": dlock.ModeFair, "s": dlock.ModeSemaphore}

// nameKey renders a lock name so that no name's keys are a prefix of
// another's: its length, a colon, the name.
func nameKey(kind, name string) string {
	return kind + "/" + strconv.Itoa(len(name)) + ":" + name
}

// lockPrefix is the prefix of the holder and queue keys of one lock:
// <prefix>l/<kind>/<len>:<name>/<sub>/<token>, where sub is "w" for a
// writer and "h" for every other key, so that readers can check in one
// comparison that no writer key exists.
func (s *Store) lockPrefix(kind, name string) string {
	return s.prefix + "l/" + nameKey(kind, name) + "/"
}

func sub(m dlock.Mode) string {
	if m == dlock.ModeWrite {
		return "w/"
	}
	return "h/"
}

func (s *Store) key(kind string, req dlock.Request) string {
	return s.lockPrefix(kind, req.Name) + sub(req.Mode) + req.Token
}

// fenceKey is the key whose ModRevision is the name's last exclusive fence
// (the current fence readers get), one for every kind: a name is one lock.
// It has no lease.
func (s *Store) fenceKey(_, name string) string {
	return s.prefix + "f/" + nameKey("n", name)
}

// slotKey is permit i of a semaphore: a key created with the permit's hold
// (same lease), so that two grants compete only for the same slot.
func (s *Store) slotKey(name string, i int) string {
	return s.prefix + "s/" + nameKey("s", name) + "/" + strconv.Itoa(i)
}

// val is the value of a holder or queue key.
type val struct {
	Mode  dlock.Mode `json:"m"`
	Owner string     `json:"o,omitempty"`
	Held  bool       `json:"h,omitempty"`  // claimed: granted to its token
	TTL   int64      `json:"t"`            // lease length asked for, ms
	Fence int64      `json:"f,omitempty"`  // the grant's fence when the key was rewritten after the grant
	Limit int        `json:"l,omitempty"`  // semaphore
	Slot  int        `json:"s,omitempty"`  // semaphore: slot index + 1
	Hold  int64      `json:"ht,omitempty"` // queue key: the hold's TTL to claim with, ms
}

func (v val) encode() string {
	b, _ := json.Marshal(v)
	return string(b)
}

type entry struct {
	token string
	kv    *mvccpb.KeyValue
	v     val
}

// fence of a claimed entry: the revision of the transaction that claimed
// it, which is its ModRevision unless it was rewritten since.
func (e *entry) fence() int64 {
	if e.v.Fence != 0 {
		return e.v.Fence
	}
	return e.kv.ModRevision
}

// view is a lock's keys at one revision, oldest first.
type view struct {
	rev     int64
	entries []*entry
	fence   *mvccpb.KeyValue // nil when no fence was issued yet
	slots   map[int]bool     // semaphore slots taken
	others  map[string]*view // the name's other kinds, at the same revision
}

// heldMode is the mode of the lock's holders (kind's): ModeWrite while a
// writer holds a read-write lock.
func (vw *view) heldMode(kind string) dlock.Mode {
	for i, e := range vw.entries {
		if vw.holds(kind, i) && e.v.Mode == dlock.ModeWrite {
			return dlock.ModeWrite
		}
	}
	return kindMode[kind]
}

// otherHold reports a hold of another kind on the name (a name is one
// lock): its mode and remaining time.
func (s *Store) otherHold(vw *view) (dlock.Mode, time.Duration, bool) {
	for _, k := range kinds {
		ov := vw.others[k]
		if ov == nil {
			continue
		}
		for i, e := range ov.entries {
			if e.v.Held && ov.holds(k, i) { // a queue place at the head holds nothing yet
				return ov.heldMode(k), s.refusal(k, ov, -1).RetryAfter, true
			}
		}
	}
	return 0, 0, false
}

// othersUnchanged are the comparisons that make a grant hold at commit
// only if no key of the name's other kinds was written since vw was read.
func (s *Store) othersUnchanged(kind, name string, vw *view) []clientv3.Cmp {
	var cmps []clientv3.Cmp
	for _, k := range kinds {
		if k != kind {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.lockPrefix(k, name)).WithPrefix(), "<", vw.rev+1))
		}
	}
	return cmps
}

func (vw *view) find(token string) (int, *entry) {
	for i, e := range vw.entries {
		if e.token == token {
			return i, e
		}
	}
	return -1, nil
}

// holds reports whether entry i holds the lock by the rules of its kind:
// the first key (mutex, fair, writer), any permit (semaphore: every key is
// a permit), the owner's keys (reentrant), a reader with no writer ahead
// other than the writer it was let in beside.
func (vw *view) holds(kind string, i int) bool {
	e := vw.entries[i]
	switch kind {
	case "r":
		return vw.entries[0].v.Owner == e.v.Owner
	case "s":
		return true
	case "w":
		if e.v.Mode == dlock.ModeWrite {
			return i == 0
		}
		for _, p := range vw.entries[:i] {
			if p.v.Mode == dlock.ModeWrite && p.token != e.v.Owner {
				return false
			}
		}
		return true
	}
	return i == 0
}

// read gets the view of a lock in one round trip.
func (s *Store) read(ctx context.Context, kind, name string) (*view, error) {
	pfx := s.lockPrefix(kind, name)
	ops := []clientv3.Op{
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(s.fenceKey(kind, name)),
	}
	if kind == "s" {
		ops = append(ops, clientv3.OpGet(s.prefix+"s/"+nameKey("s", name)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	n := len(ops)
	for _, k := range kinds {
		if k != kind {
			ops = append(ops, clientv3.OpGet(s.lockPrefix(k, name), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)))
		}
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	vw := parseView(pfx, resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs)
	vw.others = map[string]*view{}
	for _, k := range kinds {
		if k != kind {
			vw.others[k] = parseView(s.lockPrefix(k, name), resp.Header.Revision, resp.Responses[n].GetResponseRange().Kvs)
			n++
		}
	}
	// Holds and queue places of this store whose TTL passed are revoked on
	// the way, as every operation on a lock prunes it, without waiting for
	// the reaper.
	kept := vw.entries[:0]
	for _, e := range vw.entries {
		if !s.lapsedEntry(e) {
			kept = append(kept, e)
		}
	}
	vw.entries = kept
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		vw.fence = kvs[0]
	}
	if kind == "s" {
		vw.slots = map[int]bool{}
		for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
			k := string(kv.Key)
			if i, err := strconv.Atoi(k[strings.LastIndexByte(k, '/')+1:]); err == nil {
				vw.slots[i] = true
			}
		}
	}
	return vw, nil
}

func parseView(pfx string, rev int64, kvs []*mvccpb.KeyValue) *view {
	vw := &view{rev: rev}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(string(kv.Key), pfx)
		if len(rest) < 2 || rest[1] != '/' {
			continue
		}
		e := &entry{token: rest[2:], kv: kv}
		if json.Unmarshal(kv.Value, &e.v) != nil {
			continue // not ours
		}
		vw.entries = append(vw.entries, e)
	}
	return vw
}

func validate(req dlock.Request) error {
	if err := dlock.ValidName(req.Name); err != nil {
		return err
	}
	if req.Token == "" {
		return &dlock.InvalidError{Field: "token", Reason: "must not be empty"}
	}
	if req.TTL <= 0 {
		return &dlock.InvalidError{Field: "ttl", Reason: "must be positive"}
	}
	if req.Mode == dlock.ModeSemaphore && req.Limit < 1 {
		return &dlock.InvalidError{Field: "limit", Reason: "must be at least 1"}
	}
	return nil
}

// seconds is an etcd lease TTL covering d: whole seconds, rounded up.
func seconds(d time.Duration) int64 { return max(1, int64((d+time.Second-1)/time.Second)) }

func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// errRetry reports that the lock changed between read and write.
var errRetry = errors.New("etcd: lock changed; retry")

// Acquire implements [dlock.Store]. It reads the lock's keys, decides by
// the rules of the mode, and writes in a transaction whose comparisons make
// the decision hold at commit (optimistic concurrency: a conflict rereads;
// after 16 conflicts in a row the answer is a refusal). A new hold is a key
// attached to its own etcd lease of the TTL rounded up to whole seconds (at
// least etcd's minimum lease TTL), which etcd's leader expires on its own
// clock.
func (s *Store) Acquire(ctx context.Context, req dlock.Request) (dlock.Grant, error) {
	kind, err := kindOf(req.Mode)
	if err != nil {
		return dlock.Grant{}, err
	}
	if err := validate(req); err != nil {
		return dlock.Grant{}, err
	}
	if req.Mode == dlock.ModeReentrant && req.Owner == "" {
		req.Owner = req.Token
	}
	var last dlock.Grant
	for range maxAttempts {
		g, err := s.tryAcquire(ctx, kind, req, &last)
		if errors.Is(err, errRetry) {
			continue
		}
		if err != nil {
			if errors.Is(err, dlock.ErrUpgrade) || errors.Is(err, dlock.ErrInvalid) {
				return dlock.Grant{}, err
			}
			return dlock.Grant{}, storeErr("acquire", err)
		}
		return g, nil
	}
	return last, nil // lost every race: someone else got it
}

func (s *Store) tryAcquire(ctx context.Context, kind string, req dlock.Request, last *dlock.Grant) (dlock.Grant, error) {
	vw, err := s.read(ctx, kind, req.Name)
	if err != nil {
		return dlock.Grant{}, err
	}
	key := s.key(kind, req)
	if s.lapsed(key) {
		return dlock.Grant{}, errRetry
	}
	*last = s.refusal(kind, vw, -1)
	if i, me := vw.find(req.Token); me != nil {
		switch {
		case !vw.holds(kind, i):
			// A queue place: keep it alive and report the position.
			qttl := req.QueueTTL
			if qttl <= 0 {
				qttl = req.TTL
			}
			if err := s.keepAlive(ctx, req.Name, me, qttl, key); err != nil {
				return dlock.Grant{}, err
			}
			g := s.refusal(kind, vw, i)
			if held, left, ok := s.otherHold(vw); ok {
				g.Held, g.RetryAfter = held, left
			}
			return g, nil
		case !me.v.Held:
			// At the head of the queue: claim it, unless another kind
			// holds the name.
			if held, left, ok := s.otherHold(vw); ok {
				g := s.refusal(kind, vw, i)
				g.Held, g.RetryAfter = held, left
				if err := s.keepAlive(ctx, req.Name, me, max(req.QueueTTL, req.TTL), key); err != nil {
					return dlock.Grant{}, err
				}
				return g, nil
			}
			fence, err := s.claim(ctx, kind, req.Name, me, req.TTL, key, true, s.othersUnchanged(kind, req.Name, vw))
			if err != nil {
				return dlock.Grant{}, err
			}
			return dlock.Grant{Acquired: true, Fence: fence, Count: 1}, nil
		}
		if err := s.keepAlive(ctx, req.Name, me, req.TTL, key); err != nil {
			return dlock.Grant{}, err
		}
		if kind == "r" {
			// One hold: every acquisition's lease is pushed out.
			for _, e := range vw.entries {
				if e != me {
					if err := s.keepAlive(ctx, req.Name, e, req.TTL, s.lockPrefix(kind, req.Name)+"h/"+e.token); err != nil && !errors.Is(err, errRetry) {
						return dlock.Grant{}, err
					}
				}
			}
		}
		return dlock.Grant{Acquired: true, Fence: me.fence(), Count: s.count(kind, vw, me)}, nil
	}

	if held, left, ok := s.otherHold(vw); ok {
		// A name is one lock: refused, keeping a queued caller's place.
		if req.Queue && (kind == "f" || req.Mode == dlock.ModeWrite) {
			g, err := s.enqueue(ctx, kind, req, vw, key)
			g.Held, g.RetryAfter = held, left
			return g, err
		}
		g := *last
		g.Held, g.RetryAfter = held, left
		return g, nil
	}
	if kind == "s" && len(vw.entries) > 0 && vw.entries[0].v.Limit != req.Limit {
		return dlock.Grant{}, &dlock.LimitError{Name: req.Name, Held: vw.entries[0].v.Limit, Asked: req.Limit}
	}

	pfx := s.lockPrefix(kind, req.Name)
	me := &entry{token: req.Token, v: val{Mode: req.Mode, Owner: req.Owner, TTL: ms(req.TTL), Held: true}}
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, s.othersUnchanged(kind, req.Name, vw)...)
	empty := clientv3.Compare(clientv3.CreateRevision(pfx).WithPrefix(), "=", 0)
	unchanged := clientv3.Compare(clientv3.ModRevision(pfx).WithPrefix(), "<", vw.rev+1)
	var fence int64 // known before the write: a reader's or a re-entry's
	var extra []clientv3.Op
	switch {
	case kind == "m" || kind == "f" || req.Mode == dlock.ModeWrite:
		if req.Mode == dlock.ModeWrite && req.Owner != "" {
			for _, e := range vw.entries {
				if e.token == req.Owner && e.v.Mode == dlock.ModeRead && vw.holds(kind, slicesIndex(vw, e)) {
					return dlock.Grant{}, dlock.ErrUpgrade
				}
			}
		}
		if len(vw.entries) > 0 {
			if req.Queue && (kind == "f" || req.Mode == dlock.ModeWrite) {
				return s.enqueue(ctx, kind, req, vw, key)
			}
			return *last, nil
		}
		cmps = append(cmps, empty)
	case kind == "r":
		if len(vw.entries) == 0 {
			cmps = append(cmps, empty)
			break
		}
		if vw.entries[0].v.Owner != req.Owner {
			return *last, nil
		}
		fence = vw.entries[0].fence()
		me.v.Fence = fence
		cmps = append(cmps, unchanged)
	case kind == "s":
		if len(vw.entries) >= req.Limit {
			return *last, nil
		}
		slot := -1
		for i := range req.Limit {
			if !vw.slots[i] {
				slot = i
				break
			}
		}
		if slot < 0 {
			return *last, nil
		}
		me.v.Limit, me.v.Slot = req.Limit, slot+1
		sk := s.slotKey(req.Name, slot)
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(sk), "=", 0))
		extra = append(extra, clientv3.OpPut(sk, req.Token)) // leased below
	default: // reader
		beside := false
		for _, e := range vw.entries {
			if e.v.Mode == dlock.ModeWrite {
				if req.Owner == "" || e.token != req.Owner || !vw.holds(kind, slicesIndex(vw, e)) {
					return *last, nil
				}
				beside = true
			}
		}
		if beside {
			cmps = append(cmps, unchanged)
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(pfx+"w/").WithPrefix(), "=", 0))
		}
		if vw.fence != nil {
			// The current fence, checked to be still current at commit
			// (a writer that came and went since the read changed it).
			fence = vw.fence.ModRevision
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.fenceKey(kind, req.Name)), "=", fence))
		}
	}
	lease, err := s.cli.Grant(ctx, seconds(req.TTL))
	if err != nil {
		return dlock.Grant{}, err
	}
	ops := []clientv3.Op{clientv3.OpPut(key, me.v.encode(), clientv3.WithLease(lease.ID))}
	for _, op := range extra {
		ops = append(ops, clientv3.OpPut(string(op.KeyBytes()), string(op.ValueBytes()), clientv3.WithLease(lease.ID)))
	}
	if fence == 0 {
		fk := s.fenceKey(kind, req.Name)
		ops = append(ops, clientv3.OpPut(fk, ""))
		if req.Mode == dlock.ModeRead {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(fk), "=", 0))
		}
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(lease.ID)
		if err == nil {
			err = errRetry
		}
		return dlock.Grant{}, err
	}
	s.track(key, lease.ID, req.TTL)
	if fence == 0 {
		fence = resp.Header.Revision
	}
	count := 1
	if kind == "r" {
		count = len(vw.entries) + 1
	}
	return dlock.Grant{Acquired: true, Fence: fence, Count: count}, nil
}

func slicesIndex(vw *view, e *entry) int {
	for i, x := range vw.entries {
		if x == e {
			return i
		}
	}
	return -1
}

// count is the hold count of a grant: the owner's acquisitions for a
// reentrant lock, else 1.
func (s *Store) count(kind string, vw *view, me *entry) int {
	if kind != "r" {
		return 1
	}
	n := 0
	for _, e := range vw.entries {
		if e.v.Owner == me.v.Owner {
			n++
		}
	}
	return n
}

// claim turns a queue key that reached the head into a hold of ttl: the
// key moves to a new lease of ttl (its queue lease was as short as the
// queue TTL), and the claiming transaction's revision is the fence,
// recorded on the fence key. It fails with errRetry when the key changed
// since it was read (expired, or claimed by someone else).
func (s *Store) claim(ctx context.Context, kind, name string, me *entry, ttl time.Duration, key string, mine bool, others []clientv3.Cmp) (int64, error) {
	lease, err := s.cli.Grant(ctx, seconds(ttl))
	if err != nil {
		return 0, err
	}
	nv := me.v
	nv.Held, nv.TTL, nv.Fence = true, ms(ttl), 0
	resp, err := s.cli.Txn(ctx).If(append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", me.kv.CreateRevision),
		clientv3.Compare(clientv3.ModRevision(key), "=", me.kv.ModRevision), // nobody claimed it since
	}, others...)...).Then(
		clientv3.OpPut(key, nv.encode(), clientv3.WithLease(lease.ID)),
		clientv3.OpPut(s.fenceKey(kind, name), ""),
	).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(lease.ID)
		if err == nil {
			err = errRetry
		}
		return 0, err
	}
	if mine {
		s.track(key, lease.ID, ttl)
	}
	s.revoke(clientv3.LeaseID(me.kv.Lease))
	return resp.Header.Revision, nil
}

// enqueue adds the caller's queue key (fair waiter or writer intent) on a
// lease of the queue TTL: a waiter that dies leaves the queue when it runs
// out. A claim moves the key to a lease of the hold's TTL.
func (s *Store) enqueue(ctx context.Context, kind string, req dlock.Request, vw *view, key string) (dlock.Grant, error) {
	qttl := req.QueueTTL
	if qttl <= 0 {
		qttl = req.TTL
	}
	lease, err := s.cli.Grant(ctx, seconds(qttl))
	if err != nil {
		return dlock.Grant{}, err
	}
	v := val{Mode: req.Mode, Owner: req.Owner, TTL: ms(qttl), Hold: ms(req.TTL)}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, v.encode(), clientv3.WithLease(lease.ID))).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(lease.ID)
		if err == nil {
			err = errRetry
		}
		return dlock.Grant{}, err
	}
	s.track(key, lease.ID, qttl)
	return s.refusal(kind, vw, -1), nil
}

// queued is the number of keys in vw that do not hold the lock.
func queued(kind string, vw *view) int {
	n := 0
	for i := range vw.entries {
		if !vw.holds(kind, i) {
			n++
		}
	}
	return n
}

// refusal describes a refused Acquire: RetryAfter is the longest TTL the
// holders asked for (the shortest for a semaphore), an upper bound of their
// remaining time (etcd leases do not tell it below a second); Position is the
// caller's place in the queue (i its index, or -1: the queue's length).
func (s *Store) refusal(kind string, vw *view, i int) dlock.Grant {
	g := dlock.Grant{Held: vw.heldMode(kind)}
	first := true
	for j, e := range vw.entries {
		if !vw.holds(kind, j) {
			continue
		}
		d := time.Duration(e.v.TTL) * time.Millisecond
		if r, ok := s.remaining(string(e.kv.Key)); ok {
			d = r
		}
		if kind == "s" {
			if first || d < g.RetryAfter {
				g.RetryAfter = d
			}
		} else {
			g.RetryAfter = max(g.RetryAfter, d)
		}
		first = false
	}
	if i < 0 {
		g.Position = queued(kind, vw)
	} else {
		for j := range vw.entries[:i] {
			if !vw.holds(kind, j) {
				g.Position++
			}
		}
	}
	return g
}

// keepAlive renews the lease of e's key so that it lasts at least ttl from
// now. When ttl is longer than the lease was granted for, the key moves to a
// new, longer lease (etcd leases keep their TTL). errRetry: the lease or key
// is gone.
func (s *Store) keepAlive(ctx context.Context, name string, e *entry, ttl time.Duration, key string) error {
	lease := clientv3.LeaseID(e.kv.Lease)
	if seconds(ttl) <= seconds(time.Duration(e.v.TTL)*time.Millisecond) {
		_, err := s.cli.KeepAliveOnce(ctx, lease)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return errRetry
		}
		if err == nil {
			s.track(key, lease, ttl)
		}
		return err
	}
	nl, err := s.cli.Grant(ctx, seconds(ttl))
	if err != nil {
		return err
	}
	nv := e.v
	nv.TTL = ms(ttl)
	if nv.Held {
		nv.Fence = e.fence()
	}
	ops := []clientv3.Op{clientv3.OpPut(key, nv.encode(), clientv3.WithLease(nl.ID))}
	if nv.Slot > 0 {
		ops = append(ops, clientv3.OpPut(s.slotKey(name, nv.Slot-1), e.token, clientv3.WithLease(nl.ID)))
	}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", e.kv.CreateRevision)).
		Then(ops...).Commit()
	if err != nil || !resp.Succeeded {
		s.revoke(nl.ID)
		if err == nil {
			err = errRetry
		}
		return err
	}
	e.v = nv
	e.kv.Lease = int64(nl.ID)
	s.track(key, nl.ID, ttl)
	s.revoke(lease)
	return nil
}

// track records that key, on lease, is held (or queued) through this store
// until ttl from now.
func (s *Store) track(key string, lease clientv3.LeaseID, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.local[key] = &local{lease: lease, deadline: time.Now().Add(ttl)}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Store) untrack(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.local, key)
}

// lapsed reports whether key is a hold of this store whose TTL passed
// without renewal; such a hold is revoked at once.
func (s *Store) lapsed(key string) bool {
	s.mu.Lock()
	l := s.local[key]
	gone := l != nil && !time.Now().Before(l.deadline)
	if gone {
		delete(s.local, key)
	}
	s.mu.Unlock()
	if gone {
		s.revoke(l.lease)
	}
	return gone
}

// lapsedEntry is lapsed for a key as read: when the key has moved to
// another lease since this store tracked it (a release handed the fair lock
// to it: the claim gave it a lease of its hold's TTL), the tracking is
// renewed for that lease and the hold's TTL instead, so the key is neither
// taken for lapsed while it holds nor left behind by revoking the old lease.
func (s *Store) lapsedEntry(e *entry) bool {
	key := string(e.kv.Key)
	s.mu.Lock()
	if l := s.local[key]; l != nil && e.kv.Lease != 0 && l.lease != clientv3.LeaseID(e.kv.Lease) {
		l.lease = clientv3.LeaseID(e.kv.Lease)
		l.deadline = time.Now().Add(time.Duration(e.v.TTL) * time.Millisecond)
	}
	s.mu.Unlock()
	return s.lapsed(key)
}

// remaining is the time left of a hold granted through this store, known
// to the millisecond; ok is false for holds of other stores.
func (s *Store) remaining(key string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.local[key]; l != nil {
		return max(time.Until(l.deadline), time.Millisecond), true
	}
	return 0, false
}

// reap revokes the leases of holds and queue places granted through this
// store whose TTL passed without renewal, so that a TTL is kept to the
// millisecond while this process lives (etcd itself only expires a lease
// of whole seconds, checked every half second: that is what happens when the
// process is gone).
func (s *Store) reap() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		next := now.Add(time.Hour)
		var due []clientv3.LeaseID
		for k, l := range s.local {
			if !now.Before(l.deadline) {
				due = append(due, l.lease)
				delete(s.local, k)
			} else if l.deadline.Before(next) {
				next = l.deadline
			}
		}
		s.mu.Unlock()
		for _, id := range due {
			s.revoke(id)
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

// revoke drops a lease (and its keys) after an operation no longer needs
// it, bounded by a short timeout.
func (s *Store) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.cli.Revoke(ctx, id)
}

// Extend implements [dlock.Store]: one read of every request's key, then a
// keep-alive of each hold's lease (concurrently). A key that is gone, or is
// only a queue place, reports [dlock.ErrNotHeld]; so does a lease that
// expired (etcd judged it by its leader's clock).
func (s *Store) Extend(ctx context.Context, reqs []dlock.Request) []error {
	errs := make([]error, len(reqs))
	ops := make([]clientv3.Op, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	keys := make([]string, len(reqs))
	for i, req := range reqs {
		kind, err := kindOf(req.Mode)
		if err == nil {
			err = validate(req)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		keys[i] = s.key(kind, req)
		if s.lapsed(keys[i]) {
			errs[i] = dlock.ErrNotHeld
			continue
		}
		ops = append(ops, clientv3.OpGet(keys[i]))
		idx = append(idx, i)
	}
	if len(ops) == 0 {
		return errs
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		for _, i := range idx {
			errs[i] = storeErr("extend", err)
		}
		return errs
	}
	var wg sync.WaitGroup
	for j, i := range idx {
		kvs := resp.Responses[j].GetResponseRange().Kvs
		if len(kvs) == 0 {
			errs[i] = dlock.ErrNotHeld
			continue
		}
		e := &entry{kv: kvs[0]}
		if json.Unmarshal(kvs[0].Value, &e.v) != nil || !e.v.Held {
			errs[i] = dlock.ErrNotHeld
			continue
		}
		wg.Go(func() {
			err := s.keepAlive(ctx, reqs[i].Name, e, reqs[i].TTL, keys[i])
			switch {
			case errors.Is(err, errRetry):
				errs[i] = dlock.ErrNotHeld
			case err != nil:
				errs[i] = storeErr("extend", err)
			}
		})
	}
	wg.Wait()
	return errs
}

// Release implements [dlock.Store]: it reads the key's lease and revokes it,
// which deletes the key (and a semaphore's slot) in the same step, so a key
// never outlives its lease's keep-alives. Releasing a fair lock then hands
// it to the head of its queue: the head's key is claimed for it (a new fence
// and a lease of the TTL it asked for), and its [Store.WatchGrant] wakes.
// A writer intent needs no handoff: the next writer claims on its own.
func (s *Store) Release(ctx context.Context, req dlock.Request) error {
	kind, err := kindOf(req.Mode)
	if err != nil {
		return err
	}
	key := s.key(kind, req)
	if s.lapsed(key) {
		return dlock.ErrNotHeld
	}
	s.untrack(key)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return storeErr("release", err)
	}
	if len(resp.Kvs) == 0 {
		return dlock.ErrNotHeld
	}
	kv := resp.Kvs[0]
	if kv.Lease == 0 {
		_, err = s.cli.Delete(ctx, key)
	} else {
		_, err = s.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease))
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return dlock.ErrNotHeld // expired meanwhile
		}
	}
	if err != nil {
		return storeErr("release", err)
	}
	if kind == "f" {
		s.handOff(ctx, req.Name)
	}
	return nil
}

// handOff claims a free fair lock for the head of its queue. Failures are
// left to the head waiter, which claims for itself on its next Acquire.
func (s *Store) handOff(ctx context.Context, name string) {
	for range 3 {
		vw, err := s.read(ctx, "f", name)
		if err != nil || len(vw.entries) == 0 || vw.entries[0].v.Held {
			return
		}
		if _, _, held := s.otherHold(vw); held {
			return
		}
		head := vw.entries[0]
		key := s.lockPrefix("f", name) + "h/" + head.token
		_, err = s.claim(ctx, "f", name, head, time.Duration(max(head.v.Hold, head.v.TTL))*time.Millisecond, key, false, s.othersUnchanged("f", name, vw))
		if !errors.Is(err, errRetry) {
			return
		}
	}
}

// Watch implements [dlock.Store]: etcd watches on the keys of every kind
// of the name (a name is one lock: a release of any kind may free it) that
// wake on every deletion (release or lease expiry, which etcd reports too).
// It returns once etcd has confirmed the watches.
func (s *Store) Watch(ctx context.Context, name string, mode dlock.Mode) (<-chan struct{}, func(), error) {
	if _, err := kindOf(mode); err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
	var wchs []clientv3.WatchChan
	for _, k := range kinds {
		wch := s.cli.Watch(wctx, s.lockPrefix(k, name), clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				cancel()
				return nil, nil, storeErr("watch", errors.Join(errors.New("watch not created"), wr.Err()))
			}
		case <-ctx.Done():
			cancel()
			return nil, nil, storeErr("watch", ctx.Err())
		}
		wchs = append(wchs, wch)
	}
	ch := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, wch := range wchs {
		wg.Go(func() {
			for wr := range wch {
				if len(wr.Events) > 0 || wr.Err() != nil {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
	return ch, stop, nil
}

// Ping implements [dlock.Pinger] with a linearizable read (it needs the
// cluster's quorum).
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.cli.Get(ctx, s.prefix+"ping", clientv3.WithCountOnly()); err != nil {
		return storeErr("ping", err)
	}
	return nil
}

func (s *Store) state(kind, name string, vw *view) dlock.State {
	st := dlock.State{Name: name, Mode: kindMode[kind]}
	if vw.fence != nil {
		st.Fence = vw.fence.ModRevision
	}
	for i, e := range vw.entries {
		if vw.holds(kind, i) {
			st.Holders++
			st.TTL = max(st.TTL, time.Duration(e.v.TTL)*time.Millisecond)
			if e.v.Mode == dlock.ModeWrite {
				st.Mode = dlock.ModeWrite
			}
			if kind == "s" {
				st.Limit = e.v.Limit
			}
		} else {
			st.Queue++
		}
	}
	if kind == "r" && st.Holders > 0 {
		st.Holders = 1
	}
	return st
}

// State implements [dlock.Inspector]: the first pattern of name with keys
// (mutex, reentrant, read-write, fair, semaphore). TTL is the longest lease
// a holder asked for, not its remaining time (etcd leases do not tell it
// below a second without another round trip per holder).
func (s *Store) State(ctx context.Context, name string) (dlock.State, error) {
	for _, k := range kinds {
		vw, err := s.read(ctx, k, name)
		if err != nil {
			return dlock.State{}, storeErr("state", err)
		}
		if len(vw.entries) > 0 {
			return s.state(k, name, vw), nil
		}
	}
	return dlock.State{Name: name}, nil
}

// List implements [dlock.Inspector]: every lock with a key, by name.
func (s *Store) List(ctx context.Context) ([]dlock.State, error) {
	base, fbase := s.prefix+"l/", s.prefix+"f/"
	tr, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(base, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(fbase, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, storeErr("list", err)
	}
	resp := tr.Responses[0].GetResponseRange()
	fences := map[string]*mvccpb.KeyValue{}
	for _, kv := range tr.Responses[1].GetResponseRange().Kvs {
		fences[strings.TrimPrefix(string(kv.Key), fbase)] = kv
	}
	type lk struct{ kind, name string }
	views := map[lk]*view{}
	var order []lk
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), base) // <kind>/<len>:<name>/<sub>/<token>
		kind, rest, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		ls, rest, ok := strings.Cut(rest, ":")
		n, err := strconv.Atoi(ls)
		if !ok || err != nil || n > len(rest) {
			continue
		}
		name, token := rest[:n], strings.TrimPrefix(rest[n:], "/")
		if len(token) < 2 || token[1] != '/' {
			continue
		}
		e := &entry{token: token[2:], kv: kv}
		if json.Unmarshal(kv.Value, &e.v) != nil {
			continue
		}
		k := lk{kind, name}
		if views[k] == nil {
			views[k] = &view{rev: tr.Header.Revision, fence: fences[nameKey("n", name)]}
			order = append(order, k)
		}
		views[k].entries = append(views[k].entries, e)
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].name != order[j].name {
			return order[i].name < order[j].name
		}
		return order[i].kind < order[j].kind
	})
	out := make([]dlock.State, 0, len(order))
	for _, k := range order {
		out = append(out, s.state(k.kind, k.name, views[k]))
	}
	return out, nil
}

// WatchGrant implements [dlock.GrantWatcher] for the fair lock with the
// recipe of etcd's own mutex: the waiter watches only the key just before
// its own (one release wakes one waiter, no herd); when that key goes, it
// looks again, and once its key is the first it claims the lock and
// delivers the grant. A goroutine does this until stop is called.
func (s *Store) WatchGrant(ctx context.Context, req dlock.Request) (<-chan dlock.Grant, func(), error) {
	if req.Mode != dlock.ModeFair {
		return nil, nil, fmt.Errorf("%w: etcd store grant watch for mode %v", dlock.ErrNotSupported, req.Mode)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, storeErr("watch", errors.New("store closed"))
	}
	s.wg.Add(1)
	s.mu.Unlock()
	ch := make(chan dlock.Grant, 1)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
	done := make(chan struct{})
	go func() {
		defer s.wg.Done()
		defer close(done)
		s.grantLoop(wctx, req, ch)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	return ch, stop, nil
}

func (s *Store) grantLoop(ctx context.Context, req dlock.Request, ch chan<- dlock.Grant) {
	pfx := s.lockPrefix("f", req.Name)
	key := s.key("f", req)
	pause := func() bool {
		t := time.NewTimer(50 * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			pause()
			continue
		}
		if len(resp.Kvs) == 0 {
			// Not queued yet (WatchGrant comes before the Acquire that
			// queues): wait for the key to appear.
			s.waitEvent(ctx, key, resp.Header.Revision+1, false)
			continue
		}
		mine := resp.Kvs[0]
		opts := append([]clientv3.OpOption{clientv3.WithMaxCreateRev(mine.CreateRevision - 1)}, clientv3.WithLastCreate()...)
		pr, err := s.cli.Get(ctx, pfx, opts...)
		if err != nil {
			pause()
			continue
		}
		if len(pr.Kvs) > 0 {
			s.waitEvent(ctx, string(pr.Kvs[0].Key), pr.Header.Revision+1, true)
			continue
		}
		g, err := s.Acquire(ctx, req)
		if err == nil && g.Acquired {
			ch <- g
			return
		}
		if err != nil {
			pause()
			continue
		}
		if g.Position == 0 && g.RetryAfter == 0 {
			// Our key is gone (expired or released): nothing to wait for
			// until the Locker queues again.
			s.waitEvent(ctx, key, resp.Header.Revision+1, false)
		}
	}
}

// waitEvent waits from revision rev for key to be deleted (del) or put.
func (s *Store) waitEvent(ctx context.Context, key string, rev int64, del bool) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opt := clientv3.WithFilterPut()
	if !del {
		opt = clientv3.WithFilterDelete()
	}
	for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(rev), opt) {
		if len(wr.Events) > 0 || wr.Err() != nil {
			return
		}
	}
}
