package goredis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/redisproto"
)

// The tracker keeps the server tracking the keys the Store's waiters watch,
// so that any change to them (a release by any process, an expiry) wakes the
// waiters at once (redisproto.Hub decides what to arm, and when).
//
// go-redis pools its connections, and a tracking push arrives on the
// connection that made the tracked read, read only when that connection is
// next used; so the tracker keeps, per node, two connections of its own,
// made from the client's options: a pub/sub connection subscribed to
// "__redis__:invalidate", and a tracking connection that has CLIENT TRACKING
// ON REDIRECT <pub/sub connection's ID> OPTIN and makes the tracked reads
// (CLIENT CACHING YES + EXISTS). The server sends the invalidation of a key
// read there, whoever writes, deletes or expires it, to the pub/sub
// connection. When either connection fails, every waiter is woken and the
// node's connections are made anew at the next tracked read.
type tracker struct {
	s *Store

	mu     sync.Mutex
	nodes  map[string]*trackNode // by address
	closed bool
	wg     sync.WaitGroup
}

type trackNode struct {
	addr      string
	subClient *redis.Client // the pub/sub connection's client
	ps        *redis.PubSub
	trkClient *redis.Client // the tracking connection's client
	conn      *redis.Conn
	id        atomic.Int64 // CLIENT ID of the pub/sub connection
	broken    atomic.Bool
}

var (
	// errNoTracking: the client is of a kind the tracker cannot follow.
	errNoTracking = errors.New("dlock: goredis: no tracking for this client type")
	// errClosed: the Store was closed.
	errClosed = errors.New("dlock: goredis store closed")
)

// arm is the Store's redisproto.ArmFunc.
func (t *tracker) arm(ctx context.Context, keys []string) []redisproto.ArmResult {
	out := make([]redisproto.ArmResult, len(keys))
	byNode := make(map[*trackNode][]int)
	for i, k := range keys {
		n, err := t.node(ctx, k)
		if err != nil {
			out[i].Err = err
			continue
		}
		byNode[n] = append(byNode[n], i)
	}
	for n, idx := range byNode {
		cmds := make([]*redis.IntCmd, len(idx))
		_, err := n.conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, i := range idx {
				p.Do(ctx, "CLIENT", "CACHING", "YES")
				cmds[j] = p.Exists(ctx, keys[i])
			}
			return nil
		})
		if err != nil && !errors.As(err, new(redis.Error)) {
			t.drop(n) // the connection failed: make it anew
		}
		for j, i := range idx {
			v, err := cmds[j].Result()
			out[i] = redisproto.ArmResult{Absent: err == nil && v == 0, Err: err}
		}
	}
	return out
}

// node returns the tracking node of the master that serves key, starting it
// when needed.
func (t *tracker) node(ctx context.Context, key string) (*trackNode, error) {
	var opt *redis.Options
	switch c := t.s.client.(type) {
	case *redis.Client:
		opt = c.Options()
	case *redis.ClusterClient:
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		opt = m.Options()
	default:
		return nil, errNoTracking
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	if t.nodes == nil {
		t.nodes = make(map[string]*trackNode)
	}
	if n := t.nodes[opt.Addr]; n != nil {
		t.mu.Unlock()
		return n, nil
	}
	n := &trackNode{addr: opt.Addr}
	t.nodes[opt.Addr] = n
	t.mu.Unlock()
	if err := t.start(ctx, n, opt); err != nil {
		t.drop(n)
		return nil, err
	}
	return n, nil
}

// start makes n's connections from opt, the options of its node.
func (t *tracker) start(ctx context.Context, n *trackNode, base *redis.Options) error {
	user := base.OnConnect
	opt := *base
	opt.Protocol = 2 // invalidations as plain pub/sub messages
	opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 1, 0, 1, 0
	sub := opt
	sub.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if user != nil {
			if err := user(ctx, cn); err != nil {
				return err
			}
		}
		id, err := cn.ClientID(ctx).Result()
		n.id.Store(id)
		return err
	}
	trk := opt
	trk.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if user != nil {
			if err := user(ctx, cn); err != nil {
				return err
			}
		}
		return cn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", n.id.Load(), "OPTIN").Err()
	}
	n.subClient = redis.NewClient(&sub)
	n.trkClient = redis.NewClient(&trk)
	n.ps = n.subClient.Subscribe(ctx, "__redis__:invalidate")
	if _, err := n.ps.Receive(ctx); err != nil { // the subscription's confirmation
		return err
	}
	n.conn = n.trkClient.Conn()
	if err := n.conn.Ping(ctx).Err(); err != nil { // connects: tracking on
		return err
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.receive(n)
	}()
	return nil
}

// receive passes n's invalidations to the hub until n fails or is dropped.
func (t *tracker) receive(n *trackNode) {
	for {
		m, err := n.ps.Receive(context.Background())
		if err != nil {
			if !n.broken.Load() {
				t.s.cfg.Logger.Debug("dlock: tracking connection failed; waking every waiter", "node", n.addr, "err", err)
			}
			t.drop(n)
			t.s.hub.Invalidate(nil) // every key: wake all, arm anew
			return
		}
		if msg, ok := m.(*redis.Message); ok {
			t.s.hub.Invalidate(msg.PayloadSlice)
		}
	}
}

// drop closes n's connections and forgets it, so that the next tracked read
// on its node makes them anew.
func (t *tracker) drop(n *trackNode) {
	if n.broken.Swap(true) {
		return
	}
	t.mu.Lock()
	if t.nodes[n.addr] == n {
		delete(t.nodes, n.addr)
	}
	t.mu.Unlock()
	n.close()
}

func (n *trackNode) close() {
	if n.ps != nil {
		n.ps.Close()
	}
	if n.conn != nil {
		n.conn.Close()
	}
	if n.subClient != nil {
		n.subClient.Close()
	}
	if n.trkClient != nil {
		n.trkClient.Close()
	}
}

// close drops every node and waits for their receive loops.
func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	nodes := t.nodes
	t.nodes = nil
	t.mu.Unlock()
	for _, n := range nodes {
		n.broken.Store(true)
		n.close()
	}
	t.wg.Wait()
}
