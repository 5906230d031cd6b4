package providerhook

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/internal/report"
)

// Values of the provider label.
const (
	providerSES     = "ses"
	providerMailgun = "mailgun"
)

type metrics struct {
	provider string
	requests *prometheus.CounterVec
	reports  *prometheus.CounterVec
}

// newMetrics registers the counters (or takes the equal ones already
// registered, so an SES and a Mailgun handler share one registry) and
// exports every series of provider from the start.
func newMetrics(reg prometheus.Registerer, provider string) (*metrics, error) {
	const ns, sub = "postline", "providerhook"
	m := &metrics{
		provider: provider,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Provider webhook requests by provider (ses, mailgun) and result (ok, ignored, bad_request, bad_signature, expired, replayed, forbidden, cert_error, confirm_error, apply_error).",
		}, []string{"provider", "result"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "reports_total",
			Help: "Recipient reports handed on from verified provider events, by provider and kind (delivered, bounced, delayed, complained).",
		}, []string{"provider", "kind"}),
	}
	if reg != nil {
		var err error
		if m.requests, err = metricreg.Shared(reg, m.requests); err != nil {
			return nil, fmt.Errorf("providerhook: register requests_total: %w", err)
		}
		if m.reports, err = metricreg.Shared(reg, m.reports); err != nil {
			return nil, fmt.Errorf("providerhook: register reports_total: %w", err)
		}
	}
	for _, r := range results {
		m.requests.WithLabelValues(provider, r)
	}
	for _, k := range kinds {
		m.reports.WithLabelValues(provider, string(k))
	}
	return m, nil
}

func (m *metrics) request(result string) {
	m.requests.WithLabelValues(m.provider, result).Inc()
}

func (m *metrics) applied(reports []report.Report) {
	for _, r := range reports {
		m.reports.WithLabelValues(m.provider, string(r.Kind)).Inc()
	}
}
