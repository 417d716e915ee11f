package server

import (
	"encoding/json"
	"testing"
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
