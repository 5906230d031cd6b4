package sender

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
)

// Metric label values for result.
const (
	resultOK    = "ok"
	resultError = "error"
)

// metrics are one relay's series, curried with its relay name as the provider label.
type metrics struct {
	dialOK, dialError prometheus.Counter
	sendOK, sendError prometheus.Observer
	open              prometheus.Gauge
	ambiguousDataEnd  prometheus.Counter
	chained           prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, relay string) (*metrics, error) {
	// Several relays share one vector per metric.
	set := metricreg.NewSet(reg, "sender")
	dials := set.CounterVec("dials_total", "SMTP connections dialled, including greeting, STARTTLS and AUTH, by provider and result (ok or error).", "provider", "result")
	sends := set.HistogramVec("send_duration_seconds", "Time to send one message, including any dial, by provider and result (ok or error).",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "provider", "result")
	open := set.GaugeVec("connections_open", "SMTP connections currently open, by provider.", "provider")
	ambiguous := set.CounterVec("ambiguous_data_end_total", "Sends that wrote the whole message but got no reply to its final dot (timeout, dropped connection), by provider: possible duplicates, since the relay may have accepted them.", "provider")
	chained := set.CounterVec("chained_envelopes_total", "Envelopes written in the same write as the end of the message before them on a connection (pipelining across mails), by provider.", "provider")
	if err := set.Err(); err != nil {
		return nil, err
	}
	// WithLabelValues creates every series at zero now, so a relay that
	// never saw one still exports it.
	return &metrics{
		dialOK:           dials.WithLabelValues(relay, resultOK),
		dialError:        dials.WithLabelValues(relay, resultError),
		sendOK:           sends.WithLabelValues(relay, resultOK),
		sendError:        sends.WithLabelValues(relay, resultError),
		open:             open.WithLabelValues(relay),
		ambiguousDataEnd: ambiguous.WithLabelValues(relay),
		chained:          chained.WithLabelValues(relay),
	}, nil
}

func (m *metrics) observeSend(d time.Duration, err error) {
	if err != nil {
		m.sendError.Observe(d.Seconds())
		return
	}
	m.sendOK.Observe(d.Seconds())
}
