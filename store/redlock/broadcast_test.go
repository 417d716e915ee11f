package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store/redlock"
	"github.com/dlock-dev/dlock/store/valkey"
	"github.com/dlock-dev/dlock/storetest"
)

// TestBroadcast runs storetest.Broadcast on two redlock Stores over the
// same three nodes (two processes' views): each message is published on
// every node and heard once.
func TestBroadcast(t *testing.T) {
	c := startNodes(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var other []*valkey.Store
	for _, srv := range c.srvs {
		s, err := valkey.Dial(ctx, srv.URL())
		if err != nil {
			t.Fatalf("valkey.Dial = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		other = append(other, s)
	}
	a, err := redlock.New(c.nodes())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redlock.New(asStores(other))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	storetest.Broadcast(t, a, b)
}
