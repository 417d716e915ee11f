package zookeeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/go-zookeeper/zk"
)

// fenceChild is the persistent child of a name's znode that keeps the
// name's last fence (decimal). Every fence of the name is issued above it
// and written to it in one multi-op with the holder's node (see
// [Store.nodeFence]). Being persistent, it also keeps the name's container
// from being deleted: a name's last fence outlives its holds.
const fenceChild = "fence"

// maxFenceTries bounds the compare-and-set rounds of one fence: each lost
// round means another grant of the name issued a fence meanwhile.
const maxFenceTries = 100

// errNodeGone reports that a node is gone before its fence was written: a
// hold that ended (released, reaped, or its session expired) takes no fence.
var errNodeGone = errors.New("the holder's node is gone: no fence")

// wallFloor is the clock floor of a fence: this process's wall clock in
// milliseconds × 1000, as on every dlock store.
func wallFloor() int64 { return time.Now().UnixMilli() * 1000 }

// known is a node's data and version as this store last wrote or read them
// (a node just created: its data, version 0), saving a read.
type known struct {
	d   nodeData
	ver int32
}

// fenceOf returns the fence of held node i (path; own, when known, is its
// data): for a re-entry the hold's (the fence of the owner's first node,
// recorded in this node's data too); for a reader the name's current fence
// (the fence child), or a new one when the name has none; for every other
// grant the node's own, issued once by [Store.nodeFence].
func (s *Store) fenceOf(kind string, mode store.Mode, dir, path string, es []entry, i int, own *known) (int64, error) {
	if f := s.cached(path); f != 0 {
		return f, nil
	}
	if own != nil && own.d.Fence > 0 {
		return own.d.Fence, nil
	}
	switch {
	case kind == "r":
		first := dir + "/" + es[ownerFirst(es, es[i].owner)].name
		if first == path {
			return s.nodeFence(dir, path, own)
		}
		f, err := s.nodeFence(dir, first, nil)
		if errors.Is(err, errNodeGone) {
			// The hold's first node went since the listing: ask again
			// (this node may now be the hold's first).
			return 0, errAnchorGone
		}
		if err != nil {
			return 0, err
		}
		return s.keepFence(path, f, own)
	case mode == store.ModeRead:
		return s.readFence(dir, path, own)
	}
	return s.nodeFence(dir, path, own)
}

// nodeFence returns the fence of the node at path, issuing it if the node
// has none yet: max(last + 1, clock floor), last being the name's fence
// child (0 when absent).
// The fence is written in one multi-op that sets the node's data (with its
// version: it fails if the node is gone or another grant of it wrote a
// fence meanwhile) and sets the fence child (with its version: it fails if
// another grant of the name issued a fence since it was read); a lost
// round is tried again. A node that is gone takes no fence (errNodeGone):
// its hold ended (released, reaped, its session expired), and a fence
// issued to it could come after the next holder's.
func (s *Store) nodeFence(dir, path string, own *known) (int64, error) {
	for range maxFenceTries {
		f, err := s.issue(dir, path, own, false)
		if !errors.Is(err, errLostRound) {
			return f, err
		}
		own = nil // read both again
	}
	return 0, fmt.Errorf("no fence after %d rounds: the name's fence changed every time", maxFenceTries)
}

// issue is one round of [Store.nodeFence]: errLostRound when another write
// to the node or the fence child came first. With readerOnly, it issues
// only when the name has no fence yet and otherwise returns the name's
// current fence (a reader's).
func (s *Store) issue(dir, path string, own *known, readerOnly bool) (int64, error) {
	if own == nil {
		k, err := s.readNode(path)
		if err != nil {
			return 0, err
		}
		own = k
	}
	if own.d.Fence > 0 {
		return own.d.Fence, nil
	}
	last, exists, set, err := s.lastFence(dir)
	if err != nil {
		return 0, err
	}
	if readerOnly && exists && last > 0 {
		return last, nil
	}
	f := max(last+1, s.floor())
	d := own.d
	d.Fence = f
	data, _ := json.Marshal(d)
	if err := s.multi(&zk.SetDataRequest{Path: path, Data: data, Version: own.ver}, set(f)); err != nil {
		return 0, err
	}
	return f, nil
}

// readFence returns a reader's fence: the name's current fence, the last
// one issued; a name with none (no grant but readers yet) issues one to
// this reader's node, which later readers then share (of readers racing to
// issue the first, one creates the fence child, the others read it).
func (s *Store) readFence(dir, path string, own *known) (int64, error) {
	for range maxFenceTries {
		f, err := s.issue(dir, path, own, true)
		if !errors.Is(err, errLostRound) {
			return f, err
		}
		own = nil
	}
	return 0, fmt.Errorf("no fence after %d rounds", maxFenceTries)
}

// keepFence records a re-entry's fence f (its hold's) in the data of its
// own node at path, unless the node already has one, which it returns.
func (s *Store) keepFence(path string, f int64, own *known) (int64, error) {
	for range maxFenceTries {
		if own == nil {
			k, err := s.readNode(path)
			if err != nil {
				return 0, err
			}
			own = k
		}
		if own.d.Fence > 0 {
			return own.d.Fence, nil
		}
		d := own.d
		d.Fence = f
		data, _ := json.Marshal(d)
		_, err := s.conn.Set(path, data, own.ver)
		switch {
		case err == nil:
			return f, nil
		case errors.Is(err, zk.ErrNoNode):
			return 0, errNodeGone
		case errors.Is(err, zk.ErrBadVersion):
			own = nil
		default:
			return 0, err
		}
	}
	return 0, fmt.Errorf("no fence after %d rounds", maxFenceTries)
}

// readNode reads the data and version of the node at path.
func (s *Store) readNode(path string) (*known, error) {
	b, st, err := s.conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, errNodeGone
	}
	if err != nil {
		return nil, err
	}
	k := &known{ver: st.Version}
	_ = json.Unmarshal(b, &k.d) // not ours: no fence recorded
	return k, nil
}

// currentFence is the name's last fence as its fence child records it (0:
// none).
func (s *Store) currentFence(dir string) int64 {
	b, _, err := s.conn.Get(dir + "/" + fenceChild)
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseInt(string(b), 10, 64)
	return f
}

// lastFence reads the name's last fence, whether the fence child exists,
// and the operation that sets the fence child to a new fence only if it is
// still as read.
func (s *Store) lastFence(dir string) (int64, bool, func(int64) any, error) {
	fp := dir + "/" + fenceChild
	b, st, err := s.conn.Get(fp)
	if err == nil {
		last, _ := strconv.ParseInt(string(b), 10, 64)
		return last, true, func(f int64) any {
			return &zk.SetDataRequest{Path: fp, Data: []byte(strconv.FormatInt(f, 10)), Version: st.Version}
		}, nil
	}
	if !errors.Is(err, zk.ErrNoNode) {
		return 0, false, nil, err
	}
	// No fence child: the name's first grant, or the first since an older
	// build, whose fences (czxids, below 2^40 while the ensemble's epoch is
	// below 256) are far below any clock floor. Creating the child fails
	// if another grant did first.
	return 0, false, func(f int64) any {
		return &zk.CreateRequest{Path: fp, Data: []byte(strconv.FormatInt(f, 10)), Acl: s.acl}
	}, nil
}

// errLostRound reports a fence's multi-op that another write beat: the
// fence child or the node changed since they were read.
var errLostRound = errors.New("the name's fence changed meanwhile")

// multi runs a fence's multi-op: ops[0] writes the holder's node, the rest
// the fence child. A failure of ops[0] because the node is gone is
// errNodeGone; a version conflict or a fence child created meanwhile is
// errLostRound.
func (s *Store) multi(ops ...any) error {
	res, err := s.conn.Multi(ops...)
	if err == nil && len(res) != len(ops) {
		return errors.New("short multi-op reply")
	}
	if err == nil {
		return nil
	}
	if len(res) == len(ops) {
		if errors.Is(res[0].Error, zk.ErrNoNode) {
			return errNodeGone
		}
		for _, r := range res {
			if errors.Is(r.Error, zk.ErrBadVersion) || errors.Is(r.Error, zk.ErrNodeExists) || errors.Is(r.Error, zk.ErrNoNode) {
				// ErrNoNode here: the fence child read went since (only by
				// hand); read again.
				return errLostRound
			}
		}
	}
	return err
}
