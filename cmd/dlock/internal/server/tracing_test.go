package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/dlock-dev/dlock/dlockotel"
	"github.com/dlock-dev/dlock/store/memory"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceparentContinued: with a TracerProvider, a /v1 request is a
// server span in the trace of its traceparent header, the Locker's spans are
// its children, a malformed header starts a new trace (the request is
// served as ever), and /health is not traced.
func TestTraceparentContinued(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	o, err := dlockotel.New(dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, memory.New(), Config{TracerProvider: tp, Observer: o.Observe})

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	if r := e.post("/v1/locks/traced/acquire", `{}`, "traceparent", "00-"+traceID+"-"+parentID+"-01"); r.code != http.StatusOK {
		t.Fatalf("acquire = %d %s", r.code, r.body)
	}
	if r := e.post("/v1/locks/untraced/acquire", `{}`, "traceparent", "00-not-a-trace-01"); r.code != http.StatusOK {
		t.Fatalf("acquire with a malformed traceparent = %d %s", r.code, r.body)
	}
	if r := e.get("/health", "traceparent", "00-"+traceID+"-"+parentID+"-01"); r.code != http.StatusOK {
		t.Fatalf("health = %d %s", r.code, r.body)
	}

	var servers, acquires []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "POST /v1/locks/{name}/acquire":
			servers = append(servers, s)
		case "dlock.acquire":
			acquires = append(acquires, s)
		default:
			if s.SpanKind == trace.SpanKindServer {
				t.Errorf("server span %q, want none but the acquires'", s.Name)
			}
		}
	}
	if len(servers) != 2 || len(acquires) != 2 {
		t.Fatalf("%d server spans and %d dlock.acquire spans, want 2 and 2", len(servers), len(acquires))
	}
	traced, fresh := servers[0], servers[1]
	if traced.SpanContext.TraceID().String() != traceID || traced.Parent.SpanID().String() != parentID || !traced.Parent.IsRemote() {
		t.Errorf("server span: trace %s, parent %s; want the traceparent's %s, %s", traced.SpanContext.TraceID(), traced.Parent.SpanID(), traceID, parentID)
	}
	if acquires[0].Parent.SpanID() != traced.SpanContext.SpanID() {
		t.Errorf("dlock.acquire parent %s, want the request's span %s", acquires[0].Parent.SpanID(), traced.SpanContext.SpanID())
	}
	if fresh.Parent.IsValid() || fresh.SpanContext.TraceID().String() == traceID {
		t.Errorf("server span of a malformed traceparent: parent %v, trace %s; want a new trace", fresh.Parent, fresh.SpanContext.TraceID())
	}
}
