// Package ops owns the observable surface every Postline service binary
// shares with the others: JSON logs at a chosen level, the metrics registry
// and the HTTP endpoints /metrics, /healthz and /readyz. Binaries decide what
// "ready" means; ops only serves the answer (internal/supervisor runs the
// endpoints beside the service's stages).
package ops

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyTimeout bounds one readiness check.
const ReadyTimeout = time.Second

// NewLogger returns a JSON logger writing to w at level (debug, info, warn
// or error). The error names the POSTLINE_LOG_LEVEL setting.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("setting POSTLINE_LOG_LEVEL: invalid value %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// NewRegistry returns a metrics registry with the Go runtime and process
// collectors registered.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves /metrics from reg, /healthz (200, or 503 with healthy's
// error once the process has failed for good and is on its way out) and
// /readyz (200, or 503 with ready's error). ready gets a context bounded by
// ReadyTimeout; healthy may be nil (always healthy while it runs).
func Handler(reg *prometheus.Registry, ready func(context.Context) error, healthy func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if healthy != nil {
			if err := healthy(); err != nil {
				http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}
