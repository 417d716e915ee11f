package server

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
	"github.com/dlock-dev/dlock/store/memory"
)

// TestFeedSharesOneEncodingPerEvent: every stream gets the same encoded
// event (a stream's buffer holds a pointer, not a copy of the event), and
// the encoding is what json.Marshal writes for it, as streams sent before.
func TestFeedSharesOneEncodingPerEvent(t *testing.T) {
	var f feed
	a, b := make(chan *feedEvent, 1), make(chan *feedEvent, 1)
	defer f.subscribe(a)()
	defer f.subscribe(b)()
	ev := eventBody{Type: "acquire", Name: "orders<&>", Mode: "mutex", Result: "acquired", Fence: 7, DurationMs: 3, Waited: true, Time: 1700000000000, Replica: "9f3c"}
	f.send(ev)
	ea, eb := <-a, <-b
	if ea != eb {
		t.Errorf("streams got %p and %p, want one shared event", ea, eb)
	}
	want, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if string(ea.data) != string(want) || ea.typ != "acquire" || ea.name != ev.Name {
		t.Errorf("feed event = %q %q %s, want acquire %q %s", ea.typ, ea.name, ea.data, ev.Name, want)
	}
}

// listCounter is a memory store that counts List calls.
type listCounter struct {
	*memory.Store
	lists atomic.Int64
}

func (c *listCounter) List(ctx context.Context) ([]store.State, error) {
	c.lists.Add(1)
	return c.Store.List(ctx)
}

// TestStreamsShareTheirSnapshotList: the open /v1/events streams list the
// store once per half SnapshotInterval between them, not once per stream
// per interval (20 streams made about 20 times the calls before).
func TestStreamsShareTheirSnapshotList(t *testing.T) {
	const streams, interval = 20, 40 * time.Millisecond
	st := &listCounter{Store: memory.New()}
	e := newEnv(t, st, Config{SnapshotInterval: interval})
	var ss []*stream
	for range streams {
		s := openStream(t, e)
		s.until("the first snapshot", func(event string, _ []byte) bool { return event == "snapshot" })
		ss = append(ss, s)
	}
	from, t0 := st.lists.Load(), time.Now()
	for _, s := range ss { // every stream gets 5 more snapshots
		for range 5 {
			s.until("a snapshot", func(event string, _ []byte) bool { return event == "snapshot" })
		}
	}
	calls, elapsed := st.lists.Load()-from, time.Since(t0)
	// Calls are at least interval/2 apart, plus one in flight at t0.
	if most := int64(elapsed/(interval/2)) + 2; calls > most {
		t.Errorf("%d streams listed the store %d times in %v, want at most %d", streams, calls, elapsed, most)
	}
}
