package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
	case dlock.ModeElection:
		return "e", nil
	}
	return "", fmt.Errorf("%w: etcd store mode %v", dlock.ErrNotSupported, m)
}

var kinds = []string{"m", "r", "w", "f", "s", "e"}

var kindMode = map[string]dlock.Mode{"m": dlock.ModeMutex, "r": dlock.ModeReentrant, "w": dlock.ModeRead, "f": dlock.ModeFair, "s": dlock.ModeSemaphore, "e": dlock.ModeElection}

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
	Value string     `json:"v,omitempty"`  // election: the leader's value
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
// writer holds a read-write lock, or def when only queue places are left
// (a writer's intent at the head holds nothing yet).
func (vw *view) heldMode(kind string, def dlock.Mode) dlock.Mode {
	held := false
	for i, e := range vw.entries {
		if !vw.claimed(kind, i) {
			continue
		}
		if e.v.Mode == dlock.ModeWrite {
			return dlock.ModeWrite
		}
		held = true
	}
	if !held {
		return def
	}
	return kindMode[kind]
}

// claimed reports whether entry i holds the lock and was granted: not a
// queue place, even at the head.
func (vw *view) claimed(kind string, i int) bool {
	return vw.entries[i].v.Held && vw.holds(kind, i)
}

// otherHold reports a hold of another kind on the name (a name is one
// lock): its mode and remaining time.
func (s *Store) otherHold(vw *view) (dlock.Mode, time.Duration, bool) {
	for _, k := range kinds {
		ov := vw.others[k]
		if ov == nil {
			continue
		}
		for i := range ov.entries {
			if ov.claimed(k, i) { // a queue place at the head holds nothing yet
				return ov.heldMode(k, kindMode[k]), s.refusal(k, ov, -1, 0).RetryAfter, true
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
// the first key (mutex, fair, writer, leader), any permit (semaphore: every key is
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
