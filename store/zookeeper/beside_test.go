package zookeeper_test

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/zookeeper"
	"github.com/dlock-dev/dlock/store/zookeeper/zktest"
	"github.com/go-zookeeper/zk"
)

// TestBeside checks the holds that enter beside their owner's hold (a
// re-entry, a downgrade) past a queued waiter of another pattern, and that
// such a hold keeps the name after the hold it entered beside is released.
func TestBeside(t *testing.T) {
	srv := zktest.Start(t)
	const ttl = 20 * time.Second
	grant := func(t *testing.T, s *zookeeper.Store, req store.Request) store.Grant {
		t.Helper()
		g, err := s.Acquire(t.Context(), req)
		if err != nil || !g.Acquired {
			t.Fatalf("Acquire(%v %q) = %+v, %v; want a grant", req.Mode, req.Token, g, err)
		}
		return g
	}
	refuse := func(t *testing.T, s *zookeeper.Store, req store.Request, held store.Mode) {
		t.Helper()
		g, err := s.Acquire(t.Context(), req)
		if err != nil || g.Acquired || g.Held != held {
			t.Fatalf("Acquire(%v %q) = %+v, %v; want a refusal with Held %v", req.Mode, req.Token, g, err, held)
		}
	}
	release := func(t *testing.T, s *zookeeper.Store, req store.Request) {
		t.Helper()
		if err := s.Release(t.Context(), req); err != nil {
			t.Fatalf("Release(%v %q) = %v", req.Mode, req.Token, err)
		}
	}
	fair := func(name string) store.Request {
		return store.Request{Name: name, Token: "f", TTL: ttl, Mode: store.ModeFair, Queue: true, QueueTTL: ttl}
	}

	t.Run("ReentryPastQueuedFair", func(t *testing.T) {
		s := newStore(t, srv.Addr())
		a := store.Request{Name: "re", Token: "a", TTL: ttl, Mode: store.ModeReentrant, Owner: "x"}
		b := a
		b.Token = "b"
		ga := grant(t, s, a)
		refuse(t, s, fair("re"), store.ModeReentrant)
		if gb := grant(t, s, b); gb.Count != 2 || gb.Fence != ga.Fence {
			t.Errorf("re-entry past a queued fair waiter = %+v, want Count 2 and fence %d", gb, ga.Fence)
		}
		release(t, s, a)
		// The re-entry holds the name on its own now.
		refuse(t, s, fair("re"), store.ModeReentrant)
		refuse(t, s, store.Request{Name: "re", Token: "y", TTL: ttl, Mode: store.ModeReentrant, Owner: "y"}, store.ModeReentrant)
		c := a
		c.Token = "c"
		if gc := grant(t, s, c); gc.Count != 2 || gc.Fence != ga.Fence {
			t.Errorf("re-entry beside a re-entry = %+v, want Count 2 and fence %d", gc, ga.Fence)
		}
		if st, err := s.State(t.Context(), "re"); err != nil || st.Mode != store.ModeReentrant || st.Holders != 1 || st.Queue != 1 || st.Fence != ga.Fence {
			t.Errorf("State = %+v, %v; want the reentrant hold (fence %d) and one waiter", st, err, ga.Fence)
		}
		release(t, s, b)
		release(t, s, c)
		if g := grant(t, s, fair("re")); g.Fence <= ga.Fence {
			t.Errorf("fair grant after the reentrant hold: fence %d, want > %d", g.Fence, ga.Fence)
		}
	})

	t.Run("DowngradePastQueuedFair", func(t *testing.T) {
		s := newStore(t, srv.Addr())
		w := store.Request{Name: "down", Token: "w", TTL: ttl, Mode: store.ModeWrite}
		r := store.Request{Name: "down", Token: "r", TTL: ttl, Mode: store.ModeRead, Owner: "w"}
		gw := grant(t, s, w)
		refuse(t, s, fair("down"), store.ModeWrite)
		if gr := grant(t, s, r); gr.Fence != gw.Fence {
			t.Errorf("downgrade past a queued fair waiter: fence %d, want the writer's %d", gr.Fence, gw.Fence)
		}
		release(t, s, w)
		refuse(t, s, fair("down"), store.ModeRead)
		refuse(t, s, store.Request{Name: "down", Token: "m", TTL: ttl}, store.ModeRead)
		release(t, s, r)
		grant(t, s, fair("down"))
	})

	t.Run("DowngradePastQueuedWriter", func(t *testing.T) {
		s := newStore(t, srv.Addr())
		w := store.Request{Name: "down2", Token: "w", TTL: ttl, Mode: store.ModeWrite}
		w2 := store.Request{Name: "down2", Token: "w2", TTL: ttl, Mode: store.ModeWrite, Queue: true, QueueTTL: ttl}
		r := store.Request{Name: "down2", Token: "r", TTL: ttl, Mode: store.ModeRead, Owner: "w"}
		grant(t, s, w)
		refuse(t, s, w2, store.ModeWrite)
		grant(t, s, r)
		release(t, s, w)
		refuse(t, s, w2, store.ModeRead)
		release(t, s, r)
		grant(t, s, w2)
	})

	// Another owner's node created just before a re-entry (its Acquire
	// still deciding) must not take the name when the first hold goes.
	t.Run("ReentryBeforeAStrangersNode", func(t *testing.T) {
		s := newStore(t, srv.Addr())
		a := store.Request{Name: "race", Token: "a", TTL: ttl, Mode: store.ModeReentrant, Owner: "x"}
		b := a
		b.Token = "b"
		grant(t, s, a)
		b64 := base64.RawURLEncoding
		dir := zookeeper.DefaultRoot + "/x/n" + b64.EncodeToString([]byte("race"))
		if _, err := s.Conn().Create(dir+"/rx~"+b64.EncodeToString([]byte("y"))+"~"+b64.EncodeToString([]byte("y"))+"-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		grant(t, s, b)
		release(t, s, a)
		refuse(t, s, store.Request{Name: "race", Token: "y", TTL: ttl, Mode: store.ModeReentrant, Owner: "y"}, store.ModeReentrant)
	})
}
