package valkey

import (
	"context"
	"sort"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// State implements [store.Inspector] in one round trip. A free lock has no
// holders; Fence is the last fence issued (0 once the counter expired, see
// [WithFenceRetention]). A mutex is a string key, and its Queue counts the
// waiters registered for a handoff whose registration is live; a key of
// another type is reported with its holder count and Mode left to the
// pattern that owns it.
func (s *Store) State(ctx context.Context, name string) (store.State, error) {
	if err := s.checkName(name); err != nil {
		return store.State{}, err
	}
	keys := s.l.StateKeys(name)
	res := s.do(ctx, 1, func(_ int, eval bool) vk.Completed {
		return cmd(s.client, redisproto.StateScript, keys, nil, eval)
	})
	v, err := res[0].ToArray()
	if err != nil {
		return store.State{}, fail("state", err)
	}
	st := store.State{Name: name}
	if len(v) < 4 {
		return st, nil
	}
	typ, _ := v[0].ToString()
	holders, _ := v[1].AsInt64()
	pttl, _ := v[2].AsInt64()
	fence, _ := v[3].AsInt64()
	var waiters int64
	if len(v) > 4 {
		waiters, _ = v[4].AsInt64()
	}
	st, pattern := redisproto.DecodeState(st, typ, holders, pttl, fence, waiters)
	if pattern {
		return s.patternState(ctx, name, st) // patterns.go
	}
	return st, nil
}

// List implements [store.Inspector]: the state of every held lock whose key
// has the Store's prefix, by name. It SCANs every node (every primary of a
// cluster), so it costs time in proportion to the whole keyspace; it is
// meant for dashboards and tools, not hot paths. Locks taken or freed
// during the scan may or may not be listed.
func (s *Store) List(ctx context.Context) ([]store.State, error) {
	pattern := s.l.ListPattern()
	seen := make(map[string]bool)
	var names []string
	for _, n := range s.client.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				if isReplicaOnly(err) {
					break
				}
				return nil, fail("list", err)
			}
			for _, k := range e.Elements {
				if name, ok := s.l.MainName(k); ok && !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	more, err := s.patternNames(ctx) // patterns.go
	if err != nil {
		return nil, err
	}
	for _, name := range more {
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	out := make([]store.State, 0, len(names))
	for _, name := range names {
		st, err := s.State(ctx, name)
		if err != nil {
			return nil, err
		}
		if st.Holders > 0 || st.Queue > 0 {
			out = append(out, st)
		}
	}
	return out, nil
}

func isReplicaOnly(err error) bool {
	ve, ok := vk.IsValkeyErr(err)
	return ok && strings.HasPrefix(ve.Error(), "READONLY")
}

// Ping implements [store.Pinger]: PING to the server (to one node of a
// cluster). It returns a [*store.StoreError] when that fails.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Do(ctx, s.client.B().Ping().Build()).Error(); err != nil {
		return fail("ping", err)
	}
	return nil
}

// checkEviction reads every node's maxmemory-policy and warns about (or,
// strict, refuses) a policy that may evict lock keys. Nodes that do not
// answer CONFIG GET are logged and skipped.
func (s *Store) checkEviction(ctx context.Context) error {
	nodes := s.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	for _, addr := range addrs {
		n := nodes[addr]
		m, err := n.Do(ctx, n.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
		policy, ok := m["maxmemory-policy"]
		if err != nil || !ok {
			s.cfg.logger.Info("dlock: could not read maxmemory-policy; make sure it is noeviction", "node", addr, "err", err)
			continue
		}
		if policy == "noeviction" {
			continue
		}
		if s.cfg.strictEvict {
			return &EvictionError{Node: addr, Policy: policy}
		}
		s.cfg.logger.Warn("dlock: maxmemory-policy may evict lock keys, freeing held locks; set it to noeviction",
			"node", addr, "policy", policy)
	}
	return nil
}

// EvictionError is returned under [WithStrictEviction] when a node's
// maxmemory-policy may evict lock keys. It wraps [ErrEvictionPolicy].
type EvictionError struct {
	Node   string // address of the node
	Policy string // its maxmemory-policy
}

func (e *EvictionError) Error() string {
	return "dlock: maxmemory-policy " + e.Policy + " on " + e.Node + " may evict lock keys"
}

func (e *EvictionError) Unwrap() error { return ErrEvictionPolicy }
