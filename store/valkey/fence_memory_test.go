package valkey_test

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/valkey"
)

// TestMeasureBytesPerName measures what distinct names leave on a fresh
// redis-server once each was acquired and released: DBSIZE and used_memory
// over the empty server's, per name, for the version before 2026-11 (its
// mutex scripts, a fence counter per name kept a day), and for this one with
// the default fence retention just after the releases (each name's fence
// key still there) and once the retention passed (the slots' marks alone).
// A measurement, not a check: it runs when DLOCK_MEASURE_NAMES is set to the
// number of names, e.g.
//
//	DLOCK_MEASURE_NAMES=100000 go test -run TestMeasureBytesPerName -v ./store/valkey
func TestMeasureBytesPerName(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DLOCK_MEASURE_NAMES"))
	if n <= 0 {
		t.Skip("a measurement: set DLOCK_MEASURE_NAMES to the number of names")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	old := testredis.Start(t)
	base := usedMemory(t, old)
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{old.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	scripts := loadOldScripts(t)
	acquire := vk.NewLuaScript(scripts.mutexAcquire)
	release := vk.NewLuaScript(scripts.mutexRelease)
	parallel(n, func(i int) {
		name := "lock:name-" + strconv.Itoa(i)
		fence := "{" + name + "}:fence"
		if err := acquire.Exec(ctx, c, []string{name, fence}, []string{"t", "30000", "86400000", "0"}).Error(); err != nil {
			t.Error(err)
		}
		if err := release.Exec(ctx, c, []string{name, "{" + name + "}:waiters:flag"}, []string{"t"}).Error(); err != nil {
			t.Error(err)
		}
	})
	report(t, "before (1af8b53's scripts)", old, n, base)

	srv := testredis.Start(t)
	base = usedMemory(t, srv)
	s := dial(t, srv.URL())
	parallel(n, func(i int) {
		req := store.Request{Name: "name-" + strconv.Itoa(i), Token: "t", TTL: 30 * time.Second}
		if g, err := s.Acquire(ctx, req); err != nil || !g.Acquired {
			t.Errorf("Acquire = %+v, %v", g, err)
		}
		if err := s.Release(ctx, req); err != nil {
			t.Error(err)
		}
	})
	report(t, "after, within the retention", srv, n, base)
	// Expire what the retention keeps, as its end would.
	for i := range n {
		mustDo(t, srv, "DEL", s.AuxKey("name-"+strconv.Itoa(i), "fence"))
	}
	report(t, "after, once the retention passed", srv, n, base)
	marks := map[string]bool{}
	for i := range n {
		marks[s.MarkKey("name-"+strconv.Itoa(i))] = true
	}
	t.Logf("slots' marks: %d", len(marks))
	_ = valkey.DefaultFenceRetention
}

// parallel runs f(0..n-1) on 16 goroutines.
func parallel(n int, f func(int)) {
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				f(i)
			}
		})
	}
	wg.Wait()
}

var usedMemoryRE = regexp.MustCompile(`(?m)^used_memory:(\d+)`)

func usedMemory(t *testing.T, srv *testredis.Server) int64 {
	t.Helper()
	m := usedMemoryRE.FindStringSubmatch(mustDo(t, srv, "INFO", "memory"))
	if m == nil {
		t.Fatal("no used_memory in INFO memory")
	}
	v, _ := strconv.ParseInt(m[1], 10, 64)
	return v
}

func report(t *testing.T, what string, srv *testredis.Server, n int, base int64) {
	t.Helper()
	used := usedMemory(t, srv)
	t.Logf("%s: %d names: DBSIZE %d, used_memory %d -> %d bytes, %.1f bytes per name",
		what, n, dbsize(t, srv), base, used, float64(used-base)/float64(n))
}
