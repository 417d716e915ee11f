package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// kind is a pattern's namespace: each pattern keeps its own keys under a
// name (ModeRead and ModeWrite share the read-write lock's).
type kind uint8

const (
	kindMutex kind = iota
	kindReentrant
	kindRW
	kindFair
	kindSemaphore
	kindElection
)

// kinds is every kind, in the order State looks for a name's pattern.
var kinds = []kind{kindMutex, kindReentrant, kindRW, kindFair, kindSemaphore, kindElection}

// segment is the kind's segment of its keys: <prefix>l/<segment>/... Keys
// written by every dlock version use these letters, so they never change.
func (k kind) segment() string {
	return [...]string{
		kindMutex:     "m",
		kindReentrant: "r",
		kindRW:        "w",
		kindFair:      "f",
		kindSemaphore: "s",
		kindElection:  "e",
	}[k]
}

// mode is the mode a kind's holders hold in (ModeRead for the read-write
// lock: a writer's key says ModeWrite itself).
func (k kind) mode() store.Mode {
	return [...]store.Mode{
		kindMutex:     store.ModeMutex,
		kindReentrant: store.ModeReentrant,
		kindRW:        store.ModeRead,
		kindFair:      store.ModeFair,
		kindSemaphore: store.ModeSemaphore,
		kindElection:  store.ModeElection,
	}[k]
}

// kindOf is the kind whose keys a mode's holds are.
func kindOf(m store.Mode) (kind, error) {
	switch m {
	case store.ModeMutex:
		return kindMutex, nil
	case store.ModeReentrant:
		return kindReentrant, nil
	case store.ModeRead, store.ModeWrite:
		return kindRW, nil
	case store.ModeFair:
		return kindFair, nil
	case store.ModeSemaphore:
		return kindSemaphore, nil
	case store.ModeElection:
		return kindElection, nil
	}
	return 0, fmt.Errorf("%w: etcd store mode %v", store.ErrNotSupported, m)
}

// kindOfSegment is the kind whose keys have segment seg; ok is false for a
// segment no dlock version writes.
func kindOfSegment(seg string) (k kind, ok bool) {
	for _, k := range kinds {
		if k.segment() == seg {
			return k, true
		}
	}
	return 0, false
}

// Key segments that are not kinds: the name's fence key lives under
// <prefix>f/n/..., a semaphore's slots under <prefix>s/s/..., and a
// sub-segment of a lock's keys tells a writer's key ("w/") from every
// other key ("h/").
const (
	fenceSegment = "n"
	holdSub      = "h/"
	writerSub    = "w/"
)

// nameKey renders a name under the key segment seg so that no name's keys
// are a prefix of another's: seg, a slash, the name's length, a colon, the
// name.
func nameKey(seg, name string) string {
	return seg + "/" + strconv.Itoa(len(name)) + ":" + name
}

// lockPrefix is the prefix of the holder and queue keys of one lock:
// <prefix>l/<kind>/<len>:<name>/<sub>/<token>, where kind is the kind's
// segment and sub is "w" for a writer and "h" for every other key, so that
// readers can check in one comparison that no writer key exists.
func (s *Store) lockPrefix(k kind, name string) string {
	return s.prefix + "l/" + nameKey(k.segment(), name) + "/"
}

// sub is the sub-segment of a key of mode m.
func sub(m store.Mode) string {
	if m == store.ModeWrite {
		return writerSub
	}
	return holdSub
}

// key is the key of req's hold or queue place.
func (s *Store) key(k kind, req store.Request) string {
	return s.lockPrefix(k, req.Name) + sub(req.Mode) + req.Token
}

// fenceKey is the key whose value is the name's last exclusive fence (the
// current fence readers get), one for every kind: a name is one lock. It has
// no lease. A key written by an older build holds "": its ModRevision was
// the fence.
func (s *Store) fenceKey(name string) string {
	return s.prefix + "f/" + nameKey(fenceSegment, name)
}

// lastFence is the fence the name's fence key fk records: its value, or its
// ModRevision for a key of an older build; 0 when there is none.
func lastFence(fk *mvccpb.KeyValue) int64 {
	if fk == nil {
		return 0
	}
	if f, err := strconv.ParseInt(string(fk.Value), 10, 64); err == nil && f > 0 {
		return f
	}
	return fk.ModRevision
}

// wallFloor is the clock floor of a fence: this process's wall clock in
// milliseconds × 1000, as on every dlock store.
func wallFloor() int64 { return time.Now().UnixMilli() * 1000 }

// nextFence is the fence of a new grant on a name whose fence key is fk:
// max(last + 1, clock floor), the rule of every dlock store. last + 1 keeps
// fences strictly rising while etcd keeps its data, whatever the clocks do
// (the grant's transaction commits only if fk is unchanged: see
// [Store.fenceUnchanged]); the floor keeps them rising when etcd comes back from
// a snapshot or a backup whose fence key is stale (revisions, the fences of
// builds before, start again from the snapshot's there).
func (s *Store) nextFence(fk *mvccpb.KeyValue) int64 {
	return max(lastFence(fk)+1, s.floor())
}

// fenceUnchanged holds while the fence key is as read into fk (absent when
// fk is nil): no other grant issued a fence since.
func (s *Store) fenceUnchanged(name string, fk *mvccpb.KeyValue) clientv3.Cmp {
	key := s.fenceKey(name)
	if fk == nil {
		return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", fk.ModRevision)
}

// fencePut records fence as the name's last fence.
func (s *Store) fencePut(name string, fence int64) clientv3.Op {
	return clientv3.OpPut(s.fenceKey(name), strconv.FormatInt(fence, 10))
}

// slotKey is permit i of a semaphore: a key created with the permit's hold
// (same lease), so that two grants compete only for the same slot.
func (s *Store) slotKey(name string, i int) string {
	return s.slotPrefix(name) + strconv.Itoa(i)
}

// slotPrefix is the prefix of a semaphore's slot keys.
func (s *Store) slotPrefix(name string) string {
	return s.prefix + "s/" + nameKey(kindSemaphore.segment(), name) + "/"
}

// val is the value of a holder or queue key.
type val struct {
	Mode  store.Mode `json:"m"`
	Owner string     `json:"o,omitempty"`
	Held  bool       `json:"h,omitempty"`  // claimed: granted to its token
	TTL   int64      `json:"t"`            // lease length asked for, ms
	Fence int64      `json:"f,omitempty"`  // the grant's fence (a key of an older build: 0 until rewritten after the grant)
	Limit int        `json:"l,omitempty"`  // semaphore
	Slot  int        `json:"s,omitempty"`  // semaphore: slot index + 1
	Hold  int64      `json:"ht,omitempty"` // queue key: the hold's TTL to claim with, ms
	Value string     `json:"v,omitempty"`  // election: the leader's value

	// The hold's record (issue 38): who holds, the caller's data, the grant
	// time and the hold's bounds. A queue key keeps them for its claim
	// (Since 0 until then); a re-entry copies its owner's first hold's.
	Who   string `json:"w,omitempty"`  // Request.Holder, shown only
	Data  string `json:"d,omitempty"`  // Request.Data
	Since int64  `json:"at,omitempty"` // the grant: the granting process's wall clock, Unix ms
	Min   int64  `json:"mn,omitempty"` // MinHold, ms (exclusive kinds only)
	Max   int64  `json:"mx,omitempty"` // MaxHold, ms
	// Rel marks a hold released before Since + Min: its token holds
	// nothing, the key keeps the name until its lease ends there.
	Rel bool `json:"x,omitempty"`
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

// fence of a claimed entry: the fence its value records, or, for a key
// granted by an older build (whose fences were revisions) and not rewritten
// since, its ModRevision.
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
	others  map[kind]*view   // the name's other kinds, at the same revision
}

// heldMode is the mode of the lock's holders (of kind k): ModeWrite while a
// writer holds a read-write lock, or def when only queue places are left
// (a writer's intent at the head holds nothing yet).
func (vw *view) heldMode(k kind, def store.Mode) store.Mode {
	held := false
	for i, e := range vw.entries {
		if !vw.claimed(k, i) {
			continue
		}
		if e.v.Mode == store.ModeWrite {
			return store.ModeWrite
		}
		held = true
	}
	if !held {
		return def
	}
	return k.mode()
}

// claimed reports whether entry i holds the lock and was granted: not a
// queue place, even at the head.
func (vw *view) claimed(k kind, i int) bool {
	return vw.entries[i].v.Held && vw.holds(k, i)
}

// otherHold reports a hold of another kind on the name (a name is one
// lock): its mode and remaining time.
func (s *Store) otherHold(vw *view) (store.Mode, time.Duration, bool) {
	for _, k := range kinds {
		ov := vw.others[k]
		if ov == nil {
			continue
		}
		for i := range ov.entries {
			if ov.claimed(k, i) { // a queue place at the head holds nothing yet
				return ov.heldMode(k, k.mode()), s.refusal(k, ov, -1, 0).RetryAfter, true
			}
		}
	}
	return 0, 0, false
}

// othersUnchanged are the comparisons that make a grant hold at commit
// only if no key of the name's other kinds was written since vw was read.
func (s *Store) othersUnchanged(mine kind, name string, vw *view) []clientv3.Cmp {
	var cmps []clientv3.Cmp
	for _, k := range kinds {
		if k != mine {
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
func (vw *view) holds(k kind, i int) bool {
	e := vw.entries[i]
	switch k {
	case kindReentrant:
		return vw.entries[0].v.Owner == e.v.Owner
	case kindSemaphore:
		return true
	case kindRW:
		if e.v.Mode == store.ModeWrite {
			return i == 0
		}
		for _, p := range vw.entries[:i] {
			if p.v.Mode == store.ModeWrite && p.token != e.v.Owner {
				return false
			}
		}
		return true
	}
	return i == 0
}

// read gets the view of a lock in one round trip.
func (s *Store) read(ctx context.Context, mine kind, name string) (*view, error) {
	pfx := s.lockPrefix(mine, name)
	ops := []clientv3.Op{
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(s.fenceKey(name)),
	}
	if mine == kindSemaphore {
		ops = append(ops, clientv3.OpGet(s.slotPrefix(name), clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	n := len(ops)
	for _, k := range kinds {
		if k != mine {
			ops = append(ops, clientv3.OpGet(s.lockPrefix(k, name), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)))
		}
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	vw := parseView(pfx, resp.Header.Revision, resp.Responses[0].GetResponseRange().Kvs)
	vw.others = map[kind]*view{}
	for _, k := range kinds {
		if k != mine {
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
	if mine == kindSemaphore {
		vw.slots = map[int]bool{}
		for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
			sk := string(kv.Key)
			if i, err := strconv.Atoi(sk[strings.LastIndexByte(sk, '/')+1:]); err == nil {
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

func validate(req store.Request) error {
	if err := store.ValidName(req.Name); err != nil {
		return err
	}
	if req.Token == "" {
		return &store.InvalidError{Field: "token", Reason: "must not be empty"}
	}
	if req.TTL <= 0 {
		return &store.InvalidError{Field: "ttl", Reason: "must be positive"}
	}
	if req.Mode == store.ModeSemaphore && req.Limit < 1 {
		return &store.InvalidError{Field: "limit", Reason: "must be at least 1"}
	}
	return nil
}

// seconds is an etcd lease TTL covering d: whole seconds, rounded up.
func seconds(d time.Duration) int64 { return max(1, int64((d+time.Second-1)/time.Second)) }

func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// errRetry reports that the lock changed between read and write.
var errRetry = errors.New("etcd: lock changed; retry")
