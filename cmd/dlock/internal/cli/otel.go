package cli

import (
	"context"
	"errors"
	"net/url"
	"time"

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
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)), sdktrace.WithResource(res)), nil
}
