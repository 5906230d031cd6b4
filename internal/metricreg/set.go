package metricreg

import "github.com/prometheus/client_golang/prometheus"

// Namespace is the namespace of every Postline metric.
const Namespace = "postline"

// Set builds and registers one component's collectors: each constructor
// names a metric in the postline namespace and the set's subsystem,
// registers it with Shared and returns the collector in use. The first
// registration error is kept for Err, so a component declares its metrics
// as one list and checks once, instead of an options literal and an error
// check per metric.
type Set struct {
	reg       prometheus.Registerer
	sub       string
	exclusive bool   // a metric registered already is an error, not shared
	err       *error // shared with the sets In derives
}

// NewSet returns a Set registering on reg (nil: build without registering)
// under subsystem. A metric registered already is shared (see Shared).
func NewSet(reg prometheus.Registerer, subsystem string) *Set {
	return &Set{reg: reg, sub: subsystem, err: new(error)}
}

// NewExclusiveSet is NewSet for a component a process builds once per
// registry: registering one of its metrics a second time is an error, so a
// second copy wired by mistake fails at start instead of counting into the
// first one's series.
func NewExclusiveSet(reg prometheus.Registerer, subsystem string) *Set {
	return &Set{reg: reg, sub: subsystem, exclusive: true, err: new(error)}
}

// In returns a Set for another subsystem that registers on the same
// registry, in the same mode, and reports its errors through s's Err.
func (s *Set) In(subsystem string) *Set {
	return &Set{reg: s.reg, sub: subsystem, exclusive: s.exclusive, err: s.err}
}

// Err returns the first registration error of s and the sets derived from
// it, or nil.
func (s *Set) Err() error { return *s.err }

// Counter registers a counter.
func (s *Set) Counter(name, help string) prometheus.Counter {
	return Add(s, prometheus.NewCounter(prometheus.CounterOpts(s.opts(name, help, nil))))
}

// CounterVec registers a counter with labels.
func (s *Set) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return Add(s, prometheus.NewCounterVec(prometheus.CounterOpts(s.opts(name, help, nil)), labels))
}

// Gauge registers a gauge.
func (s *Set) Gauge(name, help string) prometheus.Gauge {
	return Add(s, prometheus.NewGauge(prometheus.GaugeOpts(s.opts(name, help, nil))))
}

// GaugeVec registers a gauge with labels.
func (s *Set) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return Add(s, prometheus.NewGaugeVec(prometheus.GaugeOpts(s.opts(name, help, nil)), labels))
}

// GaugeFunc registers a gauge read from f at scrape time, with constant
// labels (nil for none).
func (s *Set) GaugeFunc(name, help string, constLabels prometheus.Labels, f func() float64) prometheus.GaugeFunc {
	return Add(s, prometheus.NewGaugeFunc(prometheus.GaugeOpts(s.opts(name, help, constLabels)), f))
}

// Histogram registers a histogram with buckets.
func (s *Set) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	o := s.opts(name, help, nil)
	return Add(s, prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets,
	}))
}

// HistogramVec registers a histogram with buckets and labels.
func (s *Set) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	o := s.opts(name, help, nil)
	return Add(s, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help, Buckets: buckets,
	}, labels))
}

func (s *Set) opts(name, help string, constLabels prometheus.Labels) prometheus.Opts {
	return prometheus.Opts{Namespace: Namespace, Subsystem: s.sub, Name: name, Help: help, ConstLabels: constLabels}
}

// Add registers c, a collector built elsewhere (one with constant labels,
// say), on the set's registry and returns the collector in use; a failure
// is kept for Err like the set's own.
func Add[C prometheus.Collector](s *Set, c C) C {
	got, err := c, error(nil)
	switch {
	case s.reg == nil:
	case s.exclusive:
		err = s.reg.Register(c)
	default:
		got, err = Shared(s.reg, c)
	}
	if err != nil && *s.err == nil {
		*s.err = err
	}
	return got
}
