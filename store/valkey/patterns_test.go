package valkey_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/redisproto/prototest"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// TestFairAuditStream checks that the fair lock's audit stream records each
// grant and release with its fence, names holders without their tokens, and
// stays capped near 1000 entries.
func TestFairAuditStream(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := prototest.Context(t)
	key := s.AuditKey("audited")
	var fences []int64
	var tokens []string
	for i := range 3 {
		req := store.Request{Name: "audited", Token: "token-" + strconv.Itoa(i), TTL: time.Minute, Mode: store.ModeFair}
		g, err := s.Acquire(ctx, req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire = %+v, %v", g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Fatalf("Release = %v", err)
		}
		fences = append(fences, g.Fence)
		tokens = append(tokens, req.Token)
	}
	out := mustDo(t, srv, "XRANGE", key, "-", "+")
	for _, tok := range tokens {
		if strings.Contains(out, tok) {
			t.Errorf("audit stream contains a token: %s", out)
		}
	}
	var events []string
	for _, line := range strings.Split(out, "\n") {
		if line == "grant" || line == "release" {
			events = append(events, line)
		}
	}
	if want := "grant release grant release grant release"; strings.Join(events, " ") != want {
		t.Errorf("audit events = %v, want %s\n%s", events, want, out)
	}
	for _, f := range fences {
		if !strings.Contains(out, strconv.FormatInt(f, 10)) {
			t.Errorf("audit stream lacks fence %d:\n%s", f, out)
		}
	}
	if ttl, _ := strconv.Atoi(mustDo(t, srv, "PTTL", key)); ttl <= 0 || ttl > 86400000 {
		t.Errorf("PTTL of the audit stream = %d, want in (0, 1 day]", ttl)
	}

	// Capped: 1200 more grants and releases leave about 1000 entries.
	for i := range 600 {
		req := store.Request{Name: "audited", Token: "t" + strconv.Itoa(i), TTL: time.Minute, Mode: store.ModeFair}
		if _, err := s.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		s.Release(ctx, req)
	}
	if n, _ := strconv.Atoi(mustDo(t, srv, "XLEN", key)); n < 1000 || n > 1200 {
		t.Errorf("XLEN of the audit stream after 1206 entries = %d, want about 1000", n)
	}
}

// TestFairHandoffAcrossStores checks that each release hands the lock to
// the head waiter alone, whichever store it waits through, and that the
// grant reaches that waiter's store.
func TestFairHandoffAcrossStores(t *testing.T) {
	srv := testredis.Start(t)
	a, b := dial(t, srv.URL()), dial(t, srv.URL())
	ctx := prototest.Context(t)
	holder := store.Request{Name: "f", Token: "holder", TTL: time.Minute, Mode: store.ModeFair}
	if g, err := a.Acquire(ctx, holder); err != nil || !g.Acquired {
		t.Fatalf("Acquire = %+v, %v", g, err)
	}
	wa := store.Request{Name: "f", Token: "wa", TTL: time.Minute, Mode: store.ModeFair, Queue: true, QueueTTL: time.Minute}
	wb := wa
	wb.Token = "wb"
	cha, stopA, err := a.WatchGrant(ctx, wa)
	if err != nil {
		t.Fatal(err)
	}
	defer stopA()
	chb, stopB, err := b.WatchGrant(ctx, wb)
	if err != nil {
		t.Fatal(err)
	}
	defer stopB()
	for _, w := range []struct {
		s interface {
			Acquire(context.Context, store.Request) (store.Grant, error)
		}
		req store.Request
	}{{a, wa}, {b, wb}} {
		if g, err := w.s.Acquire(ctx, w.req); err != nil || g.Acquired {
			t.Fatalf("queueing Acquire = %+v, %v", g, err)
		}
	}
	if err := a.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-cha:
		if !g.Acquired {
			t.Fatalf("grant delivered to a = %+v", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no grant delivered to the head waiter")
	}
	select {
	case g := <-chb:
		t.Fatalf("store b's waiter got %+v from a release that handed the lock to a's waiter", g)
	default:
	}
	if err := a.Release(ctx, wa); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-chb:
		if !g.Acquired {
			t.Fatalf("grant delivered to b = %+v", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no grant delivered to b's waiter after a's release")
	}
}
