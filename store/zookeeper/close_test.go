package zookeeper_test

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// TestCloseKeepsMinHold: a hold released before its MinHold ran out is
// kept by the granting Store's session, so Close (what a short-lived
// process such as `dlock run --min-hold` does when it exits) must not end
// it: another Store is refused until grant + MinHold and granted after,
// and Close returns only once the min hold is over. Before, Close ended
// the session and with it the hold at once.
func TestCloseKeepsMinHold(t *testing.T) {
	srv := zktest.Start(t)
	a, b := openStore(t, srv.Addr()), newStore(t, srv.Addr())
	const minHold = 3 * time.Second
	req := store.Request{Name: "close-min", Token: "tok-a", TTL: 10 * time.Second, Mode: store.ModeMutex, MinHold: minHold, Holder: "job/1"}
	start := time.Now()
	mustGrant(t, a, req)
	if err := a.Release(t.Context(), req); err != nil {
		t.Fatalf("Release before its MinHold = %v, want nil", err)
	}
	closed := make(chan time.Time, 1)
	go func() {
		a.Close()
		closed <- time.Now()
	}()
	// Acquire through b until granted; every answer before grant +
	// MinHold must be a refusal (Close returning sooner would free it).
	deadline := start.Add(minHold + 20*time.Second)
	refusals := 0
	for {
		g, err := b.Acquire(t.Context(), store.Request{Name: req.Name, Token: "tok-b", TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("Acquire through b = %v", err)
		}
		if g.Acquired {
			if d := time.Since(start); d < minHold {
				t.Fatalf("b granted %v after a's Acquire was sent, before its MinHold %v (after %d refusals): a's Close ended the kept hold", d, minHold, refusals)
			}
			break
		}
		refusals++
		if time.Now().After(deadline) {
			t.Fatalf("b still refused %v after a's grant (MinHold %v)", time.Since(start), minHold)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if refusals == 0 {
		t.Logf("no Acquire was sent within the MinHold (a slow machine): the refusal was not checked")
	}
	select {
	case at := <-closed:
		if d := at.Sub(start); d < minHold {
			t.Errorf("a.Close returned %v after the grant, before its MinHold %v ran out", d, minHold)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("a.Close has not returned 20s after b's grant")
	}
}
