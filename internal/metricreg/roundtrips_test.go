package metricreg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/metricreg"
)

func TestRoundTripsCountFailuresButNotShutdown(t *testing.T) {
	reg := prometheus.NewRegistry()
	set := metricreg.NewSet(reg, "store")
	r := set.RoundTrips("Durations.", "Failures.", []string{"get", "put"})
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "postline_store_db_errors_total"); err != nil || n != 2 {
		t.Fatalf("db_errors_total series before any call = %d, %v; want 2 at zero", n, err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	failed := errors.New("connection refused")
	for _, c := range []struct {
		ctx context.Context
		err error
	}{
		{context.Background(), nil},
		{context.Background(), failed},
		{ended, failed}, // shutdown: not a database error
	} {
		r.Observe(c.ctx, "get", time.Now(), c.err)
	}
	if n, err := testutil.GatherAndCount(reg, "postline_store_round_trip_seconds"); err != nil || n != 1 {
		t.Errorf("round_trip_seconds series = %d, %v; want 1 (op get)", n, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "postline_store_round_trip_seconds" {
			if got := mf.GetMetric()[0].GetHistogram().GetSampleCount(); got != 3 {
				t.Errorf("round trips observed = %d, want 3", got)
			}
		}
		if mf.GetName() == "postline_store_db_errors_total" {
			for _, m := range mf.GetMetric() {
				want := map[string]float64{"get": 1, "put": 0}[m.GetLabel()[0].GetValue()]
				if got := m.GetCounter().GetValue(); got != want {
					t.Errorf("db_errors_total{op=%q} = %v, want %v", m.GetLabel()[0].GetValue(), got, want)
				}
			}
		}
	}
}
