package cli

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// otlpTracesURL returns the URL spans are sent to for --otlp-endpoint
// endpoint: endpoint itself when it has a path, else endpoint/v1/traces
// (what OTEL_EXPORTER_OTLP_ENDPOINT means to OpenTelemetry SDKs).
func otlpTracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", errors.New("--otlp-endpoint must be an http:// or https:// URL of an OTLP/HTTP collector, such as http://127.0.0.1:4318")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// newTracerProvider returns a tracer provider that batches the service's
// spans to the OTLP/HTTP collector at tracesURL (protobuf over HTTP). The
// exporter's OTEL_EXPORTER_OTLP_* settings (headers, timeout, compression)
// apply; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the
// service's name ("dlock") and add attributes. Shut it down to flush.
func newTracerProvider(ctx context.Context, tracesURL, version string) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(tracesURL))
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "dlock"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(otlpBatchTimeout)), sdktrace.WithResource(res)), nil
}

// otlpBatchTimeout is how long spans wait to form a batch before they are
// exported: a batch goes out at least this often while spans arrive.
const otlpBatchTimeout = time.Second

// routeOTelLogs sends what OpenTelemetry reports to log instead of the
// standard library's logger (plain "2006/01/02 15:04:05 traces export: …"
// lines on stderr, which broke --log-format json): the errors it hands its
// global error handler (a failed export, one per batch) through
// [otelErrorLog], at most one line per batch timeout, and its internal
// logger's messages (a bad OTEL_EXPORTER_OTLP_* variable, say) as they
// come. It returns the func that undoes it: it logs what the limit held
// back and discards OpenTelemetry's messages from then on. Call that func
// after the tracer provider has shut down, so that the errors of its last
// flush are logged too.
func routeOTelLogs(log *slog.Logger) (restore func()) {
	h := &otelErrorLog{log: log, every: otlpBatchTimeout, now: time.Now}
	otelErrorsOnce.Do(func() { otel.SetErrorHandler(otelErrorSink{}) })
	prev := otelErrors.Swap(h)
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
	return func() {
		otel.SetLogger(logr.Discard())
		otelErrors.CompareAndSwap(h, prev)
		h.flush()
	}
}

var (
	otelErrorsOnce sync.Once
	// otelErrors is where OpenTelemetry's global error handler logs: the
	// running dlock serve's. OpenTelemetry lets the handler be set only once
	// for the components created before, so it is set once, to
	// otelErrorSink, which reads this.
	otelErrors atomic.Pointer[otelErrorLog]
)

// otelErrorSink is OpenTelemetry's global error handler: it logs to the
// running service's logger, or as OpenTelemetry's default does when no
// service runs.
type otelErrorSink struct{}

func (otelErrorSink) Handle(err error) {
	if h := otelErrors.Load(); h != nil {
		h.Handle(err)
		return
	}
	log.Print(err)
}

// otelErrorLog logs OpenTelemetry's errors at warning level, at most one
// line per every: a failing collector costs one line per failed batch, and
// batches that fail faster than that (many spans, each batch full) are
// counted into the next line ("unlogged") rather than flooding the log.
type otelErrorLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu        sync.Mutex
	next      time.Time // no line before this
	unlogged  int       // errors since the last line that had no line of their own
	lastError error     // the last of those
}

func (h *otelErrorLog) Handle(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if now.Before(h.next) {
		h.unlogged++
		h.lastError = err
		return
	}
	h.emit(err, h.unlogged)
	h.next = now.Add(h.every)
}

// flush logs the last error held back, if any.
func (h *otelErrorLog) flush() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unlogged > 0 {
		h.emit(h.lastError, h.unlogged-1)
	}
}

// emit logs err, with the count of errors before it that had no line.
// Called with h.mu held.
func (h *otelErrorLog) emit(err error, unlogged int) {
	attrs := []any{"err", err}
	if unlogged > 0 {
		attrs = append(attrs, "unlogged", unlogged)
	}
	h.log.Warn("dlock: OpenTelemetry error", attrs...)
	h.unlogged, h.lastError = 0, nil
}
