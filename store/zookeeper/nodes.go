package zookeeper

import (
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/go-zookeeper/zk"
)

func kindOf(m store.Mode) (string, error) {
	switch m {
	case store.ModeMutex:
		return "m", nil
	case store.ModeReentrant:
		return "r", nil
	case store.ModeRead, store.ModeWrite:
		return "w", nil
	case store.ModeFair:
		return "f", nil
	case store.ModeSemaphore:
		return "s", nil
	case store.ModeElection:
		return "e", nil
	}
	return "", fmt.Errorf("%w: zookeeper store mode %v", store.ErrNotSupported, m)
}

var kindMode = map[string]store.Mode{"m": store.ModeMutex, "r": store.ModeReentrant, "w": store.ModeRead, "f": store.ModeFair, "s": store.ModeSemaphore, "e": store.ModeElection}

var b64 = base64.RawURLEncoding

// namesDir is the parent of every lock's znode.
const namesDir = "x"

// dir is the znode of one lock name, whatever its kind (a name is one lock:
// the nodes of every kind queue under it): <root>/x/n<base64url(name)>.
func (s *Store) dir(_, name string) string {
	return s.root + "/" + namesDir + "/n" + b64.EncodeToString([]byte(name))
}

// nodePrefix is the name of a holder or waiter node before ZooKeeper's
// sequence suffix: <k><m>[b]~<owner>~<token>-, k being the kind letter, m r
// (reader), w (writer) or x, b marking a node that entered beside its
// owner's hold (see holds), owner and token base64url-encoded.
func nodePrefix(req store.Request, beside bool) string {
	k, _ := kindOf(req.Mode)
	m := "x"
	switch req.Mode {
	case store.ModeRead:
		m = "r"
	case store.ModeWrite:
		m = "w"
	}
	if beside {
		m += "b"
	}
	return k + m + "~" + b64.EncodeToString([]byte(req.Owner)) + "~" + b64.EncodeToString([]byte(req.Token)) + "-"
}

type entry struct {
	name   string
	kind   byte // m, r, w, f, s or e
	mode   byte // r, w or x
	beside bool // entered beside its owner's hold
	owner  string
	token  string
	gen    int // times the node was taken into another session (see adopt)
	seq    int64
}

// heldMode is the store.Mode of node e's hold.
func (e entry) heldMode() store.Mode {
	if e.mode == 'w' {
		return store.ModeWrite
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
	parts := strings.SplitN(name[:len(name)-11], "~", 4)
	if len(parts) < 3 || len(parts[0]) < 2 || len(parts[0]) > 3 || len(parts[0]) == 3 && parts[0][2] != 'b' {
		return entry{}, false
	}
	gen := 0
	if len(parts) == 4 {
		if gen, err = strconv.Atoi(parts[3]); err != nil || gen < 1 {
			return entry{}, false
		}
	}
	owner, err1 := b64.DecodeString(parts[1])
	token, err2 := b64.DecodeString(parts[2])
	if err1 != nil || err2 != nil {
		return entry{}, false
	}
	return entry{name: name, kind: parts[0][0], mode: parts[0][1], beside: len(parts[0]) == 3, owner: string(owner), token: string(token), gen: gen, seq: seq}, true
}

// movedName is the name of node e once taken into another session (see
// adopt): the same prefix and sequence number, so the same place in the
// queue, and the next generation, so never a path used before.
func movedName(e entry) string {
	prefix := e.name[:len(e.name)-11]
	if e.gen > 0 {
		prefix = prefix[:strings.LastIndexByte(prefix, '~')]
	}
	return fmt.Sprintf("%s~%d-%010d", prefix, e.gen+1, e.seq)
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
// its kind decide: the first node (mutex, fair, writer, leader), the first limit
// nodes (semaphore), the nodes of the first node's owner (reentrant), a
// reader with no writer ahead other than the writer whose token is its
// owner (a downgrade).
//
// A re-entry and a downgrade reader enter beside a hold of their owner (its
// anchor) wherever they stand in the queue: such a node is created only in
// one multi-op with a check that its anchor still exists (see anchorOf), so
// it is created only while the owner holds, and it holds until deleted,
// keeping out every node that does not coexist with it, ahead of it or not.
func holds(_ string, es []entry, i, limit int) bool {
	e := es[i]
	if e.beside {
		return true
	}
	for j, p := range es {
		if j < i && p.kind != e.kind || p.beside && j != i && !besideOK(p, e) {
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

// besideOK reports whether node e may hold beside node b, which entered
// beside its owner's hold: a node of b's owner (reentrant), or for a
// downgrade reader its writer or another reader.
func besideOK(b, e entry) bool {
	switch {
	case b.kind != e.kind:
		return false
	case b.kind == 'r':
		return e.owner == b.owner
	}
	return e.mode == 'r' || e.token == b.owner
}

// anchorOf returns the index of the node whose hold a request of mode m and
// owner enters beside: a holding node of the same owner (a re-entry), or
// the holding writer whose token is a reader's owner (a downgrade); -1 if
// none.
func anchorOf(es []entry, m store.Mode, owner string) int {
	if owner == "" || m != store.ModeReentrant && m != store.ModeRead {
		return -1
	}
	for j, p := range es {
		re := m == store.ModeReentrant && p.kind == 'r' && p.owner == owner
		down := m == store.ModeRead && p.kind == 'w' && p.mode == 'w' && p.token == owner
		if (re || down) && holds("", es, j, 0) {
			return j
		}
	}
	return -1
}

// firstHolder returns the index of the first node of es that holds (-1 if
// none): its kind is the pattern holding the name.
func firstHolder(es []entry) int {
	for j := range es {
		if holds("", es, j, 0) {
			return j
		}
	}
	return -1
}

// ownerFirst returns the first node of es of kind r whose owner is owner:
// its fence is the reentrant hold's (-1 if none).
func ownerFirst(es []entry, owner string) int {
	for j, p := range es {
		if p.kind == 'r' && p.owner == owner {
			return j
		}
	}
	return -1
}

// nodeData is the data of a node: what a refused caller needs to know, and
// the hold's record (issue 38), written when the node is created and again
// by the grant's multi-op with its fence.
type nodeData struct {
	TTL   int64  `json:"t"` // ms
	Limit int    `json:"l,omitempty"`
	Fence int64  `json:"f,omitempty"` // its fence once issued (a re-entry's: its hold's)
	Value string `json:"v,omitempty"` // a leader's value (election)

	Holder  string        `json:"h,omitempty"` // [store.Request.Holder]
	Data    string        `json:"d,omitempty"` // [store.Request.Data]
	MinHold time.Duration `json:"n,omitempty"` // [store.Request.MinHold]
	MaxHold time.Duration `json:"x,omitempty"` // [store.Request.MaxHold]
	// Since is the grant in Unix ms by the ensemble's clock, written only
	// once the node's own mtime no longer is the grant's (an early release
	// kept by MinHold, a node taken into another session); 0: the mtime.
	Since int64 `json:"s,omitempty"`
	// Released marks a hold released before its MinHold ran out: it holds
	// the name until then, and its token holds nothing.
	Released bool `json:"z,omitempty"`
}

// recordOf is the data of a new node for req, with the hold's record. A
// re-entry keeps its hold's record (the first node's): it records none.
func recordOf(req store.Request, beside bool) nodeData {
	d := nodeData{TTL: req.TTL.Milliseconds(), Limit: req.Limit, Value: req.Value}
	if beside && req.Mode == store.ModeReentrant {
		return nodeData{TTL: d.TTL}
	}
	d.Holder, d.Data, d.MaxHold = req.Holder, req.Data, req.MaxHold
	if exclusive(req.Mode) {
		d.MinHold = req.MinHold
	}
	return d
}

// exclusive reports whether MinHold applies to mode m.
func exclusive(m store.Mode) bool {
	return m == store.ModeMutex || m == store.ModeFair || m == store.ModeElection
}

// ensure creates the lock's znode (a container, which ZooKeeper deletes
// once it is empty, until the name's fence child keeps it) and its parents.
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
