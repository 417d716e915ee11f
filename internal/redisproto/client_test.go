package redisproto

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"
)

func TestReplyAccessors(t *testing.T) {
	failed := errors.New("connection reset")
	ints := ArrayReply([]Reply{IntReply(1), IntReply(-2)})
	strs := ArrayReply([]Reply{StringReply("a"), StringReply("")})
	mixed := ArrayReply([]Reply{StringReply("string"), IntReply(1)})

	if n, err := IntReply(7).Int64(); n != 7 || err != nil {
		t.Errorf("IntReply(7).Int64() = %d, %v, want 7, nil", n, err)
	}
	if v, err := ints.Int64s(); !slices.Equal(v, []int64{1, -2}) || err != nil {
		t.Errorf("Int64s() of {1, -2} = %v, %v", v, err)
	}
	if v, err := strs.Strings(); !slices.Equal(v, []string{"a", ""}) || err != nil {
		t.Errorf("Strings() of {a, \"\"} = %q, %v", v, err)
	}
	if v, err := mixed.Values(); len(v) != 2 || v[0].Str() != "string" || err != nil {
		t.Errorf("Values() of {string, 1} = %v, %v", v, err)
	}
	if v, err := ArrayReply([]Reply{}).Strings(); len(v) != 0 || err != nil {
		t.Errorf("Strings() of {} = %q, %v, want none, nil", v, err)
	}
	// The wrong kind is an error, never a zero value taken for a reply.
	for _, c := range []struct {
		name string
		err  error
	}{
		{"Int64 of an array", func() error { _, err := ints.Int64(); return err }()},
		{"Int64 of nil", func() error { _, err := NilReply().Int64(); return err }()},
		{"Int64s of an integer", func() error { _, err := IntReply(1).Int64s(); return err }()},
		{"Int64s of {string, 1}", func() error { _, err := mixed.Int64s(); return err }()},
		{"Strings of {1, -2}", func() error { _, err := ints.Strings(); return err }()},
	} {
		if c.err == nil {
			t.Errorf("%s = nil error, want one", c.name)
		}
	}
	// A failed call is its error, whatever is asked of it.
	r := ErrorReply(failed)
	if _, err := r.Int64(); err != failed {
		t.Errorf("Int64() of a failed call = %v, want %v", err, failed)
	}
	if _, err := r.Int64s(); err != failed {
		t.Errorf("Int64s() of a failed call = %v, want %v", err, failed)
	}
	if r.Err() != failed || IntReply(1).Err() != nil {
		t.Errorf("Err() = %v and %v, want %v and nil", r.Err(), IntReply(1).Err(), failed)
	}
}

// legacyClient is a Client on a server without SPUBLISH and SSUBSCRIBE
// (before Redis 7): it refuses them as unknown commands.
type legacyClient struct {
	Client    // nil: the other calls are not made
	published []bool
	received  []bool
	ready     chan struct{}
}

type serverError string

func (e serverError) Error() string { return string(e) }

func (c *legacyClient) Publish(_ context.Context, _ string, _ []byte, legacy bool) error {
	c.published = append(c.published, legacy)
	if !legacy {
		return serverError("ERR unknown command 'SPUBLISH'")
	}
	return nil
}

func (c *legacyClient) Receive(ctx context.Context, _ string, legacy bool, ready func(), _ func(string)) error {
	c.received = append(c.received, legacy)
	if !legacy {
		return serverError("ERR unknown command 'SSUBSCRIBE'")
	}
	ready()
	close(c.ready)
	<-ctx.Done()
	return ctx.Err()
}

func (c *legacyClient) Unsubscribe(context.Context, string, bool) {}

func (c *legacyClient) ServerError(err error) (string, bool) {
	var se serverError
	if errors.As(err, &se) {
		return string(se), true
	}
	return "", false
}

func (c *legacyClient) Closed(error) bool { return false }

func legacyStore(c *legacyClient) *Store {
	s := &Store{c: c, name: "test", l: NewLayout("lock:", time.Hour), hub: NewHub(nil, slog.Default())}
	s.bus.Sub, s.bus.Log = subscriber{s}, slog.Default()
	return s
}

// TestLegacyPubSub: a server that refuses SPUBLISH as an unknown command
// gets PUBLISH, at once and from then on, and SUBSCRIBE for broadcasts.
func TestLegacyPubSub(t *testing.T) {
	c := &legacyClient{ready: make(chan struct{})}
	s := legacyStore(c)
	defer s.Close()
	ctx := t.Context()
	for range 2 {
		if err := s.Publish(ctx, "topic", []byte("m")); err != nil {
			t.Fatalf("Publish = %v", err)
		}
	}
	if want := []bool{false, true, true}; !slices.Equal(c.published, want) {
		t.Errorf("Publish calls (legacy) = %v, want %v", c.published, want)
	}
	stop, err := s.Subscribe(ctx, "topic", func([]byte) {})
	if err != nil {
		t.Fatalf("Subscribe = %v", err)
	}
	<-c.ready
	stop()
	if want := []bool{true}; !slices.Equal(c.received, want) {
		t.Errorf("Receive calls (legacy) = %v, want %v", c.received, want)
	}
}

// TestLegacySubscribe: a server that refuses SSUBSCRIBE as an unknown
// command is subscribed again with SUBSCRIBE, at once.
func TestLegacySubscribe(t *testing.T) {
	c := &legacyClient{ready: make(chan struct{})}
	s := legacyStore(c)
	defer s.Close()
	stop, err := s.Subscribe(t.Context(), "topic", func([]byte) {})
	if err != nil {
		t.Fatalf("Subscribe = %v", err)
	}
	<-c.ready
	stop() // waits for the receive loop
	if want := []bool{false, true}; !slices.Equal(c.received, want) {
		t.Errorf("Receive calls (legacy) = %v, want %v", c.received, want)
	}
}
