package main

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// echoServer accepts connections on loopback and echoes each one until its
// client shuts its sending side, then closes it. It stops when the test
// ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				io.Copy(c, c)
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// noLeaks checks, once the test and its cleanups are over, that no
// goroutine it started is left.
func noLeaks(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

// TestDelayProxy checks that the proxy carries a stream intact and in order
// both ways (through an echo server, written and read at once, in chunks
// of random sizes), passes the end of the stream on, and that a round trip
// through it takes at least twice the one-way delay (the proxy writes no
// chunk before it is due: a lower bound by its design, not a speed
// assertion).
func TestDelayProxy(t *testing.T) {
	noLeaks(t)
	const delay = 2 * time.Millisecond
	p, err := newDelayProxy(echoServer(t), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	}()

	t.Run("stream", func(t *testing.T) {
		c, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		sent := make([]byte, 1<<20)
		for i := range sent {
			sent[i] = byte(rng.Uint32())
		}
		werr := make(chan error, 1)
		go func() {
			rest := sent
			for len(rest) > 0 {
				n := min(len(rest), 1+rng.IntN(16<<10))
				if _, err := c.Write(rest[:n]); err != nil {
					werr <- err
					return
				}
				rest = rest[n:]
			}
			werr <- c.(*net.TCPConn).CloseWrite()
		}()
		// ReadAll ends at the echo server's close, which the proxy passes on.
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("read = %v", err)
		}
		if err := <-werr; err != nil {
			t.Fatalf("write = %v", err)
		}
		if !bytes.Equal(got, sent) {
			i := 0
			for i < min(len(got), len(sent)) && got[i] == sent[i] {
				i++
			}
			t.Fatalf("echoed %d bytes, sent %d; first difference at %d", len(got), len(sent), i)
		}
	})

	t.Run("round trip", func(t *testing.T) {
		c, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 1)
		for i := range 20 {
			t0 := time.Now()
			if _, err := c.Write([]byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(t0); d < 2*delay {
				t.Errorf("round trip %d took %v, under 2 × %v", i, d, delay)
			}
			if buf[0] != byte(i) {
				t.Errorf("round trip %d: got byte %d", i, buf[0])
			}
		}
	})
}

// TestDelayProxyClose checks that Close ends every connection, those with
// bytes still waiting for their time included, and every goroutine of the
// proxy.
func TestDelayProxyClose(t *testing.T) {
	noLeaks(t)
	p, err := newDelayProxy(echoServer(t), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var cs []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Held an hour by the proxy's writer.
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	// Let the proxy accept and read them, so that Close finds writers
	// parked on their timers (not needed for the test to pass).
	time.Sleep(20 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	for i, c := range cs {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 16))
		var ne net.Error
		if n != 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("conn %d after Close: read %d bytes, %v; want the connection closed", i, n, err)
		}
	}
	if c, err := net.Dial("tcp", p.addr()); err == nil {
		c.Close()
		t.Errorf("dial after Close succeeded")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}
