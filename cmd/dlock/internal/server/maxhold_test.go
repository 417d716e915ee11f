package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/store"
)

// TestV1MaxHold: a lease acquired with maxHoldMs is granted at most that
// TTL, every extend is capped so that the lease never outlives it, and once
// it is reached extend (and an acquire retried with its token) answer 410
// while the name frees itself on the store.
func TestV1MaxHold(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		const maxHold = 1500 * time.Millisecond
		token := strings.Repeat("c0ffee", 6)
		r := e.post("/v1/locks/bounded/acquire", `{"ttlMs":60000,"maxHoldMs":1500,"token":"`+token+`"}`)
		granted := time.Now() // the lease's grant was asked for before this
		wantCode(t, "acquire", r, http.StatusOK)
		if ttl := r.json(t)["ttlMs"]; ttl != 1500.0 {
			t.Errorf("grant ttlMs = %v, want the max hold 1500", ttl)
		}
		if ttl, _ := e.get("/v1/locks/bounded").json(t)["ttlMs"].(float64); ttl > 1500 {
			t.Errorf("state ttlMs = %v, want at most the max hold 1500", ttl)
		}
		deadline := time.Now().Add(30 * time.Second)
		for extends := 0; ; extends++ {
			sent := time.Now()
			r = e.post("/v1/locks/bounded/extend", `{"token":"`+token+`","ttlMs":60000}`)
			if r.code == http.StatusGone {
				if msg, _ := r.json(t)["message"].(string); !strings.Contains(msg, "maxHoldMs") {
					t.Errorf("410 at the max hold says %q, want it to name maxHoldMs", msg)
				}
				if extends == 0 {
					t.Errorf("no extend answered 200 before the max hold")
				}
				break
			}
			wantCode(t, "extend", r, http.StatusOK)
			// The server counted ttlMs from after sent; the lease must
			// end by its grant plus the max hold (ttlMs is rounded up).
			ttl, _ := r.json(t)["ttlMs"].(float64)
			if end := sent.Add(time.Duration(ttl-1) * time.Millisecond); end.After(granted.Add(maxHold)) {
				t.Fatalf("extend %d answered ttlMs %v: the lease would outlive its max hold by %v", extends, ttl, end.Sub(granted.Add(maxHold)))
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease with maxHoldMs 1500 still extendable after 30s")
			}
			time.Sleep(20 * time.Millisecond) // pacing, not synchronisation
		}
		wantCode(t, "extend after the max hold", e.post("/v1/locks/bounded/extend", `{"token":"`+token+`","ttlMs":60000}`), http.StatusGone)
		wantCode(t, "acquire retried with the token after the max hold", e.post("/v1/locks/bounded/acquire", `{"ttlMs":60000,"maxHoldMs":1500,"token":"`+token+`"}`), http.StatusGone)
		for {
			r = e.post("/v1/locks/bounded/acquire", `{"ttlMs":1000}`)
			if r.code == http.StatusOK {
				break
			}
			wantCode(t, "acquire by another after the max hold", r, http.StatusConflict)
			if time.Now().After(deadline) {
				t.Fatalf("name still held 30s after a lease with maxHoldMs 1500: %s", r.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestV1MaxHoldSurvivesLossByCount: a lease this server counts lost while
// the store still holds it (extended through another instance) is extended
// by the store, and still capped at its max hold.
func TestV1MaxHoldSurvivesLossByCount(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, Config{})
		token := strings.Repeat("beef", 8)
		r := e.post("/v1/locks/elsewhere/acquire", `{"ttlMs":300,"maxHoldMs":5000,"token":"`+token+`"}`)
		granted := time.Now() // the max hold runs from before this
		wantCode(t, "acquire", r, http.StatusOK)
		// Another instance extends it on the store; this one's count runs out.
		req := dlock.Request{Name: "elsewhere", Token: token, TTL: 4 * time.Second, Mode: dlock.ModeMutex}
		if err := st.Extend(t.Context(), []dlock.Request{req})[0]; err != nil {
			t.Fatalf("Extend on the store = %v", err)
		}
		e.waitEvent(dlock.EventLeaseLost, "elsewhere")
		sent := time.Now()
		r = e.post("/v1/locks/elsewhere/extend", `{"token":"`+token+`","ttlMs":60000}`)
		wantCode(t, "extend decided by the store", r, http.StatusOK)
		ttl, _ := r.json(t)["ttlMs"].(float64)
		if left := granted.Add(5 * time.Second).Sub(sent); time.Duration(ttl)*time.Millisecond > left {
			t.Errorf("extend by the store answered ttlMs %v, want at most the %v left of the max hold", ttl, left)
		}
		if st, _ := e.get("/v1/locks/elsewhere").json(t)["ttlMs"].(float64); st > 5000 {
			t.Errorf("state ttlMs = %v after extend, want at most the max hold 5000", st)
		}
	})
}
