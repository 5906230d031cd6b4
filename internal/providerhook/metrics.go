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
	set := metricreg.NewSet(reg, "providerhook")
	m := &metrics{
		provider: provider,
		requests: set.CounterVec("requests_total", "Provider webhook requests by provider (ses, mailgun) and result (ok, ignored, bad_request, bad_signature, expired, replayed, forbidden, cert_error, confirm_error, apply_error).", "provider", "result"),
		reports:  set.CounterVec("reports_total", "Recipient reports handed on from verified provider events, by provider and kind (delivered, bounced, delayed, complained).", "provider", "kind"),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("providerhook: register reports_total: %w", err)
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
