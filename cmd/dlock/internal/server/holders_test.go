package server

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store/memory"
)

// Issue 38 on the HTTP service: who holds a lock (owner, since, age,
// data) in its state and the list, a minimum hold, max hold kept on the
// store so that every replica caps alike, and the operator's
// force-release.

// owners returns the owners of a state answer.
func owners(t *testing.T, st map[string]any) []map[string]any {
	t.Helper()
	raw, ok := st["owners"].([]any)
	if !ok {
		t.Fatalf("state %v has no owners list", st)
	}
	out := make([]map[string]any, len(raw))
	for i, o := range raw {
		out[i] = o.(map[string]any)
	}
	return out
}

// TestV1Owners: the owner and data an acquire names are shown, with the
// grant time and age, by the lock's state and the list; without an owner
// the hold names the client's address; each reader is its own hold; in a
// reentrant lock the owner is also who re-enters.
func TestV1Owners(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	before := time.Now().Add(-time.Second).UnixMilli() // the store's clock is this process's
	wantCode(t, "acquire", e.post("/v1/locks/job/acquire", `{"mode":"mutex","owner":"web-1/4242","data":"build 7"}`), http.StatusOK)
	st := e.get("/v1/locks/job").json(t)
	hs := owners(t, st)
	if len(hs) != 1 {
		t.Fatalf("state owners = %v, want one", hs)
	}
	o := hs[0]
	if o["owner"] != "web-1/4242" || o["data"] != "build 7" {
		t.Errorf("owner = %v, want web-1/4242 with data \"build 7\"", o)
	}
	if since, _ := o["since"].(float64); int64(since) < before || int64(since) > time.Now().UnixMilli() {
		t.Errorf("since = %v, want the grant's time (after %d)", o["since"], before)
	}
	if age, ok := o["ageMs"].(float64); !ok || age < 0 {
		t.Errorf("ageMs = %v, want a non-negative age", o["ageMs"])
	}
	if o["fence"] != st["fence"] {
		t.Errorf("owner fence = %v, want the lock's %v", o["fence"], st["fence"])
	}

	// No owner named: the client's address.
	wantCode(t, "acquire without owner", e.post("/v1/locks/anon/acquire", `{}`), http.StatusOK)
	if o := owners(t, e.get("/v1/locks/anon").json(t)); len(o) != 1 || !strings.HasPrefix(o[0]["owner"].(string), "127.0.0.1:") {
		t.Errorf("owners without an owner named = %v, want the client's address 127.0.0.1:PORT", o)
	}
	// Readers: one hold each.
	wantCode(t, "reader 1", e.post("/v1/locks/doc/acquire", `{"mode":"shared","owner":"r1"}`), http.StatusOK)
	wantCode(t, "reader 2", e.post("/v1/locks/doc/acquire", `{"mode":"shared","owner":"r2"}`), http.StatusOK)
	got := map[string]bool{}
	for _, o := range owners(t, e.get("/v1/locks/doc").json(t)) {
		got[o["owner"].(string)] = true
	}
	if len(got) != 2 || !got["r1"] || !got["r2"] {
		t.Errorf("readers' owners = %v, want r1 and r2", got)
	}
	// Reentrant: the owner re-enters, and is the one hold's owner.
	wantCode(t, "reentrant", e.post("/v1/locks/re/acquire", `{"owner":"w1"}`), http.StatusOK)
	r := e.post("/v1/locks/re/acquire", `{"owner":"w1"}`)
	wantCode(t, "re-entry", r, http.StatusOK)
	if r.json(t)["count"] != 2.0 {
		t.Errorf("re-entry count = %v, want 2", r.json(t)["count"])
	}
	if o := owners(t, e.get("/v1/locks/re").json(t)); len(o) != 1 || o[0]["owner"] != "w1" {
		t.Errorf("reentrant owners = %v, want one hold of w1", o)
	}
	// A fair lock with an owner is a fair lock, not a reentrant one.
	r = e.post("/v1/locks/f/acquire", `{"fair":true,"owner":"q1"}`)
	wantCode(t, "fair with owner", r, http.StatusOK)
	if r.json(t)["mode"] != "fair" {
		t.Errorf("fair acquire with owner granted mode %v, want fair", r.json(t)["mode"])
	}

	// The list carries the same owners.
	var lb struct {
		Locks []struct {
			Name   string
			Owners []struct{ Owner, Data string }
		}
	}
	if err := json.Unmarshal(e.get("/v1/locks").body, &lb); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range lb.Locks {
		if l.Name == "job" {
			found = len(l.Owners) == 1 && l.Owners[0].Owner == "web-1/4242" && l.Owners[0].Data == "build 7"
		}
	}
	if !found {
		t.Errorf("list = %s, want job owned by web-1/4242 with its data", e.get("/v1/locks").body)
	}
	// A free lock: no owners, an empty list.
	if o := owners(t, e.get("/v1/locks/free").json(t)); len(o) != 0 {
		t.Errorf("free lock owners = %v, want none", o)
	}
}

// TestV1OwnerOfCredential: with an auth file, a hold acquired without an
// owner names the credential, "<tenant>/<name>"; a scoped token does not
// see the owners of names out of its scope.
func TestV1OwnerOfCredential(t *testing.T) {
	file := `{"tokens":[
  {"tenant":"billing","name":"invoicer","sha256":"` + HashToken(tokA) + `","prefixes":["billing-"],"access":"read-write"},
  {"tenant":"team-b","sha256":"` + HashToken(tokB) + `","prefixes":["team-b/"],"access":"read-write"}
]}`
	e := newEnv(t, memory.New(), Config{AuthFile: writeAuthFile(t, t.TempDir(), file), SnapshotInterval: time.Hour})
	a, b := bearerOf(tokA), bearerOf(tokB)
	wantCode(t, "acquire", e.post("/v1/locks/billing-run/acquire", `{}`, a...), http.StatusOK)
	if o := owners(t, e.get("/v1/locks/billing-run", a...).json(t)); len(o) != 1 || o[0]["owner"] != "billing/invoicer" {
		t.Errorf("owners = %v, want billing/invoicer", o)
	}
	wantCode(t, "acquire by an unnamed entry", e.post("/v1/locks/team-b%2Fx/acquire", `{}`, b...), http.StatusOK)
	if o := owners(t, e.get("/v1/locks/team-b%2Fx", b...).json(t)); len(o) != 1 || !strings.HasPrefix(o[0]["owner"].(string), "team-b/127.0.0.1:") {
		t.Errorf("owners = %v, want team-b/ and the client's address", o)
	}
	wantCode(t, "state out of scope", e.get("/v1/locks/billing-run", b...), http.StatusForbidden)
	if body := string(e.get("/v1/locks", b...).body); strings.Contains(body, "invoicer") {
		t.Errorf("team-b's list shows billing's owner: %s", body)
	}
}

// TestV1HoldRecordBadInput: an owner, data or minHoldMs the API refuses is
// a 400 naming the field, and nothing is held.
func TestV1HoldRecordBadInput(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	for _, c := range []struct{ body, field string }{
		{`{"data":"` + strings.Repeat("x", 1025) + `"}`, "data"},
		{`{"mode":"mutex","owner":"a\u0001b"}`, "owner"},
		{`{"mode":"mutex","owner":"` + strings.Repeat("o", 257) + `"}`, "owner"},
		{`{"minHoldMs":-1}`, "minHoldMs"},
		{`{"mode":"shared","minHoldMs":1000}`, "minHoldMs"},
		{`{"owner":"w1","minHoldMs":1000}`, "minHoldMs"},
		{`{"mode":"write","minHoldMs":1000}`, "minHoldMs"},
		{`{"mode":"shared","limit":2,"minHoldMs":1000}`, "minHoldMs"},
		{`{"minHoldMs":5000,"maxHoldMs":1000}`, "minHoldMs"},
		{`{"minHoldMs":"1s"}`, "minHoldMs"},
		{`{"data":7}`, "data"},
	} {
		r := e.post("/v1/locks/bad/acquire", c.body)
		wantCode(t, c.body, r, http.StatusBadRequest)
		if f := r.json(t)["field"]; f != c.field {
			t.Errorf("acquire %.60s: field = %v, want %s", c.body, f, c.field)
		}
	}
	if st := e.get("/v1/locks/bad").json(t); st["held"] != false {
		t.Errorf("after refused acquires, state = %v, want free", st)
	}
	// 1024 bytes of data is accepted.
	wantCode(t, "1 KiB of data", e.post("/v1/locks/ok/acquire", `{"data":"`+strings.Repeat("x", 1024)+`"}`), http.StatusOK)
}

// TestV1MinHold: a mutex released before its minHoldMs stays held until
// grant + minHoldMs (the release answers 200), then frees itself.
func TestV1MinHold(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	const minHold = 1500 * time.Millisecond
	asked := time.Now()
	r := e.post("/v1/locks/minutely/acquire", `{"ttlMs":60000,"minHoldMs":1500}`)
	wantCode(t, "acquire", r, http.StatusOK)
	tok, fence := r.json(t)["token"].(string), r.json(t)["fence"].(float64)
	wantCode(t, "early release", e.post("/v1/locks/minutely/release", `{"token":"`+tok+`"}`), http.StatusOK)
	if st := e.get("/v1/locks/minutely").json(t); st["held"] != true && time.Since(asked) < minHold {
		t.Errorf("state right after an early release = %v, want held until the min hold", st)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = e.post("/v1/locks/minutely/acquire", `{"ttlMs":1000}`)
		if r.code == http.StatusOK {
			// The first grant came after asked, so no second one before
			// asked + the min hold.
			if d := time.Since(asked); d < minHold {
				t.Errorf("granted again %v after the first acquire was asked, within its min hold of %v", d, minHold)
			}
			if f := r.json(t)["fence"].(float64); f <= fence {
				t.Errorf("next fence %v, want above the first hold's %v", f, fence)
			}
			return
		}
		wantCode(t, "acquire within the min hold", r, http.StatusConflict)
		if time.Now().After(deadline) {
			t.Fatalf("name still held 30s after a release with minHoldMs 1500")
		}
		time.Sleep(20 * time.Millisecond) // pacing, not synchronisation
	}
}

// TestV1ForceRelease: the operator's force-release ends every hold of a
// name without the token, answers the holds it ended, sends a "forced"
// event naming who forced and who held, leaves the holder's next extend a
// 410 and the next grant a higher fence. With an auth file it needs admin
// access.
func TestV1ForceRelease(t *testing.T) {
	const admin = "admin-secret-token"
	file := `{"tokens":[
  {"tenant":"ops","name":"alice","sha256":"` + HashToken(admin) + `","prefixes":[""],"access":"admin"},
  {"tenant":"team-a","sha256":"` + HashToken(tokA) + `","prefixes":[""],"access":"read-write"}
]}`
	var logged lockedBuf
	e := newEnv(t, memory.New(), Config{AuthFile: writeAuthFile(t, t.TempDir(), file), SnapshotInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	a, ops := bearerOf(tokA), bearerOf(admin)
	stream := openStreamAs(t, e, admin)
	r := e.post("/v1/locks/stuck/acquire", `{"ttlMs":60000,"mode":"mutex","owner":"batch-7","minHoldMs":50000}`, a...)
	wantCode(t, "acquire", r, http.StatusOK)
	tok, fence := r.json(t)["token"].(string), r.json(t)["fence"].(float64)

	r = e.post("/v1/locks/stuck/force-release", ``, a...)
	wantCode(t, "force-release by a read-write token", r, http.StatusForbidden)
	if r.json(t)["error"] != "not admin" {
		t.Errorf("refusal = %s, want error \"not admin\"", r.body)
	}
	if st := e.get("/v1/locks/stuck", a...).json(t); st["held"] != true {
		t.Fatalf("after a refused force-release, state = %v, want held", st)
	}

	r = e.post("/v1/locks/stuck/force-release", `{}`, ops...)
	wantCode(t, "force-release by admin", r, http.StatusOK)
	var fb struct {
		By    string
		Ended []struct {
			Owner string
			Fence float64
		}
	}
	if err := json.Unmarshal(r.body, &fb); err != nil {
		t.Fatal(err)
	}
	if fb.By != "ops/alice" || len(fb.Ended) != 1 || fb.Ended[0].Owner != "batch-7" || fb.Ended[0].Fence != fence {
		t.Errorf("force-release answered %s, want by ops/alice, ended batch-7 at fence %v", r.body, fence)
	}
	stream.until("the forced event", func(event string, data []byte) bool {
		if event != "forced" {
			return false
		}
		var ev eventBody
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Name != "stuck" || ev.By != "ops/alice" || len(ev.Owners) != 1 || ev.Owners[0] != "batch-7" || ev.Mode != "mutex" {
			t.Errorf("forced event = %s, want stuck by ops/alice, owners [batch-7], mode mutex", data)
		}
		return true
	})
	if line := `msg="dlock: lock force-released" name=stuck by=ops/alice owners=[batch-7]`; !strings.Contains(logged.String(), line) {
		t.Errorf("log = %q, want a line with %s", logged.String(), line)
	}
	if st := e.get("/v1/locks/stuck", a...).json(t); st["held"] != false {
		t.Errorf("after force-release (a min hold too), state = %v, want free", st)
	}
	wantCode(t, "the forced holder's extend", e.post("/v1/locks/stuck/extend", `{"token":"`+tok+`"}`, a...), http.StatusGone)
	r = e.post("/v1/locks/stuck/acquire", `{}`, a...)
	wantCode(t, "next acquire", r, http.StatusOK)
	if f := r.json(t)["fence"].(float64); f <= fence {
		t.Errorf("next fence %v, want above the forced hold's %v", f, fence)
	}
	// Nobody holds it: an empty list, no event.
	wantCode(t, "release", e.post("/v1/locks/stuck/release", `{"token":"`+r.json(t)["token"].(string)+`"}`, a...), http.StatusOK)
	r = e.post("/v1/locks/stuck/force-release", ``, ops...)
	wantCode(t, "force-release of a free lock", r, http.StatusOK)
	if !strings.Contains(string(r.body), `"ended":[]`) {
		t.Errorf("force-release of a free lock = %s, want ended []", r.body)
	}
	wantCode(t, "force-release with a body field", e.post("/v1/locks/stuck/force-release", `{"token":"x"}`, ops...), http.StatusBadRequest)
}

// openStreamAs is openStream with a bearer token (none: ""), for at most
// 30 s: a stream that never sends what the test waits for then ends, and
// the test fails instead of hanging.
func openStreamAs(t *testing.T, e *env, token string) *stream {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/events", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("GET /v1/events: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &stream{t, sc}
}

// TestReplicasMaxHoldOnStore is part 4 of issue 38 on two `dlock serve`
// replicas over one store (a real redis-server, and the memory store): an extend through the replica that did
// not grant the lease is capped by the max hold recorded with the hold on
// the store, exactly as on the granting one, and once the max hold is
// reached both refuse with 410. (Before, replica B extended to the full
// ttlMs asked, and A, told the lease was served elsewhere, forgot its max
// hold: A then accepted extends up to twice the max hold.)
func TestReplicasMaxHoldOnStore(t *testing.T) {
	for _, p := range pairs {
		if p.name != "memory" && p.name != "valkey" {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			sa, sb := p.new(t)
			testReplicasMaxHold(t, newEnv(t, sa, Config{}), newEnv(t, sb, Config{}))
		})
	}
}

func testReplicasMaxHold(t *testing.T, a, b *env) {
	const maxHold = 3 * time.Second
	r := a.post("/v1/locks/bounded/acquire", `{"ttlMs":60000,"maxHoldMs":3000}`)
	granted := time.Now() // after the grant: its max hold ends by granted + maxHold
	wantCode(t, "acquire on a", r, http.StatusOK)
	tok, fence := r.json(t)["token"].(string), r.json(t)["fence"].(float64)
	body := `{"token":"` + tok + `","ttlMs":60000}`
	capped := func(what string, sent time.Time, r response) {
		t.Helper()
		ttl := r.json(t)["ttlMs"].(float64)
		// ttlMs is rounded up to the millisecond.
		if end := sent.Add(time.Duration(ttl-1) * time.Millisecond); end.After(granted.Add(maxHold)) {
			t.Fatalf("%s answered ttlMs %v: the lease would outlive its max hold by %v", what, ttl, end.Sub(granted.Add(maxHold)))
		}
	}

	// Through B, which does not know the lease: capped, with its fence.
	sent := time.Now()
	r = b.post("/v1/locks/bounded/extend", body)
	wantCode(t, "extend on b", r, http.StatusOK)
	capped("extend on b", sent, r)
	if f := r.json(t)["fence"]; f != fence {
		t.Errorf("extend on b answered fence %v, want the lease's %v", f, fence)
	}
	// Then alternately through A and B until both refuse; no answer may
	// take the lease past its max hold.
	envs := []*env{a, b}
	deadline := time.Now().Add(30 * time.Second)
	var refused [2]bool
	for i := 0; !refused[0] || !refused[1]; i++ {
		sent := time.Now()
		r := envs[i%2].post("/v1/locks/bounded/extend", body)
		if r.code == http.StatusGone {
			refused[i%2] = true
			continue
		}
		wantCode(t, "extend", r, http.StatusOK)
		capped("extend on replica "+"ab"[i%2:i%2+1], sent, r)
		if time.Now().After(deadline) {
			t.Fatalf("lease with maxHoldMs 3000 still extendable after 30s")
		}
		time.Sleep(50 * time.Millisecond) // pacing, not synchronisation
	}
	// The name frees itself on the store at the max hold.
	for {
		r = b.post("/v1/locks/bounded/acquire", `{"ttlMs":1000}`)
		if r.code == http.StatusOK {
			break
		}
		wantCode(t, "acquire after the max hold", r, http.StatusConflict)
		if time.Now().After(deadline) {
			t.Fatalf("name still held 30s after the grant of a lease with maxHoldMs 3000")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplicasForcedEvent: a force-release through one replica is sent
// through the store to the other replicas' event streams, naming who
// forced it and who held.
func TestReplicasForcedEvent(t *testing.T) {
	srv := testredis.Start(t)
	a, b := newEnv(t, dialValkey(t, srv.URL()), Config{}), newEnv(t, dialValkey(t, srv.URL()), Config{})
	stream := openStreamAs(t, b, "")
	wantCode(t, "acquire on a", a.post("/v1/locks/shared-job/acquire", `{"mode":"mutex","owner":"worker-3"}`), http.StatusOK)
	r := a.post("/v1/locks/shared-job/force-release", ``)
	wantCode(t, "force-release on a", r, http.StatusOK)
	by := r.json(t)["by"].(string)
	stream.until("a's forced event on b's stream", func(event string, data []byte) bool {
		if event != "forced" {
			return false
		}
		var ev eventBody
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Name != "shared-job" || ev.By != by || len(ev.Owners) != 1 || ev.Owners[0] != "worker-3" || ev.Replica != a.srv.rep.ID() {
			t.Errorf("forced event on b = %s, want shared-job by %s, owners [worker-3], from replica %s", data, by, a.srv.rep.ID())
		}
		return true
	})
}
