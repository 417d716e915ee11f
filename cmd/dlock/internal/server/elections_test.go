package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
)

// TestElections walks the election API on every store: campaign, the
// leader (never its token), a refused campaign with Retry-After, extend,
// resign, 410 for a token that no longer leads, and a standby that waits
// and is elected with a higher term.
func TestElections(t *testing.T) {
	forEachStore(t, electionWalk)
}

// TestElectionsRedlock walks the election API on a Redlock store over three
// redis-servers.
func TestElectionsRedlock(t *testing.T) {
	var stores []store.Store
	for range 3 {
		srv := testredis.Start(t)
		s, err := valkey.Dial(t.Context(), srv.URL())
		if err != nil {
			t.Fatalf("valkey.Dial(%q) = %v", srv.URL(), err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	rl, err := redlock.New(stores)
	if err != nil {
		t.Fatalf("redlock.New = %v", err)
	}
	t.Cleanup(func() { rl.Close() })
	electionWalk(t, rl)
}

// electionWalk is the walk of TestElections on store.
func electionWalk(t *testing.T, st store.Store) {
	e := newEnv(t, st, Config{})
	r := e.get("/v1/elections/jobs")
	wantCode(t, "leader before any campaign", r, http.StatusOK)
	if strings.TrimSpace(string(r.body)) != `{"name":"jobs","leader":null}` {
		t.Errorf("leader before any campaign = %s, want leader null", r.body)
	}
	r = e.post("/v1/elections/jobs/campaign", `{"value":"host-a:8080","ttlMs":5000}`)
	wantCode(t, "campaign", r, http.StatusOK)
	var lead leadBody
	json.Unmarshal(r.body, &lead)
	if lead.Name != "jobs" || lead.Value != "host-a:8080" || lead.Term <= 0 || len(lead.Token) != 32 || lead.TTLMs != 5000 {
		t.Errorf("campaign = %s", r.body)
	}
	r = e.get("/v1/elections/jobs")
	wantCode(t, "leader", r, http.StatusOK)
	var el electionBody
	json.Unmarshal(r.body, &el)
	if el.Leader == nil || el.Leader.Value != "host-a:8080" || el.Leader.Term != lead.Term || el.Leader.TTLMs <= 0 || el.Leader.TTLMs > 5000 {
		t.Errorf("leader = %s; want host-a:8080, term %d", r.body, lead.Term)
	}
	if strings.Contains(string(r.body), lead.Token) {
		t.Errorf("leader reveals the token: %s", r.body)
	}
	if m := e.get("/v1/locks/jobs").json(t); m["mode"] != "election" || m["fence"] != float64(lead.Term) || m["held"] != true {
		t.Errorf("lock state of an election = %v, want mode election, fence %d (the term)", m, lead.Term)
	}
	r = e.post("/v1/elections/jobs/campaign", `{"value":"host-b"}`)
	wantCode(t, "campaign while another leads", r, http.StatusConflict)
	if ra := r.header.Get("Retry-After"); ra == "" || r.json(t)["heldMode"] != "election" {
		t.Errorf("refused campaign: Retry-After %q, body %s", ra, r.body)
	}
	r = e.post("/v1/locks/jobs/acquire", `{}`)
	wantCode(t, "mutex on an election's name", r, http.StatusConflict)
	r = e.post("/v1/elections/jobs/extend", fmt.Sprintf(`{"token":%q,"ttlMs":8000}`, lead.Token))
	wantCode(t, "extend", r, http.StatusOK)
	if r.json(t)["term"] != float64(lead.Term) {
		t.Errorf("extend = %s, want term %d", r.body, lead.Term)
	}

	type result struct {
		r   response
		err error
	}
	standby := make(chan result, 1)
	go func() {
		r, err := e.try(t.Context(), http.MethodPost, "/v1/elections/jobs/campaign", `{"value":"host-b","waitMs":20000}`)
		standby <- result{r, err}
	}()
	r = e.post("/v1/elections/jobs/resign", fmt.Sprintf(`{"token":%q}`, lead.Token))
	wantCode(t, "resign", r, http.StatusOK)
	res := <-standby
	if res.err != nil {
		t.Fatal(res.err)
	}
	wantCode(t, "waiting campaign", res.r, http.StatusOK)
	var next leadBody
	json.Unmarshal(res.r.body, &next)
	if next.Term <= lead.Term || next.Value != "host-b" {
		t.Errorf("standby elected with %s; want a term above %d", res.r.body, lead.Term)
	}
	r = e.post("/v1/elections/jobs/resign", fmt.Sprintf(`{"token":%q}`, lead.Token))
	wantCode(t, "resign by a former leader", r, http.StatusGone)
	r = e.post("/v1/elections/jobs/extend", fmt.Sprintf(`{"token":%q}`, lead.Token))
	wantCode(t, "extend by a former leader", r, http.StatusGone)
	r = e.post("/v1/elections/jobs/resign", fmt.Sprintf(`{"token":%q}`, next.Token))
	wantCode(t, "resign", r, http.StatusOK)
}

// TestElectionBadInput: 400 naming the field, never a 500; "election" is
// not a mode of the lease API.
func TestElectionBadInput(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	for _, c := range []struct{ path, body, field string }{
		{"/v1/elections/x/campaign", `{}`, "value"},
		{"/v1/elections/x/campaign", `{"value":1}`, "value"},
		{"/v1/elections/x/campaign", fmt.Sprintf(`{"value":%q}`, strings.Repeat("v", dlock.MaxValueLen+1)), "value"},
		{"/v1/elections/x/campaign", `{"value":"a","ttlMs":5}`, "ttlMs"},
		{"/v1/elections/x/campaign", `{"value":"a","waitMs":-1}`, "waitMs"},
		{"/v1/elections/x/campaign", `{"value":"a","lockDelayMs":3600001}`, "lockDelayMs"},
		{"/v1/elections/x/campaign", `{"value":"a","extra":1}`, "extra"},
		{"/v1/elections/x/resign", `{}`, "token"},
		{"/v1/elections/x/resign", `{"token":"` + strings.Repeat("a", 32) + `","ttlMs":1000}`, "ttlMs"},
		{"/v1/elections/x/extend", `{"token":"` + strings.Repeat("a", 32) + `","ttlMs":1}`, "ttlMs"},
		{"/v1/locks/x/acquire", `{"mode":"election"}`, "mode"},
		{"/v1/locks/x/acquire", `{"lockDelayMs":-5}`, "lockDelayMs"},
	} {
		r := e.post(c.path, c.body)
		wantCode(t, c.path+" "+c.body[:min(len(c.body), 40)], r, http.StatusBadRequest)
		if f := r.json(t)["field"]; f != c.field {
			t.Errorf("%s %s: field %v, want %s", c.path, c.body[:min(len(c.body), 40)], f, c.field)
		}
	}
	r := e.post("/v1/elections/x/resign", `{"token":"not-a-token"}`)
	wantCode(t, "resign with a token never granted", r, http.StatusGone)
	r = e.get("/v1/elections/%01x")
	wantCode(t, "leader of a bad name", r, http.StatusBadRequest)
}

// TestElectionObserve: the observe stream sends the leadership when it
// starts and one event per change, never the token.
func TestElectionObserve(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/elections/obs/observe", nil)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("GET observe: %v", err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	next := func() electionBody {
		t.Helper()
		var event string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = line[7:]
			case strings.HasPrefix(line, "data: "):
				if event != "leader" {
					t.Fatalf("event %q, want leader", event)
				}
				var b electionBody
				if err := json.Unmarshal([]byte(line[6:]), &b); err != nil {
					t.Fatalf("data %s: %v", line[6:], err)
				}
				return b
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return electionBody{}
	}
	if b := next(); b.Name != "obs" || b.Leader != nil {
		t.Fatalf("first event = %+v, want nobody leading", b)
	}
	var terms []int64
	for i := range 3 {
		r := e.post("/v1/elections/obs/campaign", fmt.Sprintf(`{"value":"v%d"}`, i))
		wantCode(t, "campaign", r, http.StatusOK)
		var lead leadBody
		json.Unmarshal(r.body, &lead)
		b := next()
		if b.Leader == nil || b.Leader.Value != lead.Value || b.Leader.Term != lead.Term {
			t.Errorf("event after campaign %d = %+v, want %s term %d", i, b, lead.Value, lead.Term)
		}
		terms = append(terms, lead.Term)
		wantCode(t, "resign", e.post("/v1/elections/obs/resign", fmt.Sprintf(`{"token":%q}`, lead.Token)), http.StatusOK)
		if b := next(); b.Leader != nil {
			t.Errorf("event after resign %d = %+v, want nobody leading", i, b)
		}
	}
	if !(terms[0] < terms[1] && terms[1] < terms[2]) {
		t.Errorf("terms %v, want strictly increasing", terms)
	}
}

// TestMulti walks the multi-lock API on every store: all or nothing (a
// 409 names the held name and leaves the others free), fences per name,
// extend, release, 410 for a released token.
func TestMulti(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		r := e.post("/v1/locks/acct-2/acquire", `{}`)
		wantCode(t, "acquire acct-2", r, http.StatusOK)
		held := r.json(t)["token"].(string)
		r = e.post("/v1/multi/acquire", `{"names":["acct-1","acct-2","acct-3"],"ttlMs":5000}`)
		wantCode(t, "multi acquire over a held name", r, http.StatusConflict)
		if m := r.json(t); m["name"] != "acct-2" || m["heldMode"] != "mutex" || r.header.Get("Retry-After") == "" {
			t.Errorf("409 = %s (Retry-After %q), want name acct-2", r.body, r.header.Get("Retry-After"))
		}
		for _, n := range []string{"acct-1", "acct-3"} {
			if m := e.get("/v1/locks/" + n).json(t); m["held"] != false {
				t.Errorf("%s after a refused multi acquire = %v, want free", n, m)
			}
		}
		wantCode(t, "release acct-2", e.post("/v1/locks/acct-2/release", fmt.Sprintf(`{"token":%q}`, held)), http.StatusOK)

		r = e.post("/v1/multi/acquire", `{"names":["acct-3","acct-1","acct-2"],"ttlMs":5000}`)
		wantCode(t, "multi acquire", r, http.StatusOK)
		var g multiGrantBody
		json.Unmarshal(r.body, &g)
		if len(g.Fences) != 3 || g.TTLMs != 5000 || len(g.Token) != 32 {
			t.Errorf("multi acquire = %s", r.body)
		}
		for n, f := range g.Fences {
			if m := e.get("/v1/locks/" + n).json(t); m["held"] != true || m["fence"] != float64(f) {
				t.Errorf("%s = %v, want held with fence %d", n, m, f)
			}
		}
		names := `["acct-1","acct-2","acct-3"]`
		r = e.post("/v1/multi/extend", fmt.Sprintf(`{"token":%q,"names":%s,"ttlMs":8000}`, g.Token, names))
		wantCode(t, "multi extend", r, http.StatusOK)
		r = e.post("/v1/multi/release", fmt.Sprintf(`{"token":%q,"names":%s}`, g.Token, names))
		wantCode(t, "multi release", r, http.StatusOK)
		r = e.post("/v1/multi/release", fmt.Sprintf(`{"token":%q,"names":%s}`, g.Token, names))
		wantCode(t, "second multi release", r, http.StatusGone)
		r = e.post("/v1/multi/extend", fmt.Sprintf(`{"token":%q,"names":%s}`, g.Token, names))
		wantCode(t, "extend after release", r, http.StatusGone)
		for _, c := range []struct{ body, field string }{
			{`{}`, "names"},
			{`{"names":[]}`, "names"},
			{`{"names":["a",""]}`, "names"},
			{`{"names":["a"],"ttlMs":1}`, "ttlMs"},
			{`{"names":["a"],"waitMs":300001}`, "waitMs"},
		} {
			r := e.post("/v1/multi/acquire", c.body)
			wantCode(t, "multi acquire "+c.body, r, http.StatusBadRequest)
			if f := r.json(t)["field"]; f != c.field {
				t.Errorf("multi acquire %s: field %v, want %s", c.body, f, c.field)
			}
		}
		r = e.post("/v1/multi/release", `{"names":["a"]}`)
		wantCode(t, "multi release without token", r, http.StatusBadRequest)
	})
}

// TestLockDelayHTTP: a lease acquired with lockDelayMs that runs out keeps
// the name for the delay; one released frees it at once.
func TestLockDelayHTTP(t *testing.T) {
	e := newEnv(t, memory.New(), Config{})
	start := time.Now()
	r := e.post("/v1/locks/ld/acquire", `{"ttlMs":200,"lockDelayMs":60000}`)
	wantCode(t, "acquire with lockDelayMs", r, http.StatusOK)
	// Not extended: the lease runs out after 200ms (what is tested here is
	// time passing), and the name stays held.
	time.Sleep(time.Until(start.Add(400 * time.Millisecond)))
	r = e.post("/v1/locks/ld/acquire", `{}`)
	wantCode(t, "acquire during the lock-delay", r, http.StatusConflict)
	if ms := r.json(t)["retryAfterMs"].(float64); ms < 50_000 {
		t.Errorf("retryAfterMs during the lock-delay = %v, want about the delay", ms)
	}
	r = e.post("/v1/locks/ld2/acquire", `{"ttlMs":200,"lockDelayMs":60000}`)
	wantCode(t, "acquire ld2", r, http.StatusOK)
	tok := r.json(t)["token"].(string)
	wantCode(t, "release ld2", e.post("/v1/locks/ld2/release", fmt.Sprintf(`{"token":%q}`, tok)), http.StatusOK)
	wantCode(t, "acquire after a release", e.post("/v1/locks/ld2/acquire", `{}`), http.StatusOK)
}
