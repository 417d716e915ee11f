package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// TestServeReplicasOnZooKeeper: two `dlock serve` replicas on one
// ZooKeeper ensemble, a client alternating between them. Replica b
// extends a lease it did not grant (it resumes it: the hold moves into
// b's session, for 1s), then replica a, which granted it, extends it to
// 6s and answers 200. The name must stay held until then: serve opens
// ZooKeeper with zookeeper.WithTakeOver, so a's Extend moves the hold
// back into a's session. Without it b's reaper ended the hold at b's 1s
// deadline and another client was granted the name while a's lease was
// valid.
func TestServeReplicasOnZooKeeper(t *testing.T) {
	zk := zktest.Start(t)
	env := []string{"DLOCK_ZOOKEEPER_SERVERS=" + zk.Addr(), "DLOCK_ADDR=127.0.0.1:0"}
	sa, sb := startDlock(t, env, "serve"), startDlock(t, env, "serve")
	a, b := "http://"+serveAddr(t, sa), "http://"+serveAddr(t, sb)
	name := uniqueName(t)
	post := func(base, op, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(base+"/v1/locks/"+name+"/"+op, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s %s: %v", op, base, err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	code, m := post(a, "acquire", `{"ttlMs":2000}`)
	if code != http.StatusOK {
		t.Fatalf("acquire on a = %d %v", code, m)
	}
	tok, _ := m["token"].(string)
	if code, m := post(b, "extend", `{"token":"`+tok+`","ttlMs":1000}`); code != http.StatusOK {
		t.Fatalf("extend on b (a lease b did not grant) = %d %v", code, m)
	}
	sent := time.Now()
	if code, m := post(a, "extend", `{"token":"`+tok+`","ttlMs":6000}`); code != http.StatusOK {
		t.Fatalf("extend on a after b's = %d %v", code, m)
	}
	valid := sent.Add(6 * time.Second) // the client's lease is valid until then
	for {
		code, m := post(b, "acquire", `{"ttlMs":10000}`)
		if code == http.StatusOK {
			if at := time.Now(); at.Before(valid) {
				t.Fatalf("another client was granted the name %v before the lease a extended ran out: two valid leases", valid.Sub(at))
			}
			break
		}
		if code != http.StatusConflict {
			t.Fatalf("acquire by another client = %d %v, want 409 or 200", code, m)
		}
		if time.Since(valid) > 20*time.Second {
			t.Fatalf("the name still held %v after the extended lease ran out", time.Since(valid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range []*dlockProc{sa, sb} {
		p.signal(sigterm)
		if code := p.wait(); code != 0 {
			t.Errorf("dlock serve exited %d after SIGTERM, want 0; stderr:\n%s", code, p.stderr.String())
		}
	}
}
