package faults

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/dlock-dev/dlock/e2e/faults/wire"
)

// register is the protected resource: one integer cell served over loopback
// HTTP. In fenced mode it is what Kleppmann's storage service does with
// fencing tokens: it remembers the highest fence it has seen (on reads and
// writes) and refuses any operation that carries a lower one. Counting reads
// matters for read-modify-write: a holder that read under fence 7 cannot
// write after a holder with fence 8 has read, so an accepted update is never
// lost. In unfenced mode it accepts everything, as a resource that ignores
// the token would, and still records what it would have refused.
type register struct {
	fenced bool

	mu      sync.Mutex
	val     int64
	maxSeen int64
	ops     []regOp
	srv     *httptest.Server
}

// regOp is one operation as the register saw it.
type regOp struct {
	W, Iter  int
	Write    bool
	Fence    int64
	Val      int64 // written value, or value returned by a read
	Accepted bool
	Stale    bool  // Fence < highest fence seen before it
	T        int64 // CLOCK_MONOTONIC at the register
}

func newRegister(t testing.TB, fenced bool) *register {
	r := &register{fenced: fenced}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *register) addr() string { return r.srv.Listener.Addr().String() }

func (r *register) serve(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	wid, _ := strconv.Atoi(q.Get("w"))
	iter, _ := strconv.Atoi(q.Get("i"))
	fence, err1 := strconv.ParseInt(q.Get("fence"), 10, 64)
	val, err2 := strconv.ParseInt(q.Get("val"), 10, 64)
	if err1 != nil || err2 != nil {
		http.Error(w, "bad fence or val", http.StatusBadRequest)
		return
	}
	var write bool
	switch req.URL.Path {
	case "/read":
	case "/write":
		write = true
	default:
		http.NotFound(w, req)
		return
	}
	r.mu.Lock()
	op := regOp{W: wid, Iter: iter, Write: write, Fence: fence, T: wire.Now()}
	op.Stale = fence < r.maxSeen
	op.Accepted = !r.fenced || !op.Stale
	if op.Accepted {
		r.maxSeen = max(r.maxSeen, fence)
		if write {
			r.val = val
		}
	}
	if write {
		op.Val = val
	} else {
		op.Val = r.val
	}
	r.ops = append(r.ops, op)
	r.mu.Unlock()
	json.NewEncoder(w).Encode(struct {
		OK  bool  `json:"ok"`
		Val int64 `json:"val"`
	}{op.Accepted, op.Val})
}

// snapshot returns the operations so far and the current value.
func (r *register) snapshot() ([]regOp, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]regOp(nil), r.ops...), r.val
}
