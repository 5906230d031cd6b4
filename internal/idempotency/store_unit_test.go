package idempotency

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

func TestConfig(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		wantLease time.Duration
		wantErr   string
	}{
		{name: "defaults", cfg: Config{Owner: "w1"}, wantLease: DefaultLease},
		{name: "explicit lease", cfg: Config{Owner: "w1", Lease: 300 * time.Millisecond}, wantLease: 300 * time.Millisecond},
		{name: "missing owner", cfg: Config{}, wantLease: DefaultLease, wantErr: "Owner is required"},
		{name: "negative lease", cfg: Config{Owner: "w1", Lease: -time.Second}, wantLease: -time.Second, wantErr: "Lease -1s"},
		{name: "sub-millisecond lease", cfg: Config{Owner: "w1", Lease: time.Microsecond}, wantLease: time.Microsecond, wantErr: "Lease 1µs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg.WithDefaults()
			if cfg.Lease != tt.wantLease {
				t.Errorf("Lease = %v, want %v", cfg.Lease, tt.wantLease)
			}
			err := cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(Config{}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "Owner") {
		t.Errorf("New without owner: err = %v, want Owner error", err)
	}
	if _, err := New(Config{Owner: "w"}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "nil pool") {
		t.Errorf("New without pool: err = %v, want nil pool error", err)
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.db.Observe(context.Background(), opClaim, time.Now().Add(-10*time.Millisecond), nil)
	m.casConflicts.Inc()
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	want := []string{
		"postline_idempotency_claims_total",
		"postline_idempotency_cas_conflicts_total",
		"postline_idempotency_db_errors_total",
		"postline_idempotency_round_trip_seconds",
	}
	if n, err := testutil.GatherAndCount(reg, want...); err != nil || n == 0 {
		t.Errorf("GatherAndCount(%v) = %d, %v", want, n, err)
	}
	// Every result and op series exists at zero from the start.
	if got := testutil.CollectAndCount(m.claims); got != 5 {
		t.Errorf("claims_total has %d series, want 5", got)
	}
	if got, err := testutil.GatherAndCount(reg, "postline_idempotency_db_errors_total"); err != nil || got != len(ops) {
		t.Errorf("db_errors_total has %d series (%v), want %d", got, err, len(ops))
	}
}

func TestMetricsShareRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newMetrics(reg)
	if err != nil {
		t.Fatalf("second registration: %v", err)
	}
	a.casConflicts.Inc()
	b.casConflicts.Inc()
	if got := testutil.ToFloat64(a.casConflicts); got != 2 {
		t.Errorf("shared cas_conflicts_total = %v, want 2", got)
	}
}

func mustGather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func TestCleanText(t *testing.T) {
	long := strings.Repeat("x", 1023) + "é" + "tail" // é straddles the 1 KiB cut
	tests := []struct {
		name, in, want string
	}{
		{"short", "550 5.1.1 no such user", "550 5.1.1 no such user"},
		{"empty", "", ""},
		{"NUL dropped", "a\x00b", "ab"},
		{"invalid UTF-8 replaced", "a\xffb", "a\uFFFDb"},
		{"cut on a rune boundary", long, strings.Repeat("x", 1023)},
		{"exactly the limit", strings.Repeat("y", 1024), strings.Repeat("y", 1024)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cleanText(tt.in, MaxErrorBytes)
			if got != tt.want {
				t.Errorf("cleanText = %q (%d bytes), want %q", got, len(got), tt.want)
			}
			if len(got) > MaxErrorBytes || !utf8.ValidString(got) {
				t.Errorf("cleanText result invalid: %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
}
