package compose

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of postline_compose_renders_total.
const (
	ResultRendered = "rendered" // the chosen version rendered
	ResultFallback = "fallback" // a later stored version of the plan rendered
	ResultBuiltin  = "builtin"  // the built-in template rendered
	ResultFailed   = "failed"   // nothing rendered (render failure or store unavailable)
)

// unknownTemplate is the template label of names that are neither in the
// label snapshot nor built in, so that arbitrary names cannot grow the
// metric's label set.
const unknownTemplate = "unknown"

type metrics struct {
	renders   *prometheus.CounterVec
	seconds   prometheus.Histogram
	cacheSize prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "postline", "compose"
	m := &metrics{
		renders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "renders_total",
			Help: "Template compositions by template and result (rendered, fallback, builtin, failed); names neither labelled in the store nor built in count as \"unknown\".",
		}, []string{"template", "result"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "render_seconds",
			Help:    "Time to compose one templated mail: fetches, compiles and renders.",
			Buckets: []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}),
		cacheSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "cache_size",
			Help: "Compiled template versions held in the compose cache.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.renders, err = register(reg, m.renders); err != nil {
		return nil, err
	}
	if m.seconds, err = register(reg, m.seconds); err != nil {
		return nil, err
	}
	if m.cacheSize, err = register(reg, m.cacheSize); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name, so that several composers can share one registry.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("compose: register metrics: %w", err)
}
