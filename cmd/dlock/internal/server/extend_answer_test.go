package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
	"github.com/dlock-dev/dlock/store/redlock"
)

// TestExtendAnswersAlike: an extend's ttlMs is the validity a Lease counts
// (the TTL asked, less the drift margin of dlock.WithDriftFactor or the
// store's larger one, less the time since the send), whether the instance
// knows the lease or passes the extend to the store: for a lock, a
// multi-lock and a leadership, on the memory store, one redis-server, and
// Redlock over three redis-servers with a drift factor of 0.05.
func TestExtendAnswersAlike(t *testing.T) {
	const ttl = 10 * time.Second
	for _, tc := range []struct {
		name  string
		drift time.Duration // of a hold of ttl
		new   func(t *testing.T) (a, b store.Store)
	}{
		{"memory", ttl/100 + 2*time.Millisecond, func(t *testing.T) (store.Store, store.Store) {
			s := memory.New()
			return s, s
		}},
		{"valkey", ttl/100 + 2*time.Millisecond, func(t *testing.T) (store.Store, store.Store) {
			srv := testredis.Start(t)
			return dialValkey(t, srv.URL()), dialValkey(t, srv.URL())
		}},
		{"redlock", ttl/20 + 2*time.Millisecond, func(t *testing.T) (store.Store, store.Store) {
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
				rl, err := redlock.New(nodes, redlock.WithDriftFactor(0.05))
				if err != nil {
					t.Fatalf("redlock.New = %v", err)
				}
				t.Cleanup(func() { rl.Close() })
				h[i] = rl
			}
			return h[0], h[1]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sa, sb := tc.new(t)
			a, b := newEnv(t, sa, Config{}), newEnv(t, sb, Config{})
			want := (ttl - tc.drift).Milliseconds()
			// extend posts body to path on e and checks the answer's
			// ttlMs: at most want, and short of it by no more than the
			// request took.
			extend := func(what string, e *env, path, body string) {
				t.Helper()
				start := time.Now()
				r := e.post(path, body)
				took := time.Since(start).Milliseconds()
				wantCode(t, what, r, http.StatusOK)
				got, _ := r.json(t)["ttlMs"].(float64)
				if int64(got) > want || int64(got) < want-took-1 {
					t.Errorf("%s: ttlMs %v, want %d less at most the %dms the request took (%s)", what, got, want, took, r.body)
				}
			}
			// Short grants, so that a Redlock majority on a busy machine
			// comes in time; the extends ask for ttl.
			r := a.post("/v1/locks/x/acquire", `{"ttlMs":5000}`)
			wantCode(t, "acquire on a", r, http.StatusOK)
			tok := r.json(t)["token"].(string)
			body := `{"token":"` + tok + `","ttlMs":10000}`
			extend("lock extend on a, which granted it", a, "/v1/locks/x/extend", body)
			extend("lock extend on b, which does not know it", b, "/v1/locks/x/extend", body)

			r = a.post("/v1/multi/acquire", `{"names":["m1","m2"],"ttlMs":5000}`)
			wantCode(t, "multi acquire on a", r, http.StatusOK)
			body = `{"token":"` + r.json(t)["token"].(string) + `","names":["m1","m2"],"ttlMs":10000}`
			extend("multi extend on a, which granted it", a, "/v1/multi/extend", body)
			extend("multi extend on b, which does not know it", b, "/v1/multi/extend", body)

			r = a.post("/v1/elections/e/campaign", `{"value":"host-a","ttlMs":5000}`)
			wantCode(t, "campaign on a", r, http.StatusOK)
			body = `{"token":"` + r.json(t)["token"].(string) + `","ttlMs":10000}`
			extend("election extend on a, which granted it", a, "/v1/elections/e/extend", body)
			extend("election extend on b, which does not know it", b, "/v1/elections/e/extend", body)
		})
	}
}
