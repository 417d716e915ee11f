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
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/valkey"
)

// forEachPair runs fn with two handles on one store, as two replicas in
// two processes hold them: the memory store (one object: replicas in one
// process), and two connections to one redis-server.
func forEachPair(t *testing.T, fn func(t *testing.T, a, b dlock.Store)) {
	t.Run("memory", func(t *testing.T) {
		s := memory.New()
		fn(t, s, s)
	})
	t.Run("valkey", func(t *testing.T) {
		srv := testredis.Start(t)
		var h [2]dlock.Store
		for i := range h {
			s, err := valkey.Dial(t.Context(), srv.URL())
			if err != nil {
				t.Fatalf("valkey.Dial(%q) = %v", srv.URL(), err)
			}
			t.Cleanup(func() { s.Close() })
			h[i] = s
		}
		fn(t, h[0], h[1])
	})
}

// TestReplicasLeaseAnywhere: a lease taken through one replica is
// extended and released through another, in every mode, without the
// client naming the mode; and through the replica that granted it after
// that replica's own count of the lease ran out.
func TestReplicasLeaseAnywhere(t *testing.T) {
	forEachPair(t, func(t *testing.T, sa, sb dlock.Store) {
		a, b := newEnv(t, sa, Config{}), newEnv(t, sb, Config{})
		token := func(r response) string { return r.json(t)["token"].(string) }
		body := func(tok string) string { return `{"token":"` + tok + `"}` }

		// The granting replica's count runs out while the client extends
		// through the other; releasing through the first still works.
		tk := token(a.post("/v1/locks/m/acquire", `{"ttlMs":300}`))
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
			tk := token(a.post("/v1/locks/"+c.name+"/acquire", c.acquire))
			wantCode(t, c.name+": extend on b", b.post("/v1/locks/"+c.name+"/extend", `{"token":"`+tk+`","ttlMs":60000}`), http.StatusOK)
			wantCode(t, c.name+": release on b", b.post("/v1/locks/"+c.name+"/release", body(tk)), http.StatusOK)
			if st := a.get("/v1/locks/" + c.name).json(t); st["held"] != false {
				t.Errorf("%s: after the release on b, state = %v", c.name, st)
			}
		}

		// A fair waiter's queue place, given up through the other replica.
		holder := token(a.post("/v1/locks/q/acquire", `{"fair":true}`))
		const waiter = "0123456789abcdef0123456789abcdef"
		r := a.post("/v1/locks/q/acquire", `{"fair":true,"queue":true,"token":"`+waiter+`"}`)
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
	forEachPair(t, func(t *testing.T, sa, sb dlock.Store) {
		a, b := newEnv(t, sa, Config{}), newEnv(t, sb, Config{})
		waiting := make(chan struct{}, 1)
		testHookWaiting = func(string) { waiting <- struct{}{} }
		defer func() { testHookWaiting = nil }()
		for _, c := range []struct{ name, acquire string }{
			{"mutex", `{"ttlMs":60000}`},
			{"fair", `{"ttlMs":60000,"fair":true}`},
		} {
			tk := a.post("/v1/locks/"+c.name+"/acquire", c.acquire).json(t)["token"].(string)
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
			r := <-got
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
	srv := testredis.Start(t)
	var h [2]dlock.Store
	for i := range h {
		s, err := valkey.Dial(t.Context(), srv.URL())
		if err != nil {
			t.Fatalf("valkey.Dial = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		h[i] = s
	}
	a := newEnv(t, h[0], Config{SnapshotInterval: 100 * time.Millisecond})
	b := newEnv(t, h[1], Config{SnapshotInterval: 100 * time.Millisecond})
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
				if ev.Replica == a.srv.rep.id {
					heard = true
					return true
				}
			}
			return time.Now().After(deadline)
		})
	}
	sb.until("a snapshot counting 2 replicas", func(event string, data []byte) bool {
		var snap snapshotBody
		return event == "snapshot" && json.Unmarshal(data, &snap) == nil && snap.Replicas == 2 && snap.Replica == b.srv.rep.id
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
			if ev.Replica != b.srv.rep.id {
				t.Errorf("release event on a = %s, want b's (%s)", data, b.srv.rep.id)
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
		return event == "release" && ev.Name == "moved" && ev.Replica == b.srv.rep.id
	})
	if tot := a.srv.history.total(); tot.Released != 1 || tot.Acquired < 3 {
		t.Errorf("a's totals = %+v, want 1 release and both replicas' acquires", tot)
	}
}
