package compose

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
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
	set := metricreg.NewSet(reg, "compose")
	m := &metrics{
		renders:   set.CounterVec("renders_total", "Template compositions by template and result (rendered, fallback, builtin, failed); names neither labelled in the store nor built in count as \"unknown\".", "template", "result"),
		seconds:   set.Histogram("render_seconds", "Time to compose one templated mail: fetches, compiles and renders.", []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
		cacheSize: set.Gauge("cache_size", "Compiled template versions held in the compose cache."),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("compose: register metrics: %w", err)
	}
	return m, nil
}
