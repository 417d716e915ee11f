//go:build unix

package cli

import (
	"bytes"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
)

// TestServeAddrErrors: an --addr no listener can take is a usage error (64),
// and a port another process holds says so and names --addr.
func TestServeAddrErrors(t *testing.T) {
	code, _, stderr := runDlock(t, nil, "serve", "--addr", ":99999")
	if code != runner.ExitUsage || !strings.Contains(stderr, "--addr") {
		t.Errorf("dlock serve --addr :99999 = %d, stderr %q; want %d naming --addr", code, stderr, runner.ExitUsage)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr = runDlock(t, nil, "serve", "--addr", ln.Addr().String())
	if code == 0 || !strings.Contains(stderr, "address already in use") || !strings.Contains(stderr, "choose another address with --addr") {
		t.Errorf("dlock serve on a taken port = %d, stderr %q; want a failure that points to --addr", code, stderr)
	}
	// The memory store's warning names every store flag.
	for _, flag := range []string{"--redis-url", "--redlock-urls", "--etcd-endpoints", "--postgres-url", "--zookeeper-servers"} {
		if !strings.Contains(stderr, flag) {
			t.Errorf("serve's start-up warning lacks %s: %q", flag, stderr)
		}
	}
}

// TestServeJSONLogDurations: JSON logs write durations as "25s", like the
// text format, not as integer nanoseconds.
func TestServeJSONLogDurations(t *testing.T) {
	var buf bytes.Buffer
	x := &cmd{env: Env{Stderr: &buf}}
	log, err := (&serveFlags{logLevel: "info", logFormat: "json"}).logger(x)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dlock: shutting down", "timeout", 25*time.Second)
	if !strings.Contains(buf.String(), `"timeout":"25s"`) {
		t.Errorf("JSON log = %s, want \"timeout\":\"25s\"", buf.String())
	}
}

// TestDocsCommandCount: docs/cli.md's opening says how many commands its
// table lists.
func TestDocsCommandCount(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}
	m := regexp.MustCompile(`One binary, (\w+) commands:`).FindSubmatch(b)
	rows := len(regexp.MustCompile("(?m)^\\| \\[`dlock ").FindAll(b, -1))
	if m == nil || rows >= len(words) || string(m[1]) != words[rows] {
		t.Errorf("docs/cli.md: %q for a table of %d commands", m, rows)
	}
}

// TestDocsServeStartupLog: the start-up log docs/cli.md shows for the
// memory store has the messages dlock serve prints, in order.
func TestDocsServeStartupLog(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)The log says so at start:\n\n```\n(.*?)```").FindSubmatch(b)
	if block == nil {
		t.Fatal("docs/cli.md: no start-up log")
	}
	msg := regexp.MustCompile(`(?m)^(?:time=\S+ )?level=(\w+) msg=("[^"]*"|\S+)`)
	var want []string
	for _, m := range msg.FindAllSubmatch(block[1], -1) {
		want = append(want, string(m[1])+" "+string(m[2]))
	}
	p := startDlock(t, nil, "serve", "--addr", "127.0.0.1:0")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stderr.String(), `msg="dlock: serving"`) {
		if time.Now().After(deadline) {
			t.Fatalf("dlock serve did not log serving within 30s; stderr:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var got []string
	for _, m := range msg.FindAllStringSubmatch(p.stderr.String(), -1) {
		got = append(got, m[1]+" "+m[2])
	}
	if !slices.Equal(got, want) {
		t.Errorf("dlock serve logs at start\n%q\ndocs/cli.md shows\n%q", got, want)
	}
}
