package valkey

import (
	"context"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
	"github.com/dlock-dev/dlock/store"
)

// The reentrant, read-write, fair and semaphore locks: their key layout is
// described in internal/redisproto (modes.go).

// AuditKey returns the key of the fair lock's audit stream: the last 1000 or
// so grants and releases of lock name, each with fields "event" (grant or
// release), "fence" and "holder" (the first 12 hex digits of the SHA-1 of
// the holder's token, enough to pair a grant with its release, useless for
// extending or releasing the lock). Read it with XRANGE or XREVRANGE; it
// expires a day after the last grant.
func (s *Store) AuditKey(name string) string { return s.l.AuditKey(name) }

// patternState fills st (the state of a name whose mutex key is free) from
// the keys of the other patterns, in one round trip.
func (s *Store) patternState(ctx context.Context, name string, st store.State) (store.State, error) {
	keys := s.l.PatternStateKeys(name)
	res := s.do(ctx, 1, func(_ int, eval bool) vk.Completed {
		return cmd(s.client, redisproto.PatternStateScript, keys, nil, eval)
	})
	v, err := res[0].AsIntSlice()
	if err != nil {
		return store.State{}, fail("state", err)
	}
	return redisproto.DecodePatternState(st, v), nil
}

// patternNames returns the names of the locks whose reentrant, read-write,
// fair or semaphore keys exist, by SCANning every node for keys that start
// with "{" (as auxiliary keys do) and keeping those that are exactly the
// key of a name.
func (s *Store) patternNames(ctx context.Context) ([]string, error) {
	seen := make(map[string]bool)
	var names []string
	for _, n := range s.client.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(redisproto.AuxPattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				if isReplicaOnly(err) {
					break
				}
				return nil, fail("list", err)
			}
			for _, k := range e.Elements {
				if name, ok := s.l.PatternName(k); ok && !seen[name] {
					seen[name] = true
					names = append(names, name)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return names, nil
}
