package e2e

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// lintMetrics scrapes /metrics of p and fails t for every problem promlint
// finds in any metric family (names, units, help texts, counter suffixes),
// the Go runtime and process collectors included.
func lintMetrics(ctx context.Context, t *testing.T, p *workerProc) {
	t.Helper()
	code, body, err := p.get(ctx, "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("scrape %s: HTTP %d, %v", p.name, code, err)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint %s: %v", p.name, err)
	}
	for _, pr := range problems {
		t.Errorf("promlint %s: %s: %s", p.name, pr.Metric, pr.Text)
	}
}
