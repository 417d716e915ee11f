package main

// A user-space model of the network between the clients and redis-server
// (this kernel has no netem): a TCP proxy on loopback that delays every
// chunk of bytes by a fixed one-way delay in each direction.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// delayProxy listens on 127.0.0.1 and forwards every connection it accepts
// to a server, each chunk of bytes, in either direction, written delay
// after it was read. The order of the bytes is kept; the two directions of
// a connection do not wait for each other. Bandwidth is not modelled.
//
// The writers wait on a timerfd per direction (one kernel timer, re-armed
// for every chunk), read through the Go netpoller, rather than on Go
// timers: a Go timer sleeps in epoll_wait with a millisecond timeout when
// the process is otherwise idle, so a 500 µs timer fires after ~1.1 ms,
// while the timerfd wakes the writer when it expires. The proxy's own
// goroutine wake-ups (the reader's, then the writer's) come on top of the
// delay.
type delayProxy struct {
	ln       net.Listener
	upstream string
	delay    time.Duration

	wg   sync.WaitGroup
	done chan struct{}

	mu     sync.Mutex
	closed bool
	conns  map[*proxyConn]struct{}
	err    error // the first failure to reach upstream or make a timer
}

// proxyConn is one proxied connection: the client's side, the server's
// side, and a timer for each direction.
type proxyConn struct {
	client, server net.Conn
	timers         [2]*os.File
	once           sync.Once
}

// close closes both sides and both timers; the goroutines of the
// connection then end.
func (c *proxyConn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
		for _, t := range c.timers {
			if t != nil {
				t.Close()
			}
		}
	})
}

// newDelayProxy starts a proxy to upstream (host:port) with the given
// one-way delay. Close stops it.
func newDelayProxy(upstream string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, upstream: upstream, delay: delay, done: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// addr is the address clients dial instead of upstream's.
func (p *delayProxy) addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection and returns when every
// goroutine of the proxy has ended. It returns the first failure of the
// proxy to set a connection up, if any.
func (p *delayProxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
		p.ln.Close()
		for c := range p.conns {
			c.close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *delayProxy) fail(err error) {
	p.mu.Lock()
	if p.err == nil && !p.closed {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *delayProxy) accept() {
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Go(func() { p.serve(cc) })
	}
}

// serve connects one accepted client to upstream and runs the four
// goroutines of the connection: a reader and a writer per direction.
func (p *delayProxy) serve(cc net.Conn) {
	d := net.Dialer{Timeout: 5 * time.Second}
	sc, err := d.Dial("tcp", p.upstream)
	if err != nil {
		cc.Close()
		p.fail(fmt.Errorf("delay proxy: dial %s: %w", p.upstream, err))
		return
	}
	c := &proxyConn{client: cc, server: sc}
	for i := range c.timers {
		if c.timers[i], err = newTimer(); err != nil {
			c.close()
			p.fail(fmt.Errorf("delay proxy: %w", err))
			return
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var dirs sync.WaitGroup
	for i, pair := range [2][2]net.Conn{{cc, sc}, {sc, cc}} {
		ch := make(chan chunk, 256)
		dirs.Go(func() { p.read(c, pair[0], ch) })
		dirs.Go(func() { p.write(c, pair[1], c.timers[i], ch) })
	}
	dirs.Wait()
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// chunk is what one read returned, and when it is due at the other end.
// A chunk with eof set carries no data: the reading side was shut.
type chunk struct {
	data []byte
	due  time.Time
	eof  bool
}

// read reads src and queues every chunk, due delay later, for the writer.
// At the end of src it queues an eof chunk (due delay later too); on any
// other failure it closes the connection.
func (p *delayProxy) read(c *proxyConn, src net.Conn, ch chan<- chunk) {
	defer close(ch)
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ck := chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.delay)}
			select {
			case ch <- ck:
			case <-p.done:
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				select {
				case ch <- chunk{eof: true, due: time.Now().Add(p.delay)}:
				case <-p.done:
				}
				return
			}
			c.close()
			return
		}
	}
}

// write writes every chunk to dst once it is due, in order. After an eof
// chunk it shuts dst's sending side (the peer sees the end of the stream,
// delayed as the bytes are). When a write or the timer fails it closes the
// connection and drains ch, so that the reader is not left blocked on it.
func (p *delayProxy) write(c *proxyConn, dst net.Conn, timer *os.File, ch <-chan chunk) {
	fail := func() {
		c.close()
		for range ch {
		}
	}
	rc, err := timer.SyscallConn()
	if err != nil {
		fail()
		return
	}
	for ck := range ch {
		if err := waitUntil(timer, rc, ck.due); err != nil {
			fail()
			return
		}
		if ck.eof {
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			continue
		}
		if _, err := dst.Write(ck.data); err != nil {
			fail()
			return
		}
	}
}

// newTimer makes a non-blocking timerfd on CLOCK_MONOTONIC (the clock of
// time.Now's monotonic reading), as an *os.File whose reads park in the Go
// netpoller.
func newTimer() (*os.File, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	return os.NewFile(uintptr(fd), "timerfd"), nil
}

// waitUntil returns once t has passed, parked on timer (rc is its raw
// connection), armed for the time left; it fails if timer is closed
// meanwhile. A timer never expires early and the time left is measured
// before arming, so it never returns before t.
func waitUntil(timer *os.File, rc syscall.RawConn, t time.Time) error {
	var buf [8]byte
	for {
		left := time.Until(t)
		if left <= 0 {
			return nil
		}
		its := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(left))}
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.TimerfdSettime(int(fd), 0, &its, nil) }); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("timerfd_settime: %w", serr)
		}
		if _, err := timer.Read(buf[:]); err != nil {
			return err
		}
	}
}

// contentionNet runs W3-net for one contender: W3 (workers clients, each
// with its own client) with every client and the RTT probe reaching the
// servers through a delay proxy with one-way delay delay. Before the
// clients open, it measures the idle PING round trip through the proxy.
// The commands per critical section are still counted on the servers.
func contentionNet(ctx context.Context, c contender, nodes cluster, delay time.Duration, workers int, hold, warm, dur time.Duration) (m metrics, err error) {
	var via []string
	var proxies []*delayProxy
	defer func() {
		for _, p := range proxies {
			if perr := p.Close(); perr != nil && err == nil {
				m, err = nil, fmt.Errorf("%s: %w", c.name, perr)
			}
		}
	}()
	for _, n := range nodes {
		p, err := newDelayProxy(n.addr, delay)
		if err != nil {
			return nil, err
		}
		proxies = append(proxies, p)
		via = append(via, p.addr())
	}
	idle, err := plainPing(ctx, via[0], netIdlePings)
	if err != nil {
		return nil, fmt.Errorf("%s: idle PING through the proxy: %w", c.name, err)
	}
	m, err = contentionVia(ctx, c, nodes, via, workers, false, hold, warm, dur)
	if err != nil {
		return nil, err
	}
	m["net_delay_us"] = float64(delay) / float64(time.Microsecond)
	m["net_idle_rtt_p50_us"] = pct(idle, 50)
	m["net_idle_rtt_p99_us"] = pct(idle, 99)
	return m, nil
}

// netIdlePings is how many PINGs measure the idle round trip through the
// proxy in each W3-net cell (after a tenth more to warm up).
const netIdlePings = 200
