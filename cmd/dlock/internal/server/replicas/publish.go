package replicas

import (
	"context"
	"encoding/json"
	"time"
)

// message is what an instance publishes.
type message struct {
	Replica string            `json:"replica"`
	Events  []json.RawMessage `json:"events,omitempty"`
	Drop    []string          `json:"drop,omitempty"`
}

// appendJSON encodes a batch. Its replica ID and drops are hexadecimal,
// which JSON takes as they are; its events must be compact, HTML-safe JSON
// (as the server's event encoder and json.Marshal write them), which
// json.Marshal would copy unchanged.
func (m *message) appendJSON(b []byte) []byte {
	b = append(b, `{"replica":"`...)
	b = append(b, m.Replica...)
	b = append(b, '"')
	if len(m.Events) > 0 {
		b = append(b, `,"events":[`...)
		for i, ev := range m.Events {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, ev...)
		}
		b = append(b, ']')
	}
	if len(m.Drop) > 0 {
		b = append(b, `,"drop":[`...)
		for i, id := range m.Drop {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, id...)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// publishLoop publishes queued events and drops in batches, and a
// heartbeat when idle, until Stop.
func (b *Bus) publishLoop() {
	defer close(b.done)
	m := message{Replica: b.id}
	size := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	sent := time.Now()
	flush := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := b.bus.Publish(ctx, busTopic, m.appendJSON(make([]byte, 0, size+64))); err != nil {
			b.log.Debug("dlock: server: sharing events failed", "err", err)
		}
		cancel()
		m.Events, m.Drop, size = nil, nil, 0
		if armed {
			timer.Stop()
			armed = false
		}
		sent = time.Now()
	}
	for {
		select {
		case <-b.quit:
			return
		case it := <-b.pub:
			if it.event != nil {
				m.Events = append(m.Events, it.event)
				size += len(it.event) + 1
			} else {
				m.Drop = append(m.Drop, it.drop)
				size += len(it.drop) + 3
			}
			if size >= publishBytes {
				flush()
			} else if !armed {
				timer.Reset(publishDelay)
				armed = true
			}
		case <-timer.C:
			armed = false
			flush()
		case now := <-beat.C:
			if size == 0 && now.Sub(sent) >= heartbeat/2 {
				flush()
			}
		}
	}
}
