package metricreg_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/metricreg"
)

func TestSetNamesAndShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := metricreg.NewSet(reg, "thing")
	c := s.Counter("done_total", "Things done.")
	cv := s.CounterVec("tried_total", "Things tried, by result.", "result")
	g := s.Gauge("in_flight", "Things in flight.")
	gv := s.GaugeVec("open", "Open things, by kind.", "kind")
	h := s.Histogram("seconds", "Time of a thing.", []float64{0.1, 1})
	hv := s.HistogramVec("wait_seconds", "Wait of a thing, by kind.", []float64{1}, "kind")
	s.GaugeFunc("level", "Level of a thing.", prometheus.Labels{"pool": "a"}, func() float64 { return 7 })
	s.In("other").Counter("seen_total", "Things seen elsewhere.")
	if err := s.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
	c.Inc()
	cv.WithLabelValues("ok").Inc()
	g.Set(2)
	gv.WithLabelValues("x").Set(3)
	h.Observe(0.5)
	hv.WithLabelValues("x").Observe(2)

	want := `
# HELP postline_thing_done_total Things done.
# TYPE postline_thing_done_total counter
postline_thing_done_total 1
# HELP postline_thing_level Level of a thing.
# TYPE postline_thing_level gauge
postline_thing_level{pool="a"} 7
# HELP postline_other_seen_total Things seen elsewhere.
# TYPE postline_other_seen_total counter
postline_other_seen_total 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"postline_thing_done_total", "postline_thing_level", "postline_other_seen_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg); n != 8 {
		t.Errorf("%d series or metrics collected, want 8", n)
	}

	again := metricreg.NewSet(reg, "thing").Counter("done_total", "Things done.")
	again.Inc()
	if got := testutil.ToFloat64(c); got != 2 {
		t.Errorf("the first counter reads %v after a second set's was incremented, want 2 (shared)", got)
	}
}

func TestSetKeepsTheFirstError(t *testing.T) {
	reg := prometheus.NewRegistry()
	metricreg.NewSet(reg, "thing").Counter("done_total", "Things done.")
	s := metricreg.NewSet(reg, "thing")
	s.In("thing").Gauge("done_total", "A gauge under a counter's name.")
	s.Counter("done_total", "Other help.")
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "postline_thing_done_total") {
		t.Errorf("Err = %v, want the first clash, naming the metric", err)
	}
	if err := metricreg.NewSet(nil, "thing").Err(); err != nil {
		t.Errorf("a set without a registry: Err = %v", err)
	}
}

func TestExclusiveSetRefusesASecondCopy(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := metricreg.NewExclusiveSet(reg, "thing")
	first.Counter("done_total", "Things done.")
	if err := first.Err(); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	second := metricreg.NewExclusiveSet(reg, "thing")
	second.In("thing").Counter("done_total", "Things done.")
	if second.Err() == nil {
		t.Error("an exclusive set registered a metric that was registered already")
	}
}
