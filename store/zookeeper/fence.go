package zookeeper

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/dlock-dev/dlock/store"
)

// fenceOf returns the fence of held node i: its czxid; for a re-entry the
// hold's (see holdFence); for a reader the current fence (recorded in the
// lock's znode data by every other grant), or its own when there is none.
func (s *Store) fenceOf(kind string, mode store.Mode, dir, path string, es []entry, i int) (int64, error) {
	if f := s.cached(path); f != 0 {
		return f, nil
	}
	var fence int64
	if kind == "r" {
		f, err := s.holdFence(dir, es[ownerFirst(es, es[i].owner)])
		if err != nil {
			return 0, err
		}
		fence = f
	} else {
		if mode == store.ModeRead {
			b, _, err := s.conn.Get(dir)
			if err != nil {
				return 0, err
			}
			if f, err := strconv.ParseInt(string(b), 10, 64); err == nil && f > 0 {
				return f, nil
			}
		}
		ok, st, err := s.conn.Exists(path)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, errors.New("node vanished")
		}
		fence = st.Czxid
	}
	if mode != store.ModeRead {
		// Readers after this grant, of any kind, get its fence.
		if _, err := s.conn.Set(dir, []byte(strconv.FormatInt(fence, 10)), -1); err != nil {
			return 0, err
		}
	}
	return fence, nil
}

// holdFence returns the fence of the reentrant hold whose first node is e:
// the fence this store knows for it, else the one its data records (a
// re-entry's node outlives the first acquisition's), else its czxid.
func (s *Store) holdFence(dir string, e entry) (int64, error) {
	path := dir + "/" + e.name
	if f := s.cached(path); f != 0 {
		return f, nil
	}
	b, st, err := s.conn.Get(path)
	if err != nil {
		return 0, err
	}
	var d nodeData
	if json.Unmarshal(b, &d) == nil && d.Fence > 0 {
		return d.Fence, nil
	}
	return st.Czxid, nil
}
