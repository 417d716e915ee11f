package storetest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/store"
)

// Broadcast checks a [store.Broadcaster] through two handles on one store,
// as two processes would hold them: a message published through either
// reaches the subscribers of its topic on both (the publisher's own
// included), in publish order, once each; a message of the largest size
// every Broadcaster carries arrives intact; other topics hear nothing; after
// stop a subscriber hears nothing more.
func Broadcast(t *testing.T, a, b store.Broadcaster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := fmt.Sprintf("storetest-%d", time.Now().UnixNano())
	type sub struct {
		ch   chan []byte
		stop func()
	}
	subscribe := func(br store.Broadcaster, topic string) sub {
		ch := make(chan []byte, 64)
		stop, err := br.Subscribe(ctx, topic, func(m []byte) {
			select {
			case ch <- bytes.Clone(m):
			default:
				t.Errorf("subscriber of %q: more than 64 messages pending", topic)
			}
		})
		if err != nil {
			t.Fatalf("Subscribe(%q) = %v", topic, err)
		}
		return sub{ch, stop}
	}
	sa, sb := subscribe(a, topic), subscribe(b, topic)
	other := subscribe(b, topic+"-other")
	defer sa.stop()
	defer other.stop()

	big := bytes.Repeat([]byte("x"), store.MaxBroadcast)
	msgs := [][]byte{[]byte("one"), []byte("two"), big, []byte("three\x00\xff")}
	// A subscription may take effect on the server a moment after
	// Subscribe returns (it waits a bounded time): publish a first message
	// until both hear it.
	hello := []byte("hello")
	deadline := time.Now().Add(20 * time.Second)
	for heard := [2]bool{}; !heard[0] || !heard[1]; {
		if time.Now().After(deadline) {
			t.Fatalf("no subscriber heard %q within 20s (heard: %v)", hello, heard)
		}
		if err := a.Publish(ctx, topic, hello); err != nil {
			t.Fatalf("Publish = %v", err)
		}
		timer := time.NewTimer(200 * time.Millisecond)
	wait:
		for {
			select {
			case m := <-sa.ch:
				heard[0] = heard[0] || bytes.Equal(m, hello)
			case m := <-sb.ch:
				heard[1] = heard[1] || bytes.Equal(m, hello)
			case <-timer.C:
				break wait
			}
			if heard[0] && heard[1] {
				break
			}
		}
		timer.Stop()
	}
	drain := func(ch chan []byte) {
		for {
			select {
			case <-ch:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	drain(sa.ch)
	drain(sb.ch)

	for i, m := range msgs {
		pub := a
		if i%2 == 1 {
			pub = b
		}
		if err := pub.Publish(ctx, topic, m); err != nil {
			t.Fatalf("Publish(%d bytes) = %v", len(m), err)
		}
	}
	for _, s := range []sub{sa, sb} {
		for i, want := range msgs {
			select {
			case got := <-s.ch:
				if !bytes.Equal(got, want) {
					t.Errorf("message %d = %.40q (%d bytes), want %.40q (%d bytes)", i, got, len(got), want, len(want))
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("message %d not received within 20s", i)
			}
		}
	}
	sb.stop()
	if err := a.Publish(ctx, topic, []byte("after stop")); err != nil {
		t.Fatalf("Publish = %v", err)
	}
	select {
	case got := <-sa.ch:
		if string(got) != "after stop" {
			t.Errorf("after stop: got %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("message after stop not received by the other subscriber within 20s")
	}
	// Anything still pending on the stopped subscriber, or on the other
	// topic, was delivered wrongly; the live subscriber's delivery above
	// bounds how long such a message could still be in flight.
	select {
	case got := <-sb.ch:
		t.Errorf("stopped subscriber received %q", got)
	default:
	}
	select {
	case got := <-other.ch:
		t.Errorf("subscriber of another topic received %q", got)
	default:
	}
	select {
	case got := <-sa.ch:
		t.Errorf("duplicate message %q", got)
	case <-time.After(200 * time.Millisecond):
	}
}
