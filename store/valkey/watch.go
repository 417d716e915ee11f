package valkey

import (
	"context"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto"
)

// cacheTTL is how long valkey-go keeps a tracked read in its local cache; a
// later read within it costs no round trip.
const cacheTTL = time.Minute

// armKeys is the Store's redisproto.ArmFunc: client-side-cached GETs
// (CLIENT CACHING YES + GET) on valkey-go's shared connections, whose
// invalidations reach the hub through the client's hook.
func (s *Store) armKeys(ctx context.Context, keys []string) []redisproto.ArmResult {
	c := s.client
	cmds := make([]vk.CacheableTTL, len(keys))
	for i, k := range keys {
		cmds[i] = vk.CT(c.B().Get().Key(k).Cache(), cacheTTL)
	}
	out := make([]redisproto.ArmResult, len(keys))
	for i, r := range c.DoMultiCache(ctx, cmds...) {
		err := r.Error()
		switch {
		case vk.IsValkeyNil(err):
			out[i].Absent = true
		case err != nil:
			out[i].Err = err
		}
	}
	return out
}

// invalidated is the client's invalidation hook; keys nil means every key (a
// connection was lost or the server flushed).
func (s *Store) invalidated(msgs []vk.ValkeyMessage) {
	var keys []string
	if msgs != nil {
		keys = make([]string, 0, len(msgs))
		for _, m := range msgs {
			if k, err := m.ToString(); err == nil {
				keys = append(keys, k)
			}
		}
	}
	s.hub.Invalidate(keys)
}
