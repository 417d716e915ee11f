package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/server/auth"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// writeAuthFile writes an auth file into a temporary directory and returns
// its path.
func writeAuthFile(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const (
	tokA      = "team-a-secret-token"
	tokB      = "team-b-secret-token"
	tokReader = "reader-secret-token"
)

func scopedFile() string {
	return `{"tokens":[
  {"tenant":"team-a","sha256":"` + HashToken(tokA) + `","prefixes":["team-a/"],"access":"read-write"},
  {"tenant":"team-b","sha256":"` + HashToken(tokB) + `","prefixes":["team-b/"],"access":"read-write"},
  {"tenant":"ops","sha256":"` + strings.ToUpper(HashToken(tokReader)) + `","prefixes":[""],"access":"read-only"}
]}`
}

func bearerOf(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// TestScopedTokens: a token scoped to team-a/ cannot see, acquire, extend
// or release team-b/x, even with team-b's lease token; lists, state and
// the event stream show it only names in scope; a read-only token reads
// everything and writes nothing; unknown tokens get 401.
func TestScopedTokens(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{AuthFile: writeAuthFile(t, t.TempDir(), scopedFile()), SnapshotInterval: time.Hour})
		a, b, reader := bearerOf(tokA), bearerOf(tokB), bearerOf(tokReader)

		r := e.post("/v1/locks/team-b%2Fx/acquire", `{"ttlMs":60000}`, b...)
		wantCode(t, "team-b acquires team-b/x", r, http.StatusOK)
		stolen := r.json(t)["token"].(string)

		// team-a's event stream, opened while team-b/x is held.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+tokA)
		stream, err := e.ts.Client().Do(req)
		if err != nil || stream.StatusCode != http.StatusOK {
			t.Fatalf("team-a GET /v1/events = %v, %v", stream, err)
		}
		defer stream.Body.Close()

		outOfScope := func(what string, r response) {
			t.Helper()
			wantCode(t, what, r, http.StatusForbidden)
			body := r.json(t)
			if body["error"] != "out of scope" || !strings.Contains(body["message"].(string), "team-a") {
				t.Errorf("%s: body %s, want error \"out of scope\" naming the tenant", what, r.body)
			}
		}
		outOfScope("team-a acquires team-b/x", e.post("/v1/locks/team-b%2Fx/acquire", `{}`, a...))
		outOfScope("team-a reads team-b/x", e.get("/v1/locks/team-b%2Fx", a...))
		outOfScope("team-a extends team-b/x with the stolen token", e.post("/v1/locks/team-b%2Fx/extend", `{"token":"`+stolen+`"}`, a...))
		outOfScope("team-a releases team-b/x with the stolen token", e.post("/v1/locks/team-b%2Fx/release", `{"token":"`+stolen+`"}`, a...))
		outOfScope("team-a releases a free team-b name", e.post("/v1/locks/team-b%2Fnone/release", `{"token":"`+stolen+`"}`, a...))
		outOfScope("team-a demo on team-b/x", e.post("/api/locks/simple/team-b%2Fx?durationMs=0", ``, a...))
		outOfScope("a name that only looks like team-a's", e.post("/v1/locks/team-a/acquire", `{}`, a...))
		// Elections and multi-locks: the election's name, and every name of
		// a multi-lock's body, must be in scope.
		stolenBody := `{"token":"` + stolen + `"}`
		outOfScope("team-a campaigns in team-b/x", e.post("/v1/elections/team-b%2Fx/campaign", `{"value":"a"}`, a...))
		outOfScope("team-a reads the leader of team-b/x", e.get("/v1/elections/team-b%2Fx", a...))
		outOfScope("team-a observes team-b/x", e.get("/v1/elections/team-b%2Fx/observe", a...))
		outOfScope("team-a extends team-b/x's leadership", e.post("/v1/elections/team-b%2Fx/extend", stolenBody, a...))
		outOfScope("team-a resigns team-b/x's leadership", e.post("/v1/elections/team-b%2Fx/resign", stolenBody, a...))
		multiOut := func(what string, r response) {
			t.Helper()
			outOfScope(what, r)
			if body := r.json(t); body["field"] != "names" || body["name"] != "team-b/x" {
				t.Errorf("%s: body %s, want field \"names\" and name \"team-b/x\"", what, r.body)
			}
		}
		multiOut("team-a multi-locks a set with team-b/x", e.post("/v1/multi/acquire", `{"names":["team-a/m","team-b/x","team-c/y"],"waitMs":0}`, a...))
		multiOut("team-a extends a multi-lock with team-b/x", e.post("/v1/multi/extend", `{"token":"`+stolen+`","names":["team-a/m","team-b/x"]}`, a...))
		multiOut("team-a releases a multi-lock with team-b/x", e.post("/v1/multi/release", `{"token":"`+stolen+`","names":["team-b/x"]}`, a...))
		if st := e.get("/v1/locks/team-b%2Fx", b...).json(t); st["holders"] != 1.0 {
			t.Fatalf("after team-a's attempts team-b/x = %v, want held by team-b", st)
		}
		if st := e.get("/v1/locks/team-a%2Fm", a...).json(t); st["holders"] != 0.0 {
			t.Fatalf("after a refused multi-lock team-a/m = %v, want free", st)
		}

		wantCode(t, "team-a acquires team-a/y", e.post("/v1/locks/team-a%2Fy/acquire", `{}`, a...), http.StatusOK)
		wantCode(t, "team-a demo", e.post("/api/locks/simple/team-a%2Fd?durationMs=0", ``, a...), http.StatusOK)
		r = e.get("/v1/locks", a...)
		wantCode(t, "team-a list", r, http.StatusOK)
		if !strings.Contains(string(r.body), `"team-a/y"`) || strings.Contains(string(r.body), "team-b") {
			t.Errorf("team-a list = %s, want team-a/y and no team-b name", r.body)
		}
		r = e.get("/v1/locks", reader...)
		if !strings.Contains(string(r.body), `"team-a/y"`) || !strings.Contains(string(r.body), `"team-b/x"`) {
			t.Errorf("reader list = %s, want every name", r.body)
		}

		// The read-only token reads, never writes.
		wantCode(t, "reader reads team-b/x", e.get("/v1/locks/team-b%2Fx", reader...), http.StatusOK)
		for _, w := range []struct{ path, body string }{
			{"/v1/locks/team-b%2Fx/acquire", `{}`},
			{"/v1/locks/team-b%2Fx/release", `{"token":"` + stolen + `"}`},
			{"/api/locks/simple/anything?durationMs=0", ``},
			{"/v1/elections/team-a%2Fe/campaign", `{"value":"r"}`},
			{"/v1/multi/acquire", `{"names":["team-a/m"]}`},
			{"/v1/multi/release", `{"token":"` + stolen + `","names":["team-b/x"]}`},
		} {
			r := e.post(w.path, w.body, reader...)
			wantCode(t, "reader POST "+w.path, r, http.StatusForbidden)
			if r.json(t)["error"] != "read only" {
				t.Errorf("reader POST %s: body %s, want error \"read only\"", w.path, r.body)
			}
		}

		for _, hdr := range [][]string{nil, bearerOf("nope"), bearerOf(HashToken(tokA)), {"Authorization", "Basic " + tokA}} {
			r := e.do(t.Context(), http.MethodGet, "/v1/locks", "", hdr...)
			wantCode(t, "list with "+strings.Join(hdr, " "), r, http.StatusUnauthorized)
		}
		wantCode(t, "health needs no token", e.get("/health"), http.StatusOK)

		// team-b's activity never reaches team-a's stream: read it up to
		// team-a's own acquire, made after team-b's.
		wantCode(t, "team-b acquires team-b/z", e.post("/v1/locks/team-b%2Fz/acquire", `{}`, b...), http.StatusOK)
		wantCode(t, "team-a acquires team-a/z", e.post("/v1/locks/team-a%2Fz/acquire", `{}`, a...), http.StatusOK)
		sc := bufio.NewScanner(stream.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "team-b") {
				t.Fatalf("team-a's event stream shows a team-b name: %s", line)
			}
			if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"name":"team-a/z"`) && strings.Contains(line, `"type":"acquire"`) {
				break
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("event stream: %v", err)
		}
		wantCode(t, "team-b releases team-b/x", e.post("/v1/locks/team-b%2Fx/release", `{"token":"`+stolen+`"}`, b...), http.StatusOK)
	})
}

// TestScopedElectionsAndMulti: a scoped token campaigns, reads and
// observes elections, and takes, extends and releases multi-locks in its
// scope; a leadership is one hold, a multi-lock one hold per name and one
// acquire; a multi-lock's body is still the handler's to judge (400, 413).
func TestScopedElectionsAndMulti(t *testing.T) {
	file := `{"tokens":[
  {"tenant":"team-a","sha256":"` + HashToken(tokA) + `","prefixes":["team-a/"],"access":"read-write","maxHolds":3},
  {"tenant":"slow","sha256":"` + HashToken("rate") + `","prefixes":["s/"],"access":"read-write","acquiresPerSecond":0.001}
]}`
	e := newEnv(t, memory.New(), Config{AuthFile: writeAuthFile(t, t.TempDir(), file)})
	a := bearerOf(tokA)
	tooMany := func(what string, r response, errCode string) {
		t.Helper()
		wantCode(t, what, r, http.StatusTooManyRequests)
		if got := r.json(t)["error"]; got != errCode {
			t.Errorf("%s: error %v, want %q (%s)", what, got, errCode, r.body)
		}
		if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("%s: Retry-After %q, want whole seconds >= 1", what, r.header.Get("Retry-After"))
		}
	}

	r := e.post("/v1/elections/team-a%2Fe/campaign", `{"value":"host-a"}`, a...)
	wantCode(t, "campaign", r, http.StatusOK)
	lead := r.json(t)["token"].(string)
	if r := e.get("/v1/elections/team-a%2Fe", a...); r.code != http.StatusOK || !strings.Contains(string(r.body), `"host-a"`) {
		t.Fatalf("leader = %d %s, want 200 with host-a", r.code, r.body)
	}
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/elections/team-a%2Fe/observe", nil)
	req.Header.Set("Authorization", "Bearer "+tokA)
	resp, err := e.ts.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("observe = %v, %v", resp, err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") { //nolint:revive // empty-block: skips to the first data line
	}
	if !strings.Contains(sc.Text(), `"host-a"`) {
		t.Errorf("observe's first event = %q, want the leadership of host-a", sc.Text())
	}
	cancel()
	resp.Body.Close()
	wantCode(t, "election extend", e.post("/v1/elections/team-a%2Fe/extend", `{"token":"`+lead+`"}`, a...), http.StatusOK)

	// maxHolds 3: the leadership holds one, so a multi-lock of three names
	// is over the limit and one of two is not.
	tooMany("multi-lock of 3 beside a leadership", e.post("/v1/multi/acquire", `{"names":["team-a/1","team-a/2","team-a/3"]}`, a...), "too many holds")
	r = e.post("/v1/multi/acquire", `{"names":["team-a/1","team-a/2","team-a/1"]}`, a...)
	wantCode(t, "multi-lock of 2 (a repeated name counts once)", r, http.StatusOK)
	multi := r.json(t)["token"].(string)
	tooMany("a campaign over the holds", e.post("/v1/elections/team-a%2Ff/campaign", `{"value":"x"}`, a...), "too many holds")
	if m := string(e.get("/metrics").body); !strings.Contains(m, `dlock_tenant_holds{tenant="team-a"} 3`) {
		t.Errorf("/metrics lacks team-a's 3 holds")
	}
	body := `{"token":"` + multi + `","names":["team-a/1","team-a/2"]}`
	wantCode(t, "multi extend", e.post("/v1/multi/extend", body, a...), http.StatusOK)
	wantCode(t, "multi release", e.post("/v1/multi/release", body, a...), http.StatusOK)
	wantCode(t, "resign", e.post("/v1/elections/team-a%2Fe/resign", `{"token":"`+lead+`"}`, a...), http.StatusOK)
	r = e.post("/v1/multi/acquire", `{"names":["team-a/1","team-a/2","team-a/3"]}`, a...)
	wantCode(t, "multi-lock of 3 once the holds are freed", r, http.StatusOK)
	wantCode(t, "its release", e.post("/v1/multi/release", `{"token":"`+r.json(t)["token"].(string)+`","names":["team-a/1","team-a/2","team-a/3"]}`, a...), http.StatusOK)

	// The body read by the scope check is the handler's to judge.
	if r := e.post("/v1/multi/acquire", `{"names":["team-a/1"],"ttlMs":"x"}`, a...); r.code != http.StatusBadRequest || r.json(t)["field"] != "ttlMs" {
		t.Errorf("multi acquire with a bad ttlMs = %d %s, want 400 naming ttlMs", r.code, r.body)
	}
	if r := e.post("/v1/multi/acquire", `{"names":"team-b/x"}`, a...); r.code != http.StatusBadRequest || r.json(t)["field"] != "names" {
		t.Errorf("multi acquire with a string of names = %d %s, want 400 naming names", r.code, r.body)
	}
	big := `{"names":["team-a/1"],"pad":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
	wantCode(t, "multi acquire over 64 KiB", e.post("/v1/multi/acquire", big, a...), http.StatusRequestEntityTooLarge)
	if st := e.get("/v1/locks/team-a%2F1", a...).json(t); st["holders"] != 0.0 {
		t.Fatalf("after refused bodies team-a/1 = %v, want free", st)
	}

	// A multi-lock is one acquire against acquiresPerSecond.
	s := bearerOf("rate")
	wantCode(t, "slow multi-lock", e.post("/v1/multi/acquire", `{"names":["s/1","s/2","s/3"]}`, s...), http.StatusOK)
	tooMany("slow campaign", e.post("/v1/elections/s%2Fe/campaign", `{"value":"x"}`, s...), "rate limited")
	tooMany("slow multi-lock", e.post("/v1/multi/acquire", `{"names":["s/4"]}`, s...), "rate limited")
}

// TestTokenLimits: over maxHolds or acquiresPerSecond a token gets 429
// with Retry-After; a release frees a hold.
func TestTokenLimits(t *testing.T) {
	file := `{"tokens":[
  {"tenant":"small","sha256":"` + HashToken("holds") + `","prefixes":["h/"],"access":"read-write","maxHolds":2},
  {"tenant":"slow","sha256":"` + HashToken("rate") + `","prefixes":[""],"access":"read-write","acquiresPerSecond":0.001}
]}`
	e := newEnv(t, memory.New(), Config{AuthFile: writeAuthFile(t, t.TempDir(), file)})
	h := bearerOf("holds")
	tooMany := func(what string, r response, errCode string) {
		t.Helper()
		wantCode(t, what, r, http.StatusTooManyRequests)
		if got := r.json(t)["error"]; got != errCode {
			t.Errorf("%s: error %v, want %q (%s)", what, got, errCode, r.body)
		}
		if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("%s: Retry-After %q, want whole seconds >= 1", what, r.header.Get("Retry-After"))
		}
	}

	first := e.post("/v1/locks/h%2F1/acquire", `{}`, h...)
	wantCode(t, "hold 1", first, http.StatusOK)
	clientTok := strings.Repeat("c", 32)
	wantCode(t, "hold 2", e.post("/v1/locks/h%2F2/acquire", `{"token":"`+clientTok+`"}`, h...), http.StatusOK)
	tooMany("hold 3", e.post("/v1/locks/h%2F3/acquire", `{}`, h...), "too many holds")
	tooMany("demo over the holds", e.post("/api/locks/simple/h%2F4?durationMs=0", ``, h...), "too many holds")
	wantCode(t, "a retried acquire is no new hold", e.post("/v1/locks/h%2F2/acquire", `{"token":"`+clientTok+`"}`, h...), http.StatusOK)
	wantCode(t, "release hold 1", e.post("/v1/locks/h%2F1/release", `{"token":"`+first.json(t)["token"].(string)+`"}`, h...), http.StatusOK)
	wantCode(t, "hold 3 after a release", e.post("/v1/locks/h%2F3/acquire", `{}`, h...), http.StatusOK)

	s := bearerOf("rate")
	wantCode(t, "first acquire", e.post("/v1/locks/r1/acquire", `{}`, s...), http.StatusOK)
	tooMany("second acquire", e.post("/v1/locks/r2/acquire", `{}`, s...), "rate limited")
	tooMany("demo", e.post("/api/locks/simple/r3?durationMs=0", ``, s...), "rate limited")
	wantCode(t, "reads are not limited", e.get("/v1/locks/r1", s...), http.StatusOK)

	m := string(e.get("/metrics").body)
	for _, want := range []string{
		`dlock_tenant_denied_total{reason="holds_limit",tenant="small"} 2`,
		`dlock_tenant_denied_total{reason="rate_limit",tenant="slow"} 2`,
		`dlock_tenant_holds{tenant="small"} 2`,
		`dlock_tenant_requests_total{code="429",tenant="slow"} 2`,
		`dlock_tenant_requests_total{code="200",tenant="small"} 5`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(m, "h/1") || strings.Contains(m, HashToken("holds")) {
		t.Errorf("/metrics shows a lock name or a token hash")
	}
}

// TestAuthReload: ReloadAuth (SIGHUP in dlock serve) applies a new file
// without dropping a keep-alive connection: a revoked token gets 401 on
// the same connection and its event and observe streams end, a new token
// works; a broken file is refused and
// the one in force stays.
func TestAuthReload(t *testing.T) {
	dir := t.TempDir()
	path := writeAuthFile(t, dir, scopedFile())
	e := newEnv(t, memory.New(), Config{AuthFile: path, SnapshotInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+tokA)
	streamTransport := &http.Transport{} // the stream's own connection
	defer streamTransport.CloseIdleConnections()
	stream, err := (&http.Client{Transport: streamTransport}).Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("team-a GET /v1/events = %v, %v", stream, err)
	}
	defer stream.Body.Close()
	obsReq, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/elections/team-a%2Fe/observe", nil)
	obsReq.Header.Set("Authorization", "Bearer "+tokA)
	observe, err := (&http.Client{Transport: streamTransport}).Do(obsReq)
	if err != nil || observe.StatusCode != http.StatusOK {
		t.Fatalf("team-a GET observe = %v, %v", observe, err)
	}
	defer observe.Body.Close()
	var conns []string
	get := func(tok string) response {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			conns = append(conns, ci.Conn.LocalAddr().String())
		}}
		return e.do(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, "/v1/locks", "", bearerOf(tok)...)
	}
	wantCode(t, "team-a before the reload", get(tokA), http.StatusOK)

	revoked := `{"tokens":[
  {"tenant":"team-b","sha256":"` + HashToken(tokB) + `","prefixes":["team-b/"],"access":"read-write"},
  {"tenant":"team-c","sha256":"` + HashToken("team-c-token") + `","prefixes":["team-c/"],"access":"read-write"}
]}`
	writeAuthFile(t, dir, revoked)
	if err := e.srv.ReloadAuth(); err != nil {
		t.Fatalf("ReloadAuth = %v", err)
	}
	wantCode(t, "team-a after its revocation", get(tokA), http.StatusUnauthorized)
	// team-a's open event stream ends at its next snapshot.
	if _, err := io.Copy(io.Discard, stream.Body); err != nil {
		t.Errorf("team-a's event stream after its revocation: %v, want its end", err)
	}
	if _, err := io.Copy(io.Discard, observe.Body); err != nil {
		t.Errorf("team-a's observe stream after its revocation: %v, want its end", err)
	}
	wantCode(t, "team-c after the reload", get("team-c-token"), http.StatusOK)
	wantCode(t, "team-b kept", get(tokB), http.StatusOK)
	for i, c := range conns {
		if c != conns[0] {
			t.Errorf("request %d went over connection %s, want the keep-alive connection %s", i, c, conns[0])
		}
	}

	writeAuthFile(t, dir, `{"tokens":[{"tenant":"x","sha256":"abc"}]}`)
	if err := e.srv.ReloadAuth(); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("ReloadAuth of a broken file = %v, want an error naming sha256", err)
	}
	wantCode(t, "team-c after a refused reload", get("team-c-token"), http.StatusOK)
	m := string(e.get("/metrics").body)
	if strings.Contains(m, `tenant="team-a"`) {
		t.Errorf("/metrics still has series of the removed tenant team-a")
	}
}

// TestAuthFileErrors: a token and a file cannot be combined, and a missing
// auth file is an error (package auth checks the file's contents).
func TestAuthFileErrors(t *testing.T) {
	l, err := dlock.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	path := writeAuthFile(t, t.TempDir(), scopedFile())
	if srv, err := New(l, Config{AuthToken: "t", AuthFile: path}); err == nil {
		srv.Close()
		t.Errorf("New with both an auth token and an auth file succeeded, want an error")
	}
	if srv, err := New(l, Config{AuthFile: filepath.Join(t.TempDir(), "missing.json")}); err == nil {
		srv.Close()
		t.Errorf("New with a missing auth file succeeded, want an error")
	}
}

// TestScopedEventsAcrossReplicas: a scoped token's event stream on one
// replica shows the events of its names made through another replica,
// and never another tenant's.
func TestScopedEventsAcrossReplicas(t *testing.T) {
	srv := testredis.Start(t)
	file := writeAuthFile(t, t.TempDir(), scopedFile())
	a := newEnv(t, dialValkey(t, srv.URL()), Config{AuthFile: file, SnapshotInterval: 100 * time.Millisecond})
	b := newEnv(t, dialValkey(t, srv.URL()), Config{AuthFile: file, SnapshotInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.ts.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+tokA)
	resp, err := a.ts.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("team-a GET /v1/events on a = %v, %v", resp, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	s := &stream{t, sc}

	// Until a's stream shows a team-a acquire made on b (b's events reach
	// a through the store once its subscription is up), acquire on b: one
	// team-b name, then one team-a name, each time.
	heard := false
	for i := 0; !heard; i++ {
		if i == 100 {
			t.Fatal("a's stream showed none of 100 team-a acquires made on b")
		}
		suffix := strconv.Itoa(i)
		wantCode(t, "team-b on b", b.post("/v1/locks/team-b%2Fq"+suffix+"/acquire", `{}`, bearerOf(tokB)...), http.StatusOK)
		wantCode(t, "team-a on b", b.post("/v1/locks/team-a%2Fq"+suffix+"/acquire", `{}`, bearerOf(tokA)...), http.StatusOK)
		deadline := time.Now().Add(time.Second)
		s.until("an event or snapshot", func(event string, data []byte) bool {
			if strings.Contains(string(data), "team-b") {
				t.Fatalf("team-a's stream shows a team-b name: %s %s", event, data)
			}
			var ev eventBody
			if event == "acquire" && json.Unmarshal(data, &ev) == nil && ev.Replica == b.srv.rep.ID() && strings.HasPrefix(ev.Name, "team-a/") {
				heard = true
				return true
			}
			return time.Now().After(deadline)
		})
	}
}

// TestScopeCheckFailsClosed: a multi-lock body whose names cannot be read
// passes no scope check. The guard answers it (400 naming the problem, or
// 413) without reaching the handler, which here would take any body; and
// through the server such a request is not charged to the token's
// acquiresPerSecond, since it never passed the checks before that limit.
func TestScopeCheckFailsClosed(t *testing.T) {
	file := `{"tokens":[
  {"tenant":"team-a","sha256":"` + HashToken(tokA) + `","prefixes":["team-a/"],"access":"read-write"},
  {"tenant":"slow","sha256":"` + HashToken("rate") + `","prefixes":["s/"],"access":"read-write","acquiresPerSecond":0.001}
]}`
	e := newEnv(t, memory.New(), Config{AuthFile: writeAuthFile(t, t.TempDir(), file)})
	who := httptest.NewRequest(http.MethodGet, "/v1/locks", nil)
	who.Header.Set("Authorization", "Bearer "+tokA)
	p, _ := e.srv.gate.Principal(who)
	if p == nil {
		t.Fatal("team-a's entry is not loaded")
	}
	bodies := []struct {
		what, body string
		code       int
		field      string
	}{
		{"truncated JSON naming team-b/x", `{"names":["team-b/x"`, http.StatusBadRequest, "body"},
		{"team-b/x then garbage", `{"names":["team-b/x"]} x`, http.StatusBadRequest, "body"},
		{"team-b/x then a number", `{"names":["team-b/x",1]}`, http.StatusBadRequest, "names"},
		{"names as a string", `{"names":"team-b/x"}`, http.StatusBadRequest, "names"},
		{"an array", `["team-b/x"]`, http.StatusBadRequest, "body"},
		{"an empty body", ``, http.StatusBadRequest, "body"},
		{"team-b/x in a body over 64 KiB", `{"names":["team-b/x"],"pad":"` + strings.Repeat("x", MaxBodyBytes) + `"}`, http.StatusRequestEntityTooLarge, ""},
	}
	for _, pattern := range []string{"POST /v1/multi/acquire", "POST /v1/multi/extend", "POST /v1/multi/release"} {
		reached := false
		h := e.srv.guard(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached = true
			w.WriteHeader(http.StatusOK)
		}))
		for _, b := range bodies {
			reached = false
			w := httptest.NewRecorder()
			r := httptest.NewRequestWithContext(auth.NewContext(t.Context(), p), http.MethodPost, patternPath(pattern), strings.NewReader(b.body))
			r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
			h.ServeHTTP(w, r)
			var got apiError
			_ = json.Unmarshal(w.Body.Bytes(), &got)
			if reached || w.Code != b.code || got.Field != b.field {
				t.Errorf("%s with %s: handler reached %v, answer %d %s; want %d naming %q, handler not reached", pattern, b.what, reached, w.Code, w.Body, b.code, b.field)
			}
		}
	}

	slow := bearerOf("rate")
	r := e.post("/v1/multi/acquire", `{"names":["s/1"`, slow...)
	wantCode(t, "multi acquire with truncated JSON", r, http.StatusBadRequest)
	if f := r.json(t)["field"]; f != "body" {
		t.Errorf("multi acquire with truncated JSON: field %v, want body (%s)", f, r.body)
	}
	wantCode(t, "multi acquire after a refused body: the token's one acquire is left", e.post("/v1/multi/acquire", `{"names":["s/1"]}`, slow...), http.StatusOK)
}
