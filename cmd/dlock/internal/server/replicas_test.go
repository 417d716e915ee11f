package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

// pairs are two handles on one store each, as two replicas in two
// processes hold them: the memory store (one object: replicas in one
// process), two connections to one redis-server, two Redlock stores over
// the same three nodes, two PostgreSQL stores on one database, two etcd
// clients of one server.
var pairs = []struct {
	name string
	new  func(t *testing.T) (a, b store.Store)
}{
	{"memory", func(t *testing.T) (store.Store, store.Store) {
		s := memory.New()
		return s, s
	}},
	{"valkey", func(t *testing.T) (store.Store, store.Store) {
		srv := testredis.Start(t)
		return dialValkey(t, srv.URL()), dialValkey(t, srv.URL())
	}},
	{"redlock", func(t *testing.T) (store.Store, store.Store) {
		var urls []string
		for range 3 {
			urls = append(urls, testredis.Start(t).URL())
		}
		var h [2]store.Store
		for i := range h {
			var nodes []store.Store
			for _, u := range urls {
				nodes = append(nodes, dialValkey(t, u))
			}
			rl, err := redlock.New(nodes)
			if err != nil {
				t.Fatalf("redlock.New = %v", err)
			}
			t.Cleanup(func() { rl.Close() })
			h[i] = rl
		}
		return h[0], h[1]
	}},
	{"postgres", func(t *testing.T) (store.Store, store.Store) {
		srv := pgtest.Start(t)
		var h [2]store.Store
		for i := range h {
			s, err := postgres.New(t.Context(), srv.URL())
			if err != nil {
				t.Fatalf("postgres.New = %v", err)
			}
			t.Cleanup(func() { s.Close() })
			h[i] = s
		}
		return h[0], h[1]
	}},
	{"etcd", func(t *testing.T) (store.Store, store.Store) {
		srv := etcdtest.Start(t)
		var h [2]store.Store
		for i := range h {
			s, err := etcd.New(t.Context(), []string{srv.Endpoint()})
			if err != nil {
				t.Fatalf("etcd.New = %v", err)
			}
			t.Cleanup(func() { s.Close() })
			h[i] = s
		}
		return h[0], h[1]
	}},
}

func dialValkey(t *testing.T, url string) *valkey.Store {
	t.Helper()
	s, err := valkey.Dial(t.Context(), url)
	if err != nil {
		t.Fatalf("valkey.Dial(%q) = %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// forEachPair runs fn on each of pairs.
func forEachPair(t *testing.T, fn func(t *testing.T, a, b store.Store)) {
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			a, b := p.new(t)
			fn(t, a, b)
		})
	}
}

// TestReplicasLeaseAnywhere: a lease taken through one replica is
// extended and released through another, in every mode, without the
// client naming the mode; and through the replica that granted it after
// that replica's own count of the lease ran out.
func TestReplicasLeaseAnywhere(t *testing.T) {
	forEachPair(t, func(t *testing.T, sa, sb store.Store) {
		a, b := newEnv(t, sa, Config{}), newEnv(t, sb, Config{})
		token := func(r response) string { return r.json(t)["token"].(string) }
		body := func(tok string) string { return `{"token":"` + tok + `"}` }

		// The granting replica's count runs out while the client extends
		// through the other; releasing through the first still works.
		// A short lease, so that the count runs out soon; on a busy
		// machine a Redlock majority may come after it ran out (a 503),
		// so ask again a few times.
		short := a.post("/v1/locks/m/acquire", `{"ttlMs":1000}`)
		for i := 0; i < 5 && short.code != http.StatusOK; i++ {
			short = a.post("/v1/locks/m/acquire", `{"ttlMs":1000}`)
		}
		wantCode(t, "short acquire on a", short, http.StatusOK)
		tk := token(short)
		wantCode(t, "extend on b", b.post("/v1/locks/m/extend", `{"token":"`+tk+`","ttlMs":60000}`), http.StatusOK)
		a.waitEvent(dlock.EventLeaseLost, "m", dlock.EventRelease)
		wantCode(t, "extend on a after its count ran out", a.post("/v1/locks/m/extend", `{"token":"`+tk+`","ttlMs":60000}`), http.StatusOK)
		wantCode(t, "release on a", a.post("/v1/locks/m/release", body(tk)), http.StatusOK)
		if st := b.get("/v1/locks/m").json(t); st["held"] != false {
			t.Errorf("after the release, state = %v", st)
		}
		wantCode(t, "second release", b.post("/v1/locks/m/release", body(tk)), http.StatusGone)

		for _, c := range []struct{ name, acquire string }{
			{"read", `{"mode":"shared"}`},
			{"write", `{"mode":"write"}`},
			{"reentrant", `{"owner":"w1"}`},
			{"semaphore", `{"mode":"shared","limit":2}`},
			{"fair", `{"fair":true}`},
		} {
			r := a.post("/v1/locks/"+c.name+"/acquire", c.acquire)
			if r.code == http.StatusBadRequest && r.json(t)["error"] == "not supported" {
				continue
			}
			tk := token(r)
			wantCode(t, c.name+": extend on b", b.post("/v1/locks/"+c.name+"/extend", `{"token":"`+tk+`","ttlMs":60000}`), http.StatusOK)
			wantCode(t, c.name+": release on b", b.post("/v1/locks/"+c.name+"/release", body(tk)), http.StatusOK)
			if st := a.get("/v1/locks/" + c.name).json(t); st["held"] != false {
				t.Errorf("%s: after the release on b, state = %v", c.name, st)
			}
		}

		// A fair waiter's queue place, given up through the other replica.
		r := a.post("/v1/locks/q/acquire", `{"fair":true}`)
		if r.code == http.StatusBadRequest {
			return // no fair lock on this store
		}
		holder := token(r)
		const waiter = "0123456789abcdef0123456789abcdef"
		r = a.post("/v1/locks/q/acquire", `{"fair":true,"queue":true,"token":"`+waiter+`"}`)
		wantCode(t, "queued", r, http.StatusConflict)
		wantCode(t, "queue place released on b", b.post("/v1/locks/q/release", body(waiter)), http.StatusOK)
		if st := a.get("/v1/locks/q").json(t); st["queue"] != 0.0 {
			t.Errorf("after the queue place was released, state = %v", st)
		}
		wantCode(t, "holder released on b", b.post("/v1/locks/q/release", body(holder)), http.StatusOK)
		wantCode(t, "unknown token on b", b.post("/v1/locks/q/release", body(waiter)), http.StatusGone)
	})
}

// TestReplicasWake: a waiting acquire on one replica gets the lock when
// the holder releases it through another.
func TestReplicasWake(t *testing.T) {
	forEachPair(t, func(t *testing.T, sa, sb store.Store) {
		a, b := newEnv(t, sa, Config{}), newEnv(t, sb, Config{})
		waiting := make(chan struct{}, 1)
		testHookWaiting = func(string) { waiting <- struct{}{} }
		defer func() { testHookWaiting = nil }()
		for _, c := range []struct{ name, acquire string }{
			{"mutex", `{"ttlMs":60000}`},
			{"fair", `{"ttlMs":60000,"fair":true}`},
		} {
			r := a.post("/v1/locks/"+c.name+"/acquire", c.acquire)
			if r.code == http.StatusBadRequest {
				continue // not supported by this store
			}
			tk := r.json(t)["token"].(string)
			got := make(chan response, 1)
			go func() {
				r, err := b.try(t.Context(), http.MethodPost, "/v1/locks/"+c.name+"/acquire",
					strings.Replace(c.acquire, `"ttlMs":60000`, `"ttlMs":60000,"waitMs":60000`, 1))
				if err != nil {
					t.Error(err)
				}
				got <- r
			}()
			<-waiting
			if c.name == "fair" {
				// The waiter's queue place shows in the state.
				for deadline := time.Now().Add(30 * time.Second); a.get("/v1/locks/fair").json(t)["queue"] != 1.0; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the fair waiter never queued")
					}
				}
			}
			wantCode(t, c.name+": release on a", a.post("/v1/locks/"+c.name+"/release", `{"token":"`+tk+`"}`), http.StatusOK)
			r = <-got
			wantCode(t, c.name+": waiting acquire on b", r, http.StatusOK)
			if ev := b.waitEvent(dlock.EventAcquire, c.name); !ev.Waited {
				t.Logf("%s: the waiter got the lock at its first try (the release came first)", c.name)
			}
			b.post("/v1/locks/"+c.name+"/release", `{"token":"`+r.json(t)["token"].(string)+`"}`)
		}
	})
}

// stream reads /v1/events of e.
type stream struct {
	t  *testing.T
	sc *bufio.Scanner
}

func openStream(t *testing.T, e *env) *stream {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/events", nil)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("GET /v1/events: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &stream{t, sc}
}

// until reads events until pred accepts one, within 30 s.
func (s *stream) until(what string, pred func(event string, data []byte) bool) {
	s.t.Helper()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			s.t.Errorf("no %s within 30s", what)
		}
	}()
	var event string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			if pred(event, []byte(line[6:])) {
				return
			}
		}
	}
	s.t.Fatalf("stream ended before %s: %v", what, s.sc.Err())
}

// TestReplicasEvents: each replica's event stream, history and totals
// show the other replica's events, tagged with its replica ID, carried
// through the store; a lease released through another replica is reported
// once, by that replica.
func TestReplicasEvents(t *testing.T) {
	forEachPair(t, func(t *testing.T, ha, hb store.Store) {
		if _, ok := ha.(store.Broadcaster); !ok {
			t.Skip("a store of one process: nothing to share")
		}
		testReplicasEvents(t, ha, hb)
	})
}

func testReplicasEvents(t *testing.T, ha, hb store.Store) {
	a := newEnv(t, ha, Config{SnapshotInterval: 100 * time.Millisecond})
	b := newEnv(t, hb, Config{SnapshotInterval: 100 * time.Millisecond})
	sa, sb := openStream(t, a), openStream(t, b)

	// Until b hears a, acquire fresh names on a.
	heard := false
	for i := 0; !heard; i++ {
		if i == 100 {
			t.Fatal("b heard none of 100 acquires made on a")
		}
		name := "hello-" + string(rune('a'+i%26)) + time.Now().Format("150405.000000")
		a.post("/v1/locks/"+name+"/acquire", `{"ttlMs":60000}`)
		deadline := time.Now().Add(time.Second)
		sb.until("an event or snapshot", func(event string, data []byte) bool {
			if event == "acquire" {
				var ev eventBody
				json.Unmarshal(data, &ev)
				if ev.Replica == a.srv.rep.ID() {
					heard = true
					return true
				}
			}
			return time.Now().After(deadline)
		})
	}
	sb.until("a snapshot counting 2 replicas", func(event string, data []byte) bool {
		var snap snapshotBody
		return event == "snapshot" && json.Unmarshal(data, &snap) == nil && snap.Replicas == 2 && snap.Replica == b.srv.rep.ID()
	})

	// Granted on a, released on b: a stops tracking it without an event of
	// its own; both streams show b's release.
	tk := a.post("/v1/locks/moved/acquire", `{"ttlMs":60000}`).json(t)["token"].(string)
	wantCode(t, "release on b", b.post("/v1/locks/moved/release", `{"token":"`+tk+`"}`), http.StatusOK)
	if ev := a.waitEvent(dlock.EventRelease, "moved"); ev.Name != "moved" {
		t.Fatal(ev)
	}
	a.post("/v1/locks/marker/acquire", `{"ttlMs":60000}`)
	releases := 0
	sa.until("the marker", func(event string, data []byte) bool {
		var ev eventBody
		json.Unmarshal(data, &ev)
		if event == "release" && ev.Name == "moved" {
			releases++
			if ev.Replica != b.srv.rep.ID() {
				t.Errorf("release event on a = %s, want b's (%s)", data, b.srv.rep.ID())
			}
		}
		return event == "acquire" && ev.Name == "marker"
	})
	if releases != 1 {
		t.Errorf("a's stream showed %d release events of moved, want 1", releases)
	}
	sb.until("b's own release event", func(event string, data []byte) bool {
		var ev eventBody
		json.Unmarshal(data, &ev)
		return event == "release" && ev.Name == "moved" && ev.Replica == b.srv.rep.ID()
	})
	if tot := a.srv.history.total(); tot.Released != 1 || tot.Acquired < 3 {
		t.Errorf("a's totals = %+v, want 1 release and both replicas' acquires", tot)
	}
}
