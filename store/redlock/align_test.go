package redlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// TestFencesAgreeOnReusedName checks that nodes which saw the same grants
// issue the same fence: once a name's counters exist, taking it again and
// again needs no fence write-back. The write-back script is the only caller
// of PTTL on an uncontended name, so the nodes' PTTL calls count them. With
// fences from each node's clock (before 2026-11), nodes that straddled a
// millisecond differed: 36 write-backs in 100 grants on one machine.
func TestFencesAgreeOnReusedName(t *testing.T) {
	c := startNodes(t, 5)
	s := newRedlock(t, c.nodes())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last int64
	grant := func(i int) {
		t.Helper()
		req := store.Request{Name: "reused", Token: "t" + strconv.Itoa(i), TTL: 10 * time.Second, Mode: store.ModeMutex}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired || g.Fence <= last {
			t.Fatalf("grant %d = %+v, %v; want a fence above %d", i, g, err, last)
		}
		last = g.Fence
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release %d = %v", i, err)
		}
	}
	// The first grant of the name through the Store reads each node's
	// clock, and nodes may differ then; write-backs align the counters
	// within a few grants (a node that answered late is raised when it is
	// next among the granting majority).
	aligned := func() bool {
		want := c.get(t, 0, "{lock:reused}:fence")
		for i := range c.srvs {
			if c.get(t, i, "{lock:reused}:fence") != want {
				return false
			}
		}
		return true
	}
	i := 0
	for ; i < 2 || !aligned(); i++ {
		if i == 50 {
			t.Fatal("the nodes' counters still differ after 50 grants")
		}
		grant(i)
	}
	for _, srv := range c.srvs {
		if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
	const n = 100
	for j := range n {
		grant(i + j)
	}
	writeBacks := 0
	for i, srv := range c.srvs {
		info, err := srv.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		calls := commandCalls(info, "pttl")
		t.Logf("node %d: %d PTTL, %d INCR, %d TIME, %d EVALSHA calls", i, calls, commandCalls(info, "incr"), commandCalls(info, "time"), commandCalls(info, "evalsha"))
		writeBacks += calls
	}
	// Aligned counters stay aligned: every node executes every grant's
	// INCR. One write-back is allowed for a request a node never got (a
	// node timeout on a loaded machine).
	if writeBacks > 1 {
		t.Errorf("%d fence write-backs in %d grants of one name on aligned counters, want none", writeBacks, n)
	}
}

// TestFencesAgreeOnFreshNames checks the proposed fence floor: nodes with no
// counter for a name take the floor store/redlock proposes to all of them,
// so a grant of a fresh name needs no fence write-back either. Without the
// proposal each node issued its own clock's floor, and nodes that
// straddled a millisecond needed one.
func TestFencesAgreeOnFreshNames(t *testing.T) {
	c := startNodes(t, 5)
	s := newRedlock(t, c.nodes())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grant := func(i int) {
		t.Helper()
		req := store.Request{Name: "fresh-" + strconv.Itoa(i), Token: "t", TTL: 10 * time.Second, Mode: store.ModeMutex}
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Fatalf("grant %d = %+v, %v", i, g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release %d = %v", i, err)
		}
	}
	grant(0) // scripts loaded
	for _, srv := range c.srvs {
		if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
	const n = 100
	for i := range n {
		grant(1 + i)
	}
	writeBacks := 0
	for _, srv := range c.srvs {
		info, err := srv.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		writeBacks += commandCalls(info, "pttl")
	}
	// A node that runs the script more than 20 ms after the client read
	// its clock (a loaded machine) issues its own floor instead.
	if writeBacks > 3 {
		t.Errorf("%d fence write-backs in %d grants of fresh names, want about none", writeBacks, n)
	}
}

// commandCalls returns the calls of cmd (lower case) in an INFO
// commandstats reply, 0 when it has none.
func commandCalls(info, cmd string) int {
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}
