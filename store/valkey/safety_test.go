package valkey_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// TestEvictionPolicy: an evicting maxmemory-policy is a warning, or an error
// under WithStrictEviction; noeviction is neither.
func TestEvictionPolicy(t *testing.T) {
	lru := testredis.Start(t, testredis.WithArgs("--maxmemory-policy", "allkeys-lru"))
	var logs logBuffer
	dial(t, lru.URL(), valkey.WithLogger(logs.logger()))
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "allkeys-lru") {
		t.Errorf("Dial on an allkeys-lru server logged %q, want a warning naming the policy", out)
	}

	s, err := valkey.Dial(prototest.Context(t), lru.URL(), valkey.WithStrictEviction())
	if err == nil {
		s.Close()
	}
	var ee *valkey.EvictionError
	if !errors.Is(err, valkey.ErrEvictionPolicy) || !errors.As(err, &ee) || ee.Policy != "allkeys-lru" {
		t.Errorf("Dial(WithStrictEviction) on an allkeys-lru server = %v, want an *EvictionError for allkeys-lru", err)
	}

	safe := testredis.Start(t)
	var quiet logBuffer
	dial(t, safe.URL(), valkey.WithLogger(quiet.logger()), valkey.WithStrictEviction())
	if out := quiet.String(); strings.Contains(out, "level=WARN") {
		t.Errorf("Dial on a noeviction server logged %q, want no warning", out)
	}
}

// TestEvictionPolicyUnreadable: a server with CONFIG disabled (as on managed
// services) is tolerated, even in strict mode, and noted in the log.
func TestEvictionPolicyUnreadable(t *testing.T) {
	srv := testredis.Start(t, testredis.WithArgs("--rename-command", "CONFIG", ""))
	var logs logBuffer
	s := dial(t, srv.URL(), valkey.WithLogger(logs.logger()), valkey.WithStrictEviction())
	if out := logs.String(); !strings.Contains(out, "could not read maxmemory-policy") {
		t.Errorf("Dial with CONFIG disabled logged %q, want a note that the policy is unknown", out)
	}
	if err := s.Ping(prototest.Context(t)); err != nil {
		t.Errorf("Ping = %v", err)
	}
}

// TestWaitReplicas: with WithWaitReplicas a grant is confirmed by the
// replica; with the replica paused, the grant is released and reported.
func TestWaitReplicas(t *testing.T) {
	primary := testredis.Start(t)
	replica := testredis.StartReplica(t, primary)
	s := dial(t, primary.URL(), valkey.WithWaitReplicas(1, 200*time.Millisecond))
	ctx := prototest.Context(t)

	a := store.Request{Name: "x", Token: "token-a", TTL: time.Minute, Mode: store.ModeMutex}
	g, err := s.Acquire(ctx, a)
	if err != nil || !g.Acquired {
		t.Fatalf("Acquire(x) with a live replica = %+v, %v; want a grant", g, err)
	}
	if got := mustDo(t, replica, "GET", "lock:x"); got != "token-a" {
		t.Errorf("replica's GET lock:x right after the grant = %q, want %q", got, "token-a")
	}
	// A refusal is not a grant: nothing to confirm or release.
	b := store.Request{Name: "x", Token: "token-b", TTL: time.Minute, Mode: store.ModeMutex}
	if g, err := s.Acquire(ctx, b); err != nil || g.Acquired {
		t.Errorf("Acquire(x) by another token = %+v, %v; want a refusal", g, err)
	}

	replica.Pause()
	t.Cleanup(replica.Resume)
	c := store.Request{Name: "y", Token: "token-c", TTL: time.Minute, Mode: store.ModeMutex}
	g, err = s.Acquire(ctx, c)
	var re *valkey.ReplicationError
	if !errors.As(err, &re) || !errors.Is(err, valkey.ErrNotReplicated) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Acquire(y) with the replica paused = %+v, %v; want a *ReplicationError wrapping ErrNotReplicated and ErrUnavailable", g, err)
	}
	if g.Acquired || re.Want != 1 || re.Acked != 0 {
		t.Errorf("Acquire(y) = %+v, %+v; want no grant, 0 of 1 replicas", g, re)
	}
	if got := mustDo(t, primary, "EXISTS", "lock:y"); got != "0" {
		t.Errorf("EXISTS lock:y after the unreplicated grant = %s, want 0 (released)", got)
	}

	// Through a Locker, TryLock fails with the same typed error.
	l := prototest.NewLocker(t, s)
	ls, err := l.Mutex("z").TryLock(ctx)
	if !errors.As(err, &re) {
		t.Errorf("TryLock(z) with the replica paused = %v, %v; want a *ReplicationError", ls, err)
	}
	if got := mustDo(t, primary, "EXISTS", "lock:z"); got != "0" {
		t.Errorf("EXISTS lock:z after the failed TryLock = %s, want 0", got)
	}
}

// TestAmbiguousAcquire: an Acquire whose reply is lost (the server holds it
// past the caller's deadline, then runs it) is
// resolved by asking again with the same token: the same grant, the same
// fence.
func TestAmbiguousAcquire(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	req := store.Request{Name: "x", Token: "token-a", TTL: time.Minute, Mode: store.ModeMutex}
	// Warm up: the function is loaded, so the lost call is a single FCALL.
	warm := store.Request{Name: "warm", Token: "w", TTL: time.Minute, Mode: store.ModeMutex}
	if _, err := s.Acquire(ctx, warm); err != nil {
		t.Fatalf("Acquire(warm) = %v", err)
	}

	// CLIENT PAUSE holds write commands on the server (the connection
	// stays up), so the call is received and runs after our deadline:
	// exactly a reply lost to a timeout. (SIGSTOP would not do: the client
	// may drop the connection before the command leaves it.)
	if _, err := srv.Do("CLIENT", "PAUSE", "1000", "WRITE"); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	// The caller gives up by cancelling a ctx without a deadline: a call
	// with a deadline runs on a direct connection, which valkey-go closes
	// when the deadline passes, so the server may drop the command (also
	// an ambiguous outcome, but not the one under test); a cancelled call
	// stays on the pipeline and the server runs it later.
	short, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := time.AfterFunc(100*time.Millisecond, cancel)
	g, err := s.Acquire(short, req)
	stop.Stop()
	cancel()
	if err == nil {
		t.Fatalf("Acquire(x) with writes paused = %+v, nil; want an error", g)
	}
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire(x) with writes paused = %v; want a *StoreError wrapping the cancellation", err)
	}
	// The server runs the lost call once resumed.
	deadline := time.Now().Add(10 * time.Second)
	for mustDo(t, srv, "GET", "lock:x") != req.Token {
		if time.Now().After(deadline) {
			t.Fatal("the lost Acquire did not run within 10s of the pause")
		}
		time.Sleep(5 * time.Millisecond)
	}
	lost := mustDo(t, srv, "GET", "{lock:x}:fence")

	g, err = s.Acquire(ctx, req)
	if err != nil || !g.Acquired {
		t.Fatalf("re-asked Acquire(x) = %+v, %v; want the grant", g, err)
	}
	if got := strconvI(g.Fence); got != lost {
		t.Errorf("re-asked Acquire(x) fence = %s, want %s, the fence of the lost grant", got, lost)
	}
	if err := s.Release(ctx, req); err != nil {
		t.Errorf("Release(x) = %v", err)
	}
}
