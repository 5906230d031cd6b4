package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/redrive"
)

func TestReport(t *testing.T) {
	good := result{n: 10_000, rate: 500, planTime: 800 * time.Millisecond, planned: 10_000, runTime: 19900 * time.Millisecond,
		secondTime: 900 * time.Millisecond, first: redrive.Summary{Redriven: 10_000}, second: redrive.Summary{SkippedNotReplayable: 10_000},
		published: 10_000, events: 10_000}
	slow, again, lost := good, good, good
	slow.runTime = 23 * time.Second
	again.second = redrive.Summary{Redriven: 3, SkippedNotReplayable: 9_997}
	lost.published = 9_999
	tests := []struct {
		name    string
		r       result
		want    []string
		wantErr string
	}{
		{"within the bound", good, []string{"| re-drive | 10000 | 19.90 s | 20.00 s | -0.5 % |", "| the same re-drive again | 0 |", ": PASS"}, ""},
		{"too slow", slow, []string{"+15.0 %", ": FAIL"}, "+15.0 % from 20.00 s"},
		{"the second run sent", again, []string{"| the same re-drive again | 3 |", ": FAIL"}, "re-drove 3"},
		{"a record missing", lost, []string{"9999 records on the jobs topic", ": FAIL"}, "got 10000, 10000, 9999, 10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := report(&out, options{tolerance: 0.10}, tt.r)
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"-n", "0"}, {"-rate", "0"}, {"-rate", "20000"}, {"-tolerance", "0"}, {"stray"}} {
		if err := run(t.Context(), args, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
