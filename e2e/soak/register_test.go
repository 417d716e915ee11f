package soak

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// register is the protected resource: one fenced integer cell per lock name.
// It remembers the highest fence seen on each cell (reads and writes) and
// refuses lower ones, and counts what it accepted, so that every increment
// of a read-modify-write must show in the final value: an accepted update
// that does not is a lost update, which only a repeated or reordered fence
// can cause. Workers reach it over HTTP (/<name>/read, /<name>/write), the
// in-process clients call op.
type register struct {
	mu    sync.Mutex
	cells map[string]*cell
	srv   *httptest.Server
}

type cell struct {
	val, maxSeen                 int64
	reads, writes, accepted      int64
	staleAccepted, staleRejected int64
	readsRejected                int64
}

func newRegister(t *testing.T) *register {
	r := &register{cells: map[string]*cell{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *register) addr() string { return r.srv.Listener.Addr().String() }

// op reads (write false) or writes val on name's cell under fence; it
// returns whether the cell accepted and the cell's value (read) or val.
func (r *register) op(name string, write bool, fence, val int64) (bool, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cells[name]
	if c == nil {
		c = &cell{}
		r.cells[name] = c
	}
	stale := fence < c.maxSeen
	if write {
		c.writes++
	} else {
		c.reads++
	}
	if stale {
		if write {
			c.staleRejected++
		} else {
			c.readsRejected++
		}
		return false, 0
	}
	c.maxSeen = fence
	if !write {
		return true, c.val
	}
	c.accepted++
	c.val = val
	return true, val
}

func (r *register) serve(w http.ResponseWriter, req *http.Request) {
	name, op, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
	q := req.URL.Query()
	fence, err1 := strconv.ParseInt(q.Get("fence"), 10, 64)
	val, err2 := strconv.ParseInt(q.Get("val"), 10, 64)
	if !ok || name == "" || (op != "read" && op != "write") || err1 != nil || err2 != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	acc, v := r.op(name, op == "write", fence, val)
	json.NewEncoder(w).Encode(struct {
		OK  bool  `json:"ok"`
		Val int64 `json:"val"`
	}{acc, v})
}

// regTotals sums the cells.
type regTotals struct {
	reads, writes, accepted, staleAccepted, staleRejected, readsRejected, lost int64
}

func (r *register) totals() regTotals {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s regTotals
	for _, c := range r.cells {
		s.reads += c.reads
		s.writes += c.writes
		s.accepted += c.accepted
		s.staleAccepted += c.staleAccepted
		s.staleRejected += c.staleRejected
		s.readsRejected += c.readsRejected
		// Every accepted write is an increment of the value it read.
		s.lost += c.accepted - c.val
	}
	return s
}
