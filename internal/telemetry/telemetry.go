// Package telemetry owns a binary's OpenTelemetry trace export: Setup reads
// the standard OTEL_* environment variables and returns the TracerProvider
// the binary hands to its components, with a shutdown func that flushes it.
//
// Tracing is off unless asked for: with neither OTEL_TRACES_EXPORTER nor an
// OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set, or with OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none, Setup returns a no-op provider and opens no
// connection. When on, the exporter is chosen by
// go.opentelemetry.io/contrib/exporters/autoexport (otlp over http/protobuf
// or grpc, or console), and the SDK reads the remaining variables itself
// (endpoint, headers, timeouts, OTEL_TRACES_SAMPLER, OTEL_BSP_*,
// OTEL_RESOURCE_ATTRIBUTES).
//
// The provider is never installed as the OpenTelemetry global: components
// receive it explicitly. The package creates no spans and does not
// propagate trace context; the components that do own that.
package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The environment variables that decide whether traces are exported (see
// the OpenTelemetry SDK environment variable specification).
const (
	envSDKDisabled        = "OTEL_SDK_DISABLED"
	envTracesExporter     = "OTEL_TRACES_EXPORTER"
	envOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// FlushTimeout bounds Shutdown.Flush.
const FlushTimeout = 5 * time.Second

// Shutdown flushes the spans not yet exported and stops the exporter. It
// returns when done or when ctx ends.
type Shutdown func(ctx context.Context) error

// Flush calls s for at most FlushTimeout and logs a failure: at exit, a
// collector that is down must neither hold the binary up nor fail it.
func (s Shutdown) Flush(logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), FlushTimeout)
	defer cancel()
	if err := s(ctx); err != nil {
		logger.Warn("flush traces", "error", err)
	}
}

// Setup returns the TracerProvider of the binary named service (the
// service.name resource attribute, unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES names one) and its Shutdown, which the binary
// calls once its components have stopped.
//
// getenv decides whether traces are exported; the exporter and the SDK read
// their settings from the process environment themselves, so pass the
// process's view (os.Getenv, or the getenv a binary's run was given).
// An exporter name or OTLP protocol the SDK does not know is an error.
func Setup(ctx context.Context, service string, getenv func(string) string) (trace.TracerProvider, Shutdown, error) {
	if !exporting(getenv) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exporter, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: span exporter from %s (%q): %w", envTracesExporter, getenv(envTracesExporter), err)
	}
	res, err := resource.New(ctx,
		// Detectors listed later win: the environment overrides the
		// binary's own service name.
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
	)
	return provider, provider.Shutdown, nil
}

// exporting reports whether the environment asks for spans to be exported.
// Unlike the SDK's own default (OTLP to localhost), an unset
// OTEL_TRACES_EXPORTER means off unless an OTLP endpoint is given, so a
// binary started without telemetry settings never dials a collector. As the
// specification says, only "true" (in any case) disables the SDK.
func exporting(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return false
	}
	switch strings.TrimSpace(getenv(envTracesExporter)) {
	case "none":
		return false
	case "":
		return strings.TrimSpace(getenv(envOTLPEndpoint)) != "" || strings.TrimSpace(getenv(envOTLPTracesEndpoint)) != ""
	default:
		return true
	}
}
