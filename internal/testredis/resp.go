package testredis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// doTimeout bounds [Server.Do].
const doTimeout = 10 * time.Second

// A ReplyError is an error reply from the server, such as
// "NOSCRIPT No matching script" or "MOVED 3999 127.0.0.1:7001".
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// Do sends one command on a fresh connection and returns the reply rendered
// as a string: a simple or bulk string as is, an integer in decimal, a nil
// reply as "", an array as its elements rendered and joined by "\n". An error
// reply is returned as a [ReplyError]. Do gives up after 10 seconds; see
// [Server.DoContext] for blocking commands or a paused server.
func (s *Server) Do(args ...string) (string, error) {
	return s.DoTimeout(doTimeout, args...)
}

// DoTimeout is [Server.Do] with a deadline d from now. The error of a
// command that times out matches os.ErrDeadlineExceeded.
func (s *Server) DoTimeout(d time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return s.DoContext(ctx, args...)
}

// DoContext is [Server.Do] bounded by ctx instead of a fixed timeout.
func (s *Server) DoContext(ctx context.Context, args ...string) (string, error) {
	return do(ctx, s.Addr(), args...)
}

func do(ctx context.Context, addr string, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("testredis: no command")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("testredis: %s: %w", args[0], err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", fmt.Errorf("testredis: %s: %w", args[0], err)
	}
	reply, err := readReply(bufio.NewReader(conn))
	if err != nil {
		var re ReplyError
		if errors.As(err, &re) {
			return "", re
		}
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = errors.Join(err, ctx.Err())
		}
		return "", fmt.Errorf("testredis: %s: %w", args[0], err)
	}
	return reply, nil
}

// readReply reads one RESP2 (or simple RESP3) reply and renders it.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("malformed reply %q", line)
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+', ':', ',', '#', '(':
		return rest, nil
	case '_':
		return "", nil
	case '-':
		return "", ReplyError(rest)
	case '$', '=', '!':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return "", fmt.Errorf("malformed reply %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if kind == '!' {
			return "", ReplyError(buf[:n])
		}
		return string(buf[:n]), nil
	case '*', '~', '>', '%':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return "", fmt.Errorf("malformed reply %q", line)
		}
		if n < 0 {
			return "", nil
		}
		if kind == '%' {
			n *= 2
		}
		elems := make([]string, 0, n)
		for range n {
			e, err := readReply(r)
			var re ReplyError
			if errors.As(err, &re) {
				// An error inside an array (as from EXEC) is rendered, not returned.
				e, err = string(re), nil
			}
			if err != nil {
				return "", err
			}
			elems = append(elems, e)
		}
		return strings.Join(elems, "\n"), nil
	default:
		return "", fmt.Errorf("malformed reply %q", line)
	}
}

// CPU returns the CPU time the server has used, user and system (INFO cpu).
func (s *Server) CPU() (time.Duration, error) {
	info, err := s.Do("INFO", "cpu")
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("testredis: INFO cpu: %s: %w", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}
