//go:build unix

package cli

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/cmd/dlock/internal/runner"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes each
// ExportTraceServiceRequest (protobuf) posted to /v1/traces and keeps its
// spans, with the resource attributes of the first.
type otlpReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource map[string]string
	bad      []string // requests it could not take
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *otlpReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		rc.bad = append(rc.bad, fmt.Sprintf("%s %s %s: %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err))
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	for _, rs := range req.GetResourceSpans() {
		if rc.resource == nil {
			rc.resource = attrMap(rs.GetResource().GetAttributes())
		}
		for _, ss := range rs.GetScopeSpans() {
			rc.spans = append(rc.spans, ss.GetSpans()...)
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// trace returns the spans received of trace id, by start time.
func (rc *otlpReceiver) trace(id []byte) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if bytes.Equal(s.GetTraceId(), id) {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].GetStartTimeUnixNano() < out[j].GetStartTimeUnixNano() })
	return out
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(v.GetBoolValue())
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// postTraced posts body to url with a traceparent header and returns the
// status and body of the answer, or the status 0 and the error.
func postTraced(url, traceparent, body string) (int, string) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeExportsSpansOverOTLP: dlock serve --otlp-endpoint exports the
// service's spans over OTLP/HTTP to a collector (here one in the test),
// continuing each request's traceparent: a contended acquire's trace holds
// the request's server span under the caller's span, and the lock's
// acquire and hold spans under that.
func TestServeExportsSpansOverOTLP(t *testing.T) {
	rc := newOTLPReceiver(t)
	serve := startDlock(t, []string{"DLOCK_ADDR=127.0.0.1:0", "DLOCK_OTLP_ENDPOINT=" + rc.srv.URL}, "serve")
	base := "http://" + serveAddr(t, serve)

	const holderTrace, waiterTrace = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"
	const waiterParent = "00f067aa0ba902b7"
	code, body := postTraced(base+"/v1/locks/job/acquire", "00-"+holderTrace+"-b7ad6b7169203331-01", `{"ttlMs":30000,"fair":true}`)
	if code != http.StatusOK {
		t.Fatalf("holder's acquire = %d %s", code, body)
	}
	holderToken := between(body, `"token":"`, `"`)
	got := make(chan string, 1)
	go func() {
		code, body := postTraced(base+"/v1/locks/job/acquire", "00-"+waiterTrace+"-"+waiterParent+"-01", `{"ttlMs":30000,"waitMs":20000,"fair":true}`)
		got <- fmt.Sprintf("%d %s", code, body)
	}()
	// Release once the waiter is queued (fair locks, so that the queue
	// shows in the name's state): its first attempt was refused, the
	// acquire was contended.
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, err := http.Get(base + "/v1/locks/job")
		if err != nil {
			t.Fatal(err)
		}
		state, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(state), `"queue":1`) {
			break
		}
		if time.Now().After(deadline) {
			select {
			case w := <-got:
				t.Fatalf("the waiter is not queued on job within 20s: %s; waiter: %s", state, w)
			default:
				t.Fatalf("the waiter is not queued on job within 20s: %s", state)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code, body := postTraced(base+"/v1/locks/job/release", "00-"+holderTrace+"-b7ad6b7169203331-01", `{"token":"`+holderToken+`"}`); code != http.StatusOK {
		t.Fatalf("holder's release = %d %s", code, body)
	}
	waiter := <-got
	if !strings.HasPrefix(waiter, "200 ") {
		t.Fatalf("waiter's acquire = %s", waiter)
	}
	waiterToken := between(waiter, `"token":"`, `"`)
	if code, body := postTraced(base+"/v1/locks/job/release", "00-"+waiterTrace+"-"+waiterParent+"-01", `{"token":"`+waiterToken+`"}`); code != http.StatusOK {
		t.Fatalf("waiter's release = %d %s", code, body)
	}

	id, _ := hex.DecodeString(waiterTrace)
	names := func(spans []*tracepb.Span) map[string]*tracepb.Span {
		m := map[string]*tracepb.Span{}
		for _, s := range spans {
			m[s.GetName()] = s
		}
		return m
	}
	want := []string{"POST /v1/locks/{name}/acquire", "dlock.acquire", "dlock.hold", "POST /v1/locks/{name}/release", "dlock.release"}
	deadline := time.Now().Add(20 * time.Second)
	var spans []*tracepb.Span
	for {
		spans = rc.trace(id)
		m := names(spans)
		missing := 0
		for _, n := range want {
			if m[n] == nil {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s lacks %d of the spans %v within 20s; received %d spans; bad exports %v; stderr:\n%s", waiterTrace, missing, want, len(spans), rc.bad, serve.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	m := names(spans)
	server, acquire, hold := m["POST /v1/locks/{name}/acquire"], m["dlock.acquire"], m["dlock.hold"]
	if hex.EncodeToString(server.GetParentSpanId()) != waiterParent || server.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("server span: parent %x, kind %v; want the traceparent's span %s, server", server.GetParentSpanId(), server.GetKind(), waiterParent)
	}
	for _, s := range []*tracepb.Span{acquire, hold} {
		if !bytes.Equal(s.GetParentSpanId(), server.GetSpanId()) {
			t.Errorf("%s span: parent %x, want the acquire request's span %x", s.GetName(), s.GetParentSpanId(), server.GetSpanId())
		}
	}
	a := attrMap(acquire.GetAttributes())
	if a["dlock.name"] != "job" || a["dlock.result"] != "acquired" || a["dlock.waited"] != "true" || a["dlock.wait_ms"] == "" || a["dlock.attempts"] == "" || a["dlock.fence"] == "" {
		t.Errorf("dlock.acquire attributes %v; want name job, acquired, waited, its wait, attempts and fence", a)
	}
	if h := attrMap(hold.GetAttributes()); h["dlock.fence"] != a["dlock.fence"] || h["dlock.end"] != "released" {
		t.Errorf("dlock.hold attributes %v; want fence %s, end released", h, a["dlock.fence"])
	}
	if rc.resource["service.name"] != "dlock" {
		t.Errorf("resource attributes %v, want service.name dlock", rc.resource)
	}
	t.Logf("exported trace %s (a waited acquire through the service):\n%s", waiterTrace, formatTrace(spans))
	if holder := rc.trace(mustHex(holderTrace)); len(holder) == 0 {
		t.Errorf("no spans of the holder's trace %s", holderTrace)
	}

	serve.signal(syscall.SIGTERM)
	if code := serve.wait(); code != 0 {
		t.Errorf("dlock serve exited %d after SIGTERM, want 0; stderr:\n%s", code, serve.stderr.String())
	}
}

// formatTrace prints spans as a tree, as a trace viewer shows them.
func formatTrace(spans []*tracepb.Span) string {
	children := map[string][]*tracepb.Span{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[string(s.GetSpanId())] = true
	}
	var roots []*tracepb.Span
	for _, s := range spans {
		if p := string(s.GetParentSpanId()); ids[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s *tracepb.Span, depth int)
	walk = func(s *tracepb.Span, depth int) {
		d := time.Duration(s.GetEndTimeUnixNano() - s.GetStartTimeUnixNano())
		attrs := attrMap(s.GetAttributes())
		keys := make([]string, 0, len(attrs))
		for k := range attrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, k+"="+attrs[k])
		}
		status := ""
		if s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			status = " ERROR " + s.GetStatus().GetMessage()
		}
		links := ""
		if len(s.GetLinks()) > 0 {
			links = fmt.Sprintf(" links=%d", len(s.GetLinks()))
		}
		fmt.Fprintf(&b, "%s%s [%s, parent %x]%s%s {%s}\n", strings.Repeat("  ", depth), s.GetName(), d.Round(time.Microsecond), s.GetParentSpanId(), status, links, strings.Join(kv, " "))
		for _, c := range children[string(s.GetSpanId())] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// between returns the text of s between the first before and the next after.
func between(s, before, after string) string {
	_, rest, ok := strings.Cut(s, before)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, after)
	return v
}

// TestServeRejectsABadOTLPEndpoint: an --otlp-endpoint that is not an
// http(s) URL is a usage error naming the flag.
func TestServeRejectsABadOTLPEndpoint(t *testing.T) {
	for _, endpoint := range []string{"127.0.0.1:4318", "ftp://collector:4318", "http://", "http://collector:4318/?x=1"} {
		code, _, stderr := runDlock(t, []string{"DLOCK_ADDR=127.0.0.1:0"}, "serve", "--otlp-endpoint", endpoint)
		if code != runner.ExitUsage || !strings.Contains(stderr, "--otlp-endpoint must be") {
			t.Errorf("dlock serve --otlp-endpoint %q = %d, stderr %q; want %d naming --otlp-endpoint", endpoint, code, stderr, runner.ExitUsage)
		}
	}
}
