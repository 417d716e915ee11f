package replicas

import (
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/internal/testredis"
	"github.com/dlock-dev/dlock/store/valkey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMessageEncoding: a batch is encoded as json.Marshal encodes it, for
// hexadecimal IDs and drops and compact events.
func TestMessageEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	hexOf := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return hex.EncodeToString(b)
	}
	for i := range 200 {
		m := message{Replica: hexOf(8)}
		for range i % 3 {
			ev, _ := json.Marshal(map[string]any{"type": "acquire", "name": "a<b>&\"c\u2028", "time": i})
			m.Events = append(m.Events, ev)
		}
		for range i % 4 {
			m.Drop = append(m.Drop, leaseID(hexOf(3), hexOf(16)))
		}
		want, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.appendJSON(nil); string(got) != string(want) {
			t.Errorf("appendJSON = %s, want %s", got, want)
		}
	}
}

// TestReceiveSkipsOwnBatches (on a real redis-server): a batch this
// instance published comes back and is skipped; another instance's is passed on, and its drops of
// leases granted here reach Hooks.Served.
func TestReceiveSkipsOwnBatches(t *testing.T) {
	var events, served atomic.Int32
	srv := testredis.Start(t)
	st, err := valkey.Dial(t.Context(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := Start(st, slog.New(slog.DiscardHandler), Hooks{
		Event:  func(string, json.RawMessage) { events.Add(1) },
		Served: func(name, token string) { served.Add(1) },
		Held:   func(string, string) bool { return true },
	})
	defer b.Stop()
	if b.bus == nil {
		t.Fatal("no bus on a Valkey store")
	}
	ev := json.RawMessage(`{"type":"acquire","name":"x","mode":"mutex","result":"acquired","time":1}`)
	own := &message{Replica: b.ID(), Events: []json.RawMessage{ev}}
	b.receive(own.appendJSON(nil))
	if n := events.Load(); n != 0 {
		t.Errorf("after own batch: %d events, want 0", n)
	}
	b.Granted("x", "token")
	other := &message{Replica: b.ID() + "0", Events: []json.RawMessage{ev}, Drop: []string{leaseID("x", "token")}}
	b.receive(other.appendJSON(nil))
	if n := events.Load(); n != 1 {
		t.Errorf("after another's batch: %d events, want 1", n)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("after another's drop: %d leases served elsewhere, want 1", n)
	}
	if n := b.Count(time.Now()); n != 2 {
		t.Errorf("Count = %d, want 2 (this one and the other)", n)
	}
}
