package metricreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/metricreg"
)

func counter(help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "things_total", Help: help})
}

func TestShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := metricreg.Shared(reg, counter("Things."))
	if err != nil {
		t.Fatal(err)
	}
	second, err := metricreg.Shared(reg, counter("Things."))
	if err != nil {
		t.Fatalf("second registration of the same counter: %v", err)
	}
	second.Inc()
	if got := testutil.ToFloat64(first); got != 1 {
		t.Errorf("first counter reads %v after the second was incremented, want 1 (shared)", got)
	}

	if _, err := metricreg.Shared(reg, counter("Other help.")); err == nil {
		t.Error("a counter with the same name and another help text registered without error")
	}

	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "things_total", Help: "Things."})
	if _, err := metricreg.Shared(reg, gauge); err == nil {
		t.Error("a gauge under a counter's name registered without error")
	}

	c := counter("Things.")
	got, err := metricreg.Shared[prometheus.Counter](nil, c)
	if err != nil || got != c {
		t.Errorf("nil registerer: got (%v, %v), want the counter back and no error", got, err)
	}
}
