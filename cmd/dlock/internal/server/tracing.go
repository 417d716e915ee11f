package server

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerScope names the server's tracer.
const tracerScope = "github.com/dlock-dev/dlock/cmd/dlock/internal/server"

// traced reports whether requests to path get a server span: the lock
// API (/api and /v1), but not the long-lived event stream; /health,
// /metrics and the dashboard would only add noise.
func traced(path string) bool {
	return needsAuth(path) && path != "/v1/events"
}

// startSpan starts the server span of r, continuing the caller's trace
// when r carries a W3C traceparent header, and returns r with the span in
// its context, so that the Locker's spans are its children.
func (s *Server) startSpan(r *http.Request, route string) (*http.Request, trace.Span) {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name := route
	if route == "unmatched" {
		name = r.Method
	}
	httpRoute := route
	if _, path, ok := strings.Cut(route, " "); ok {
		httpRoute = path
	}
	ctx, span := s.obs.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", r.Method),
		attribute.String("http.route", httpRoute),
		attribute.String("url.path", r.URL.Path),
	))
	return r.WithContext(ctx), span
}

// endSpan ends the server span of a request answered with code.
func endSpan(span trace.Span, code int) {
	span.SetAttributes(attribute.Int("http.response.status_code", code))
	if code >= 500 {
		span.SetStatus(codes.Error, http.StatusText(code))
	}
	span.End()
}
