package server

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/etcd"
	"github.com/dlock-dev/dlock/store/etcd/etcdtest"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/postgres"
	"github.com/dlock-dev/dlock/store/postgres/pgtest"
	"github.com/dlock-dev/dlock/store/valkey"
	"github.com/dlock-dev/dlock/store/zookeeper"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// fairStores are the stores that keep a fair lock behind the service
// (redlock refuses fair locks).
var fairStores = []struct {
	name string
	new  func(t *testing.T) store.Store
}{
	{"memory", func(t *testing.T) store.Store { return memory.New() }},
	{"valkey", func(t *testing.T) store.Store {
		srv := testredis.Start(t)
		s, err := valkey.Dial(t.Context(), srv.URL())
		if err != nil {
			t.Fatalf("valkey.Dial(%q) = %v", srv.URL(), err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"etcd", func(t *testing.T) store.Store {
		srv := etcdtest.Start(t)
		s, err := etcd.New(t.Context(), []string{srv.Endpoint()})
		if err != nil {
			t.Fatalf("etcd.New = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"postgres", func(t *testing.T) store.Store {
		srv := pgtest.Start(t)
		s, err := postgres.New(t.Context(), srv.URL())
		if err != nil {
			t.Fatalf("postgres.New = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"zookeeper", func(t *testing.T) store.Store {
		srv := zktest.Start(t)
		s, err := zookeeper.New(t.Context(), []string{srv.Addr()})
		if err != nil {
			t.Fatalf("zookeeper.New = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestFairQueueWithoutToken checks the trap of issue 40: a queue place
// asked for without a token could be handed the lock, and nobody could
// claim or release it. It is a 400 naming the token, and nothing is left
// behind: the holder's release frees the name.
func TestFairQueueWithoutToken(t *testing.T) {
	for _, st := range fairStores {
		t.Run(st.name, func(t *testing.T) {
			e := newEnv(t, st.new(t), Config{})
			r := e.post("/v1/locks/printer3/acquire", `{"ttlMs":30000,"fair":true}`)
			wantCode(t, "first fair acquire", r, http.StatusOK)
			holder := r.json(t)["token"].(string)
			for _, b := range []string{
				`{"ttlMs":60000,"fair":true,"queue":true}`,
				`{"ttlMs":60000,"fair":true,"queue":true,"queueTtlMs":1000}`,
				`{"ttlMs":60000,"mode":"write","queue":true}`,
			} {
				r = e.post("/v1/locks/printer3/acquire", b)
				wantCode(t, b, r, http.StatusBadRequest)
				if m := r.json(t); m["field"] != "token" || m["error"] != "invalid token" {
					t.Errorf("acquire %s = %s, want the 400 naming the token", b, r.body)
				}
			}
			if doc, err := os.ReadFile("../../../../docs/http.md"); err != nil || !strings.Contains(string(doc), "Requires `token`: without one, `400 {\"error\":\"invalid token\",\"field\":\"token\",...}`") {
				t.Errorf("docs/http.md does not document the 400 of a queue without a token (%v)", err)
			}
			wantCode(t, "release", e.post("/v1/locks/printer3/release", tokenJSON(holder)), http.StatusOK)
			if st := e.get("/v1/locks/printer3").json(t); st["held"] != false || st["queue"] != 0.0 {
				t.Errorf("state after the release = %v, want free with nobody queued", st)
			}
			r = e.post("/v1/locks/printer3/acquire", `{"ttlMs":30000,"fair":true}`)
			wantCode(t, "fair acquire after the release", r, http.StatusOK)
		})
	}
}

// TestFairUnclaimedHandoff checks the other path of issue 40: a client
// queues with its own token and dies before claiming the lock handed to
// it. The name goes to the next waiter once the dead client's queue place
// would have run out (its claim window), not after the grant's ttlMs; a
// client that claims in time gets its whole ttlMs.
func TestFairUnclaimedHandoff(t *testing.T) {
	const ttlMs, queueTTLMs = 30000, 300 // ZooKeeper: ttlMs within its session timeout
	for _, st := range fairStores {
		t.Run(st.name, func(t *testing.T) {
			e := newEnv(t, st.new(t), Config{})
			name := "printer-" + st.name
			acquire := func(tok string, qttl int) response {
				return e.post("/v1/locks/"+name+"/acquire",
					fmt.Sprintf(`{"ttlMs":%d,"fair":true,"queue":true,"queueTtlMs":%d,"token":%q}`, ttlMs, qttl, tok))
			}
			r := e.post("/v1/locks/"+name+"/acquire", fmt.Sprintf(`{"ttlMs":%d,"fair":true}`, ttlMs))
			wantCode(t, "holder", r, http.StatusOK)
			holder := r.json(t)["token"].(string)

			dead, next := randomToken(t), randomToken(t)
			wantCode(t, "queue the client that dies", acquire(dead, queueTTLMs), http.StatusConflict)
			wantCode(t, "queue the next waiter", acquire(next, ttlMs), http.StatusConflict)
			released := time.Now()
			wantCode(t, "release", e.post("/v1/locks/"+name+"/release", tokenJSON(holder)), http.StatusOK)

			// The next waiter keeps refreshing its place, as a client does,
			// until it is handed the lock; a third of ttlMs is far more than
			// the claim window (and far less than the grant's ttlMs).
			deadline := released.Add(ttlMs / 3 * time.Millisecond)
			for {
				r = acquire(next, ttlMs)
				if r.code == http.StatusOK {
					break
				}
				wantCode(t, "next waiter", r, http.StatusConflict)
				if time.Now().After(deadline) {
					t.Fatalf("next waiter still refused %v after the release to a client that never claimed (body %s)", time.Since(released), r.body)
				}
				time.Sleep(20 * time.Millisecond) // a client's poll interval
			}
			t.Logf("next waiter served %v after the release", time.Since(released))
			if got := r.json(t)["ttlMs"]; got != float64(ttlMs) {
				t.Errorf("next waiter's grant ttlMs = %v, want %d", got, ttlMs)
			}
			wantCode(t, "extend by the client that never claimed", e.post("/v1/locks/"+name+"/extend",
				fmt.Sprintf(`{"token":%q,"ttlMs":%d}`, dead, ttlMs)), http.StatusGone)

			// Claimed in time: the whole ttlMs.
			late := randomToken(t)
			wantCode(t, "queue behind the holder", acquire(late, 5000), http.StatusConflict)
			wantCode(t, "release to the queued client", e.post("/v1/locks/"+name+"/release", tokenJSON(next)), http.StatusOK)
			r = acquire(late, 5000)
			wantCode(t, "claim", r, http.StatusOK)
			other := randomToken(t)
			r = acquire(other, ttlMs)
			wantCode(t, "a waiter behind the claimed lock", r, http.StatusConflict)
			if ra := r.json(t)["retryAfterMs"].(float64); ra <= 5000 {
				t.Errorf("retryAfterMs behind the claimed lock = %v, want > 5000 (the claim holds for ttlMs %d)", ra, ttlMs)
			}
			wantCode(t, "release the claimed lock", e.post("/v1/locks/"+name+"/release", tokenJSON(late)), http.StatusOK)
			wantCode(t, "release the last place", e.post("/v1/locks/"+name+"/release", tokenJSON(other)), http.StatusOK)
		})
	}
}

func tokenJSON(tok string) string { return `{"token":"` + tok + `"}` }
