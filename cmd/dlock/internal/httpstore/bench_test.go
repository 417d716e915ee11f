package httpstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

func token() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// BenchmarkAcquireRelease measures one acquire and one release through the
// HTTP API of an in-process server on the memory store: two requests per
// operation, client and server sharing the machine.
func BenchmarkAcquireRelease(b *testing.B) {
	url := serveB(b)
	st, err := newBenchStore(url)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprintf("bench-%d", n.Add(1))
		for pb.Next() {
			req := store.Request{Name: name, Token: token(), TTL: 10 * time.Second}
			g, err := st.Acquire(ctx, req)
			if err != nil || !g.Acquired {
				b.Errorf("Acquire = %+v, %v", g, err)
				return
			}
			if err := st.Release(ctx, req); err != nil {
				b.Errorf("Release = %v", err)
				return
			}
		}
	})
}
