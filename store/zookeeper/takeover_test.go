package zookeeper_test

import (
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
)

// TestExtendAfterResumeElsewhere: what two replicas of `dlock serve` do
// when a client's calls alternate between them. Store a grants a lease,
// Store b resumes it (a replica that did not know the token: the node
// moves into b's session, with b's 1s TTL), then a extends it to 6s and
// is told nil. Without WithTakeOver on a the node stays in b's session and
// b's reaper deletes it at b's deadline: a third Store is granted the name
// while a's lease still looks valid (the overlap). With WithTakeOver a's
// Extend moves the node back into a's session: the third Store is refused
// until a's extended deadline, and granted once it has passed.
func TestExtendAfterResumeElsewhere(t *testing.T) {
	srv := zktest.Start(t)
	for _, takeOver := range []bool{false, true} {
		name := "Plain"
		if takeOver {
			name = "WithTakeOver"
		}
		t.Run(name, func(t *testing.T) { extendAfterResume(t, srv, takeOver) })
	}
}

func extendAfterResume(t *testing.T, srv *zktest.Server, takeOver bool) {
	ctx := t.Context()
	var opts []zookeeper.Option
	if takeOver {
		opts = append(opts, zookeeper.WithTakeOver())
	}
	a, b, c := newStore(t, srv.Addr(), opts...), newStore(t, srv.Addr(), opts...), newStore(t, srv.Addr())
	req := store.Request{Name: "resumed-" + t.Name()[len(t.Name())-5:], Token: "tok-a", TTL: 2 * time.Second, Mode: store.ModeMutex}
	mustGrant(t, a, req)
	resume := req
	resume.TTL = time.Second
	if _, err := b.Resume(ctx, resume); err != nil {
		t.Fatalf("Resume through b = %v", err)
	}
	ext := req
	ext.TTL = 6 * time.Second
	sent := time.Now()
	if err := a.Extend(ctx, []store.Request{ext})[0]; err != nil {
		t.Fatalf("Extend through a after b's Resume = %v, want nil", err)
	}
	valid := sent.Add(ext.TTL) // a's lease is valid until then
	var grantedAt time.Time
	for {
		g, err := c.Acquire(ctx, store.Request{Name: req.Name, Token: "tok-c", TTL: 10 * time.Second, Mode: store.ModeMutex})
		if err != nil {
			t.Fatalf("Acquire through c = %v", err)
		}
		if g.Acquired {
			grantedAt = time.Now()
			break
		}
		if time.Since(valid) > 20*time.Second {
			t.Fatalf("c still refused %v after a's extended lease ran out", time.Since(valid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	overlap := grantedAt.Before(valid)
	switch {
	case takeOver && overlap:
		t.Errorf("c granted %v before a's extended lease (Extend answered nil) ran out: two valid leases", valid.Sub(grantedAt))
	case !takeOver && !overlap:
		t.Errorf("without WithTakeOver c was granted only %v after a's extended lease ran out; want it granted at b's deadline, inside a's lease (the hold stays in b's session)", grantedAt.Sub(valid))
	}
}
