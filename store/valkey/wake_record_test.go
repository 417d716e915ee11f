package valkey_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store"
)

// TestRecordWaiterWokenByRelease: a mutex waiter whose request carries a
// hold record (every waiter of the HTTP service and the CLI: they always
// name a holder) is woken by the holder's release. Such a waiter is not
// registered for the handoff, which grants without a record, so the store
// refuses its grant watch and the Locker waits on Watch instead. Before,
// the Locker waited for a handoff that never came and took the lock only
// at its next queue refresh, a third of the queue TTL later (20 s here;
// 3 s by default): bench's TestScaleQuick saw no handoff at all through
// `dlock serve`.
func TestRecordWaiterWokenByRelease(t *testing.T) {
	srv := testredis.Start(t)
	s := dial(t, srv.URL())
	ctx := context.Background()
	req := store.Request{Name: "rec", Token: "t", TTL: time.Minute, Mode: store.ModeMutex, Queue: true, QueueTTL: time.Minute, Holder: "web-1"}
	if _, _, err := s.WatchGrant(ctx, req); !errors.Is(err, store.ErrNotSupported) {
		t.Errorf("WatchGrant of a mutex request with a record = %v, want ErrNotSupported", err)
	}
	l, err := dlock.New(s, dlock.WithTTL(time.Minute), dlock.WithQueueTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.Mutex("rec").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := scriptCalls(t, srv)
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		ls, err := l.Mutex("rec", dlock.WithHolder("web-2"), dlock.WithHolderData("job 8")).Lock(wctx)
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	// Release once the waiter's second attempt was refused: the first is
	// a plain one, after which the wait is armed (a handoff or a watch)
	// and the second follows at once. A release before it would let the
	// waiter take the lock without waiting.
	deadline := time.Now().Add(time.Minute)
	for scriptCalls(t, srv) < base+2 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter made no attempt within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("waiter with a hold record not woken by the release after %v (its queue refresh is 20 s away)", time.Since(released))
	}
}

// scriptCalls is how many scripts the server has run (EVALSHA, EVAL and
// FCALL).
func scriptCalls(t *testing.T, srv *testredis.Server) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(mustDo(t, srv, "INFO", "commandstats"), "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") || strings.HasPrefix(line, "cmdstat_fcall:") {
			rest := line[strings.Index(line, "calls=")+len("calls="):]
			c, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			n += c
		}
	}
	return n
}
