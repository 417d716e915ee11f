package redisproto

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// BenchmarkMutexCallArgs is the client's work to name the keys and
// arguments of an uncontended mutex acquire and release on a new name
// (what a W2 cell of bench/ makes per op), for docs/design.md's mark-key
// table.
func BenchmarkMutexCallArgs(b *testing.B) {
	l := NewLayout("lock:", DefaultFenceRetention)
	o, err := ModeOps(store.ModeMutex, "valkey")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	names := make([]string, 4096)
	for i := range names {
		names[i] = "b" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := store.Request{Name: names[i%len(names)], Token: "0123456789abcdef0123456789abcdef", TTL: 30 * time.Second, Mode: store.ModeMutex}
		_ = o.AcquireKeys(l, req)
		_ = o.AcquireArgs(ctx, l, req)
		_, _, _, _ = o.ReleaseCall(l, req)
	}
}
