package zookeeper

import (
	"errors"
	"strconv"

	"github.com/dlock-dev/dlock"
)

// fenceOf returns the fence of held node i: its czxid; for a re-entry the
// first acquisition's; for a reader the last writer's (recorded in the
// lock's znode data), or its own when there has been no writer.
func (s *Store) fenceOf(kind string, mode dlock.Mode, dir, path string, es []entry, i int) (int64, error) {
	if f := s.cached(path); f != 0 {
		return f, nil
	}
	if kind == "r" {
		path = dir + "/" + es[0].name
	}
	if mode == dlock.ModeRead {
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
	if mode != dlock.ModeRead {
		// Readers after this grant, of any kind, get its fence.
		if _, err := s.conn.Set(dir, []byte(strconv.FormatInt(st.Czxid, 10)), -1); err != nil {
			return 0, err
		}
	}
	return st.Czxid, nil
}
