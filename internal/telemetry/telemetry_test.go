package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestExporting(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{name: "nothing set is off", env: nil, want: false},
		{name: "an OTLP endpoint turns it on", env: map[string]string{envOTLPEndpoint: "http://collector:4318"}, want: true},
		{name: "a traces endpoint turns it on", env: map[string]string{envOTLPTracesEndpoint: "http://collector:4318/v1/traces"}, want: true},
		{name: "a blank endpoint is unset", env: map[string]string{envOTLPEndpoint: "  "}, want: false},
		{name: "an explicit exporter turns it on", env: map[string]string{envTracesExporter: "otlp"}, want: true},
		{name: "console is an exporter too", env: map[string]string{envTracesExporter: "console"}, want: true},
		{name: "none wins over an endpoint", env: map[string]string{envTracesExporter: "none", envOTLPEndpoint: "http://collector:4318"}, want: false},
		{name: "the SDK disabled wins", env: map[string]string{envSDKDisabled: "TRUE", envTracesExporter: "otlp"}, want: false},
		{name: "disabled=false keeps the exporter", env: map[string]string{envSDKDisabled: "false", envOTLPEndpoint: "http://collector:4318"}, want: true},
		{name: "a disabled value other than true means false", env: map[string]string{envSDKDisabled: "yes", envOTLPEndpoint: "http://collector:4318"}, want: true},
		{name: "other OTLP settings alone stay off", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "x"}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			if got := exporting(getenv); got != tt.want {
				t.Errorf("exporting(%v) = %v, want %v", tt.env, got, tt.want)
			}
		})
	}
}

func TestSetupIsANoopWithoutSettings(t *testing.T) {
	tp, shutdown, err := Setup(t.Context(), "postline-test", func(string) string { return "" })
	if err != nil {
		t.Fatalf("Setup = %v", err)
	}
	if _, ok := tp.(noop.TracerProvider); !ok {
		t.Fatalf("provider = %T, want noop.TracerProvider", tp)
	}
	_, span := tp.Tracer("test").Start(t.Context(), "x")
	if span.IsRecording() {
		t.Error("a span of the off provider is recording")
	}
	if err := shutdown(t.Context()); err != nil {
		t.Errorf("shutdown = %v", err)
	}
}

func TestSetupRejectsUnknownSettings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
	}{
		{name: "unknown exporter", env: map[string]string{envTracesExporter: "zipkin"}},
		{name: "unknown OTLP protocol", env: map[string]string{envOTLPEndpoint: "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearOTelEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v) // the SDK reads the process environment
			}
			if _, _, err := Setup(t.Context(), "postline-test", os.Getenv); err == nil {
				t.Fatal("Setup succeeded, want an error")
			}
		})
	}
}

// TestSetupExportsOverOTLP points the exporter at an in-process OTLP/HTTP
// collector and checks that an ended span arrives, with the binary's
// service name or the one the environment overrides it with.
func TestSetupExportsOverOTLP(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		wantService string
	}{
		{name: "endpoint only", wantService: "postline-test"},
		{name: "OTEL_SERVICE_NAME overrides", env: map[string]string{"OTEL_SERVICE_NAME": "mail-eu"}, wantService: "mail-eu"},
		{name: "explicit otlp http/protobuf", env: map[string]string{envTracesExporter: "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, wantService: "postline-test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			received := make(chan *coltracepb.ExportTraceServiceRequest, 1)
			collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				req := &coltracepb.ExportTraceServiceRequest{}
				if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
					http.Error(w, "bad export", http.StatusBadRequest)
					return
				}
				select {
				case received <- req:
				default:
				}
				w.Header().Set("Content-Type", "application/x-protobuf")
			}))
			defer collector.Close()

			clearOTelEnv(t)
			t.Setenv(envOTLPEndpoint, collector.URL)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			tp, shutdown, err := Setup(t.Context(), "postline-test", os.Getenv)
			if err != nil {
				t.Fatalf("Setup = %v", err)
			}
			if _, ok := tp.(*sdktrace.TracerProvider); !ok {
				t.Fatalf("provider = %T, want the SDK's", tp)
			}
			_, span := tp.Tracer("test").Start(t.Context(), "deliver")
			span.End()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := shutdown(ctx); err != nil {
				t.Fatalf("shutdown = %v", err)
			}
			var req *coltracepb.ExportTraceServiceRequest
			select {
			case req = <-received:
			default:
				t.Fatal("the collector received no export")
			}
			rs := req.GetResourceSpans()
			if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
				t.Fatalf("export = %v, want one span", req)
			}
			if got := rs[0].GetScopeSpans()[0].GetSpans()[0].GetName(); got != "deliver" {
				t.Errorf("span name = %q, want deliver", got)
			}
			service := ""
			for _, kv := range rs[0].GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			if service != tt.wantService {
				t.Errorf("service.name = %q, want %q", service, tt.wantService)
			}
		})
	}
}

// clearOTelEnv unsets, for the test, every OTEL_* variable the developer's
// shell may have set.
func clearOTelEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{envSDKDisabled, envTracesExporter, envOTLPEndpoint, envOTLPTracesEndpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME",
		"OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		t.Setenv(k, "")
	}
}
