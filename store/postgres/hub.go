package postgres

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// hub is a store's one listening session: it LISTENs on notifyChannel and
// wakes the local watchers of the lock name a payload names ("<kind>:<name>").
// It starts with the first watch and stops on close.
type hub struct {
	connCfg *pgx.ConnConfig
	logger  *slog.Logger
	tick    func(ctx context.Context) // run about every sweepInterval while listening; may be nil

	mu       sync.Mutex
	watchers map[string]map[chan struct{}]struct{}
	closed   bool
	ln       *listener

	busMu   sync.Mutex // held while a subscriber's fn runs
	busNext int
	busSubs map[string]map[int]func([]byte) // by topic
}

type listener struct {
	cancel context.CancelFunc
	ready  chan struct{} // closed once LISTEN first succeeded
	done   chan struct{} // closed when the goroutine has returned
}

func newHub(cfg *pgx.ConnConfig, logger *slog.Logger, tick func(context.Context)) *hub {
	return &hub{connCfg: cfg, logger: logger, tick: tick, watchers: make(map[string]map[chan struct{}]struct{})}
}

// watch registers a watcher of key and returns once the listener listens.
func (h *hub) watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, storeErr("watch", errors.New("store closed"))
	}
	ln := h.listenLocked()
	ch := make(chan struct{}, 1)
	set := h.watchers[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.watchers[key] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			set := h.watchers[key]
			delete(set, ch)
			if len(set) == 0 {
				delete(h.watchers, key)
			}
		})
	}
	select {
	case <-ln.ready:
		return ch, stop, nil
	case <-ln.done:
	case <-ctx.Done():
	}
	stop()
	return nil, nil, storeErr("watch", errors.Join(errors.New("listener not ready"), ctx.Err()))
}

// listenLocked starts the listener unless it runs. h.mu is held.
func (h *hub) listenLocked() *listener {
	if h.ln == nil {
		lctx, cancel := context.WithCancel(context.Background())
		h.ln = &listener{cancel: cancel, ready: make(chan struct{}), done: make(chan struct{})}
		go h.run(lctx, h.ln)
	}
	return h.ln
}

// close stops the listener and waits for it.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	ln := h.ln
	h.mu.Unlock()
	if ln != nil {
		ln.cancel()
		<-ln.done
	}
}

func (h *hub) wake(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.watchers[key] {
		notify(ch)
	}
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.watchers {
		for ch := range set {
			notify(ch)
		}
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (h *hub) run(ctx context.Context, ln *listener) {
	defer close(ln.done)
	var readyOnce sync.Once
	delay := 50 * time.Millisecond
	nextTick := time.Now().Add(sweepInterval)
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, h.connCfg.Copy())
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+notifyChannel); err == nil {
				_, err = conn.Exec(ctx, "LISTEN "+busChannel)
			}
			if err != nil {
				conn.Close(context.Background())
			}
		}
		if err != nil {
			h.logger.Warn("dlock: postgres listener: connect failed; retrying", "err", err, "in", delay)
			t := time.NewTimer(delay + rand.N(delay)) //nolint:gosec // G404: reconnect jitter, not a secret
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			delay = min(2*delay, 5*time.Second)
			continue
		}
		delay = 50 * time.Millisecond
		readyOnce.Do(func() { close(ln.ready) })
		h.wakeAll() // anything may have happened while not listening
		for {
			wctx, cancel := context.WithDeadline(ctx, nextTick)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			if err == nil {
				switch n.Channel {
				case notifyChannel:
					// "<kind>:<name>": every kind's watchers of the name.
					_, name, _ := strings.Cut(n.Payload, ":")
					h.wake(name)
				case busChannel:
					h.deliver(n.Payload)
				}
				continue
			}
			if ctx.Err() != nil {
				break
			}
			if time.Now().After(nextTick) && !conn.IsClosed() {
				// The deadline interrupted the wait (a timeout leaves a pgx
				// connection usable): run the periodic task and go on.
				nextTick = time.Now().Add(sweepInterval)
				if h.tick != nil {
					tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
					h.tick(tctx)
					tcancel()
				}
				continue
			}
			h.logger.Warn("dlock: postgres listener: connection lost; reconnecting", "err", err)
			break
		}
		conn.Close(context.Background())
	}
}
