package valkey_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// TestDialSentinelFollowsFailover: a URL with master_set names Sentinels
// (the package doc of Dial); the Store finds the primary through them and,
// once Sentinel promoted the replica of a killed primary, grants on the
// new one without being told. The e2e fault scenarios T28 run the same
// under load with three Sentinels.
func TestDialSentinelFollowsFailover(t *testing.T) {
	p := testredis.Start(t)
	r := testredis.StartReplica(t, p)
	sen := testredis.StartSentinel(t)
	sen.Monitor(t, "m", p, 1, "down-after-milliseconds", "1000", "failover-timeout", "3000")
	testredis.WaitSentinels(t, []*testredis.Server{sen}, "m", p.Addr(), 1, 30*time.Second)
	s := dial(t, "redis://"+sen.Addr()+"?master_set=m")
	if got := s.Client().Mode(); got != vk.ClientModeSentinel {
		t.Fatalf("Client().Mode() = %v, want %v", got, vk.ClientModeSentinel)
	}
	ctx := prototest.Context(t)
	req := func(name string) store.Request {
		return store.Request{Name: name, Token: "t-" + name, TTL: time.Minute, Mode: store.ModeMutex}
	}
	if g, err := s.Acquire(ctx, req("before")); err != nil || !g.Acquired {
		t.Fatalf("Acquire(before) = %+v, %v; want a grant", g, err)
	}
	if got := mustDo(t, p, "GET", "lock:before"); got != "t-before" {
		t.Fatalf("GET lock:before on the primary = %q, want t-before", got)
	}
	p.Kill()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if a, err := sen.MasterAddr("m"); err == nil && a == r.Addr() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sentinel did not promote %s within 60s\n%s", r.Addr(), sen.LogTail())
		}
	}
	// The client learns of the promotion from Sentinel's +switch-master
	// or its next refresh: a call may still meet the dead primary.
	var err error
	promoted := time.Now()
	for i := 0; ; i++ {
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var g store.Grant
		g, err = s.Acquire(actx, req("after"+strconv.Itoa(i)))
		cancel()
		if err == nil && g.Acquired {
			if got := mustDo(t, r, "GET", "lock:after"+strconv.Itoa(i)); got != "t-after"+strconv.Itoa(i) {
				t.Fatalf("the grant after the failover is not on the promoted replica: GET = %q", got)
			}
			t.Logf("first grant on the promoted replica %v after Sentinel named it (attempt %d)", time.Since(promoted), i)
			return
		}
		if time.Since(promoted) > 30*time.Second {
			t.Fatalf("no grant on the promoted replica within 30s of its promotion (%d attempts): last %+v, %v", i+1, g, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
