package redlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// This file holds what the hold's record (issue 38: Holder, Data, MinHold,
// MaxHold) changes in Acquire: the validity a MaxHold leaves, and the undo
// of a partial acquisition with a MinHold.

// holdTTL is how long a grant or an extension of req holds on a node: its
// TTL, capped by its MaxHold.
func holdTTL(req store.Request) time.Duration {
	if req.MaxHold > 0 {
		return min(req.TTL, req.MaxHold)
	}
	return req.TTL
}

// validity is what is left of a hold of req sent at start: its TTL (capped
// by its MaxHold) less the time since start and the drift margin.
func (s *Store) validity(req store.Request, start time.Time) time.Duration {
	ttl := holdTTL(req)
	return ttl - time.Since(start) - s.Drift(ttl)
}

// minHoldMode reports whether holds of mode m keep a MinHold.
func minHoldMode(m store.Mode) bool {
	return m == store.ModeMutex || m == store.ModeElection
}

// exclusiveMode reports whether a hold of mode m is the name's only hold.
func exclusiveMode(m store.Mode) bool {
	return m == store.ModeMutex || m == store.ModeWrite || m == store.ModeElection
}

// undoNode ends the acquisition's hold on node i, which granted it (ours)
// or failed (it may have). A Release is enough unless the hold keeps a
// MinHold: a node keeps such a hold to its grant + MinHold whatever the
// release, and a failed acquisition must not leave the name held on a
// minority that long (N replicas of a scheduled job that split the votes
// would all be refused for the whole interval). So on a node that granted
// it, while that grant is sure to be the only hold of the name there (a
// request sent now lands within the node timeout, before the grant's TTL
// can run out by the client's clock less the drift), undo ends it with the
// node's ForceRelease. Past that, it sends nothing: the node's hold ends at
// its TTL, about to run out, where a Release would keep it to its MinHold.
// On a node that failed, and on a repeat by the holder (whose first grant's
// MinHold stands), it releases.
func (s *Store) undoNode(ctx context.Context, a *acquisition, i int, grantedHere bool) error {
	if a.nodeReq.MinHold == 0 || !minHoldMode(a.req.Mode) || a.prev > 0 || !grantedHere {
		return s.nodes[i].Release(ctx, a.req)
	}
	if s.validity(a.req, a.start) <= a.timeout {
		return nil
	}
	if fr, ok := s.nodes[i].(store.ForceReleaser); ok {
		_, err := fr.ForceRelease(ctx, a.req.Name)
		return err
	}
	return s.nodes[i].Release(ctx, a.req)
}
