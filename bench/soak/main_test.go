package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		check   func(options) bool
		wantErr string
	}{
		{name: "the steady aging by default", check: func(o options) bool {
			// The aging begins as the first window, after the lead, ends.
			return o.aging == agingSteady && o.ageFrom == 0.15 && o.ageLag == 15*time.Second &&
				o.ageShift == time.Hour-15*time.Second && o.window == 100_000 && o.lead == 50_000 &&
				o.total() == 1_050_000 && o.warmupJobs == 300_000
		}},
		{name: "a shorter soak", args: []string{"-jobs", "100000", "-lead", "10000"}, check: func(o options) bool {
			return o.window == 10_000 && o.ageFrom == 0.2 && o.total() == 110_000
		}},
		{name: "no room for the lead", args: []string{"-jobs", "100000", "-window", "30000"}, wantErr: "at least -lead 50000 and twice -window 30000"},
		{name: "no warm-up", args: []string{"-warmup-jobs", "0"}, check: func(o options) bool { return o.warmupJobs == 0 }},
		{name: "a warm-up without a window", args: []string{"-warmup-jobs", "9"}, wantErr: "-warmup-jobs 9 must be 0 or at least 10"},
		{name: "the burst", args: []string{"-aging", "burst", "-age-from", "0.5"}, check: func(o options) bool {
			return o.aging == agingBurst && o.ageFrom == 0.5 && o.ageShift == time.Hour+time.Minute
		}},
		{name: "no aging", args: []string{"-aging", "off"}, check: func(o options) bool { return o.aging == agingOff }},
		{name: "an unknown aging", args: []string{"-aging", "sometimes"}, wantErr: `-aging "sometimes"`},
		{name: "aging from the end", args: []string{"-age-from", "1"}, wantErr: "-age-from 1"},
		{name: "no lag", args: []string{"-age-lag", "0s"}, wantErr: "-age-lag 0s"},
		{name: "aging the purge never sees", args: []string{"-age-shift", "30m"}, check: func(o options) bool { return o.ageShift == 30*time.Minute }},
		{name: "a lag as long as the retention", args: []string{"-age-lag", "1h"}, wantErr: "shorter than -retention 1h0m0s"},
		{name: "a window too large", args: []string{"-jobs", "100", "-window", "60"}, wantErr: "twice -window 60"},
		{name: "one run by default", check: func(o options) bool { return o.runs == 1 }},
		{name: "three runs", args: []string{"-runs", "3"}, check: func(o options) bool { return o.runs == 3 }},
		{name: "no run", args: []string{"-runs", "0"}, wantErr: "-runs 0 must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(o) {
				t.Fatalf("parseFlags(%q) = %+v, %v", tc.args, o, err)
			}
		})
	}
}

func TestWarmupOptions(t *testing.T) {
	o, err := parseFlags([]string{"-jobs", "50000", "-lead", "5000", "-warmup-jobs", "20000", "-out", "res", "-keep", "-workers", "3", "-rate", "500"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	w := warmupOptions(o)
	if w.jobs != 20_000 || w.window != 2_000 || w.lead != 2_000 || w.warmupJobs != 0 || w.aging != agingOff || w.keep || w.rate != 0 {
		t.Errorf("warm-up: jobs %d, window %d, lead %d, warm-up %d, aging %q, keep %v, rate %v; want 20000, 2000, 2000, 0, %q, false, 0",
			w.jobs, w.window, w.lead, w.warmupJobs, w.aging, w.keep, w.rate, agingOff)
	}
	if w.out != filepath.Join("res", "warmup") || w.logDir != w.out {
		t.Errorf("warm-up files in %q and %q, want both in res/warmup", w.out, w.logDir)
	}
	if w.workers != 3 || w.workerBin != o.workerBin || w.sink != o.sink || w.retention != o.retention {
		t.Errorf("warm-up fleet %+v differs from the measured one's %+v", w, o)
	}
	if o.jobs != 50_000 || o.aging != agingSteady || !o.keep || o.rate != 500 {
		t.Errorf("the measured options changed: %+v", o)
	}
}

func TestRunOptions(t *testing.T) {
	o, err := parseFlags([]string{"-runs", "3", "-out", "res", "-log-dir", "logs"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := runOptions(o, 2)
	if r.out != filepath.Join("res", "run2") || r.logDir != filepath.Join("logs", "run2") {
		t.Errorf("run 2's files in %q and %q, want res/run2 and logs/run2", r.out, r.logDir)
	}
	if r.jobs != o.jobs || r.aging != o.aging || r.warmupJobs != o.warmupJobs || r.runs != o.runs {
		t.Errorf("run 2 does not keep the soak's settings: %+v against %+v", r, o)
	}
}
