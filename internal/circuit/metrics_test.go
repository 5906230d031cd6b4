package circuit

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := newMetrics(reg, []string{"primary", "backup"})
	if err != nil {
		t.Fatal(err)
	}
	m.show("primary", Open, Unavailable)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// Every series exists from the start: 2 relays x 3 states, ...
	for _, tt := range []struct {
		c    prometheus.Collector
		want int
	}{{m.state, 6}, {m.health, 6}, {m.transitions, 6}, {m.probes, 8}, {m.dbErrors, 4}} {
		if got := testutil.CollectAndCount(tt.c); got != tt.want {
			t.Errorf("collector has %d series, want %d", got, tt.want)
		}
	}
	want := `
# HELP postline_circuit_state Circuit state per relay as this worker sees it: 1 on the current state (closed, open, half_open), 0 on the others.
# TYPE postline_circuit_state gauge
postline_circuit_state{provider="backup",state="closed"} 0
postline_circuit_state{provider="backup",state="half_open"} 0
postline_circuit_state{provider="backup",state="open"} 0
postline_circuit_state{provider="primary",state="closed"} 0
postline_circuit_state{provider="primary",state="half_open"} 0
postline_circuit_state{provider="primary",state="open"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "postline_circuit_state"); err != nil {
		t.Error(err)
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name    string
		owner   string
		relays  []string
		p       Policy
		wantErr string
	}{
		{"policy", "w", []string{"a"}, Policy{Growth: -1}, "Growth -1"},
		{"owner", "", []string{"a"}, Policy{}, "owner is required"},
		{"no relays", "w", nil, Policy{}, "no relays"},
		{"empty relay", "w", []string{"a", ""}, Policy{}, "empty relay"},
		{"duplicate relay", "w", []string{"a", "b", "a"}, Policy{}, "relay a listed twice"},
	}
	if _, err := New(nil, "w", []string{"a"}, Policy{}, nil, nil); err == nil || !strings.Contains(err.Error(), "nil pool") {
		t.Errorf("New without a pool: %v, want a nil pool error", err)
	}
	// The pool connects lazily: New must reject the arguments before any I/O.
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(pool, tt.owner, tt.relays, tt.p, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New: %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}
