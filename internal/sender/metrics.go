package sender

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric label values for result.
const (
	resultOK    = "ok"
	resultError = "error"
)

// metrics are one relay's series, curried with its provider label.
type metrics struct {
	dialOK, dialError prometheus.Counter
	sendOK, sendError prometheus.Observer
	open              prometheus.Gauge
	ambiguousDataEnd  prometheus.Counter
	chained           prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, provider string) (*metrics, error) {
	dials, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "postline",
		Subsystem: "sender",
		Name:      "dials_total",
		Help:      "SMTP connections dialled, including greeting, STARTTLS and AUTH, by provider and result (ok or error).",
	}, []string{"provider", "result"}))
	if err != nil {
		return nil, err
	}
	sends, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "postline",
		Subsystem: "sender",
		Name:      "send_duration_seconds",
		Help:      "Time to send one message, including any dial, by provider and result (ok or error).",
		Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"provider", "result"}))
	if err != nil {
		return nil, err
	}
	open, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "postline",
		Subsystem: "sender",
		Name:      "connections_open",
		Help:      "SMTP connections currently open, by provider.",
	}, []string{"provider"}))
	if err != nil {
		return nil, err
	}
	ambiguous, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "postline",
		Subsystem: "sender",
		Name:      "ambiguous_data_end_total",
		Help:      "Sends that wrote the whole message but got no reply to its final dot (timeout, dropped connection), by provider: possible duplicates, since the relay may have accepted them.",
	}, []string{"provider"}))
	if err != nil {
		return nil, err
	}
	chained, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "postline",
		Subsystem: "sender",
		Name:      "chained_envelopes_total",
		Help:      "Envelopes written in the same write as the end of the message before them on a connection (pipelining across mails), by provider.",
	}, []string{"provider"}))
	if err != nil {
		return nil, err
	}
	// WithLabelValues creates every series at zero now, so a relay that
	// never saw one still exports it.
	return &metrics{
		dialOK:           dials.WithLabelValues(provider, resultOK),
		dialError:        dials.WithLabelValues(provider, resultError),
		sendOK:           sends.WithLabelValues(provider, resultOK),
		sendError:        sends.WithLabelValues(provider, resultError),
		open:             open.WithLabelValues(provider),
		ambiguousDataEnd: ambiguous.WithLabelValues(provider),
		chained:          chained.WithLabelValues(provider),
	}, nil
}

func (m *metrics) observeSend(d time.Duration, err error) {
	if err != nil {
		m.sendError.Observe(d.Seconds())
		return
	}
	m.sendOK.Observe(d.Seconds())
}

// register registers c, or returns the collector already registered under
// the same name, so several relays (providers) share one vector.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
