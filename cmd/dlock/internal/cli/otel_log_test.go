//go:build unix

package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestOTelErrorLogLimit: OpenTelemetry's errors are logged at most once
// per interval; those held back are counted into the next line, and the
// last of them is logged by flush.
func TestOTelErrorLogLimit(t *testing.T) {
	var buf bytes.Buffer
	t0 := time.Date(2026, 12, 1, 23, 53, 28, 0, time.UTC)
	now := t0
	h := &otelErrorLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), every: time.Second, now: func() time.Time { return now }}
	for _, e := range []struct {
		at  time.Duration
		err string
	}{{0, "e1"}, {500 * time.Millisecond, "e2"}, {900 * time.Millisecond, "e3"}, {time.Second, "e4"}, {1200 * time.Millisecond, "e5"}} {
		now = t0.Add(e.at)
		h.Handle(errors.New(e.err))
	}
	h.flush()
	h.flush() // nothing left: no line
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct {
			Msg, Level, Err string
			Unlogged        int
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		if rec.Msg != "dlock: OpenTelemetry error" || rec.Level != "WARN" {
			t.Errorf("log line %q, want a WARN %q", l, "dlock: OpenTelemetry error")
		}
		got = append(got, fmt.Sprintf("%s+%d", rec.Err, rec.Unlogged))
	}
	want := []string{"e1+0", "e4+2", "e5+0"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("logged (err+unlogged) %q, want %q", got, want)
	}
}

// TestServeOTLPErrorsAreJSON: with --log-format json and an OTLP endpoint
// where nothing listens, the failed exports are logged by the service's
// logger, so every line dlock serve writes to stderr is JSON, including the
// export that fails at shutdown, after "dlock: stopped". Through the real
// binary.
func TestServeOTLPErrorsAreJSON(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now

	p := startDlock(t, nil, "serve", "--addr", "127.0.0.1:0", "--log-format", "json", "--otlp-endpoint", "http://"+dead)
	addr := waitStderr(t, p, func(rec map[string]any) bool { return rec["msg"] == "dlock: serving" })["addr"].(string)

	// A lock held through the service: its acquire spans go out in a batch
	// that fails; its hold span ends when the service releases it at
	// shutdown and goes out, and fails, in the last flush.
	name := uniqueName(t)
	resp, err := http.Post("http://"+addr+"/v1/locks/"+name+"/acquire", "application/json", strings.NewReader(`{"ttlMs":60000}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire = %d, want 200", resp.StatusCode)
	}
	for !strings.Contains(p.stderr.String(), "traces export") {
		select {
		case <-p.done:
			t.Fatalf("dlock serve exited %d before a failed export; stderr:\n%s", p.code, p.stderr.String())
		case <-time.After(10 * time.Millisecond): // polls stderr; the batch goes out within a second
		}
	}
	p.signal(sigterm)
	if code := p.wait(); code != 0 {
		t.Errorf("dlock serve exited %d after SIGTERM, want 0; stderr:\n%s", code, p.stderr.String())
	}

	stopped, exportAfter := -1, false
	for i, l := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("stderr line %d is not JSON (%v): %s", i+1, err, l)
			continue
		}
		switch {
		case rec["msg"] == "dlock: stopped":
			stopped = i
		case rec["msg"] == "dlock: OpenTelemetry error" && stopped >= 0:
			exportAfter = exportAfter || strings.Contains(fmt.Sprint(rec["err"]), "traces export")
		}
	}
	if stopped < 0 || !exportAfter {
		t.Errorf("want a JSON line \"dlock: stopped\" and after it a JSON \"dlock: OpenTelemetry error\" of the last export; stderr:\n%s", p.stderr.String())
	}
}

// waitStderr waits until p writes a JSON log line to stderr for which
// match is true, and returns it, by polling its stderr until the process
// exits or the test times out.
func waitStderr(t *testing.T, p *dlockProc, match func(map[string]any) bool) map[string]any {
	t.Helper()
	for {
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) == nil && match(rec) {
				return rec
			}
		}
		select {
		case <-p.done:
			t.Fatalf("dlock exited %d; stderr:\n%s", p.code, p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
