package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func passes(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestReport(t *testing.T) {
	tests := []struct {
		name      string
		results   []result
		wantRows  []string
		wantVerdi string
		wantErr   bool
	}{
		{
			name: "flat passes",
			results: []result{
				{size: 10_000, passes: passes(20, 10, 30), old: passes(15, 15, 16)},
				{size: 100_000, passes: passes(22, 21, 25), old: passes(150, 160, 140)},
				{size: 1_000_000, passes: passes(26, 27, 28), old: passes(1500, 1400, 1600)},
			},
			wantRows:  []string{"| 10k | 20.0 ms | 1.00x | 15.0 ms |", "| 100k | 22.0 ms | 1.10x | 150.0 ms |", "| 1M | 27.0 ms | 1.35x | 1500.0 ms |"},
			wantVerdi: "1.35x, PASS",
		},
		{
			name: "a pass that grows with the backlog",
			results: []result{
				{size: 10_000, passes: passes(20), old: passes(15)},
				{size: 1_000_000, passes: passes(31), old: passes(1500)},
			},
			wantRows:  []string{"| 1M | 31.0 ms | 1.55x | 1500.0 ms |"},
			wantVerdi: "1.55x, FAIL",
			wantErr:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := report(&out, options{batch: 1000, passes: 3, target: 1.5}, tt.results)
			if (err != nil) != tt.wantErr {
				t.Errorf("report error = %v, want error %v", err, tt.wantErr)
			}
			for _, row := range append(tt.wantRows, tt.wantVerdi) {
				if !strings.Contains(out.String(), row) {
					t.Errorf("report lacks %q:\n%s", row, out.String())
				}
			}
		})
	}
}

func TestFlagsRejected(t *testing.T) {
	for _, args := range [][]string{
		{"-sizes", "100000,10000"},
		{"-sizes", "10"},
		{"-sizes", "x"},
		{"-batch", "0"},
		{"-passes", "0"},
		{"-target", "0.5"},
	} {
		if err := run(t.Context(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("run %v succeeded, want a flag error", args)
		}
	}
}
