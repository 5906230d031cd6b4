package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSizes(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  bool
	}{
		{in: "1024,10240,102400", want: []int{1024, 10240, 102400}},
		{in: " 2048 ", want: []int{2048}},
		{in: "1024,1024", err: true},
		{in: "0", err: true},
		{in: "10k", err: true},
		{in: "", err: true},
	}
	for _, tt := range tests {
		got, err := parseSizes(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestSizeNamesAndJobs(t *testing.T) {
	tests := []struct {
		size, jobs      int
		label, row      string
		wantJobs        int
		addedByTheSizes bool
	}{
		{size: 1024, jobs: 20000, label: "1k", row: "postline", wantJobs: 20000},
		{size: 10240, jobs: 20000, label: "10k", row: "postline-10k", wantJobs: 20000, addedByTheSizes: true},
		{size: 102400, jobs: 20000, label: "100k", row: "postline-100k", wantJobs: 2000, addedByTheSizes: true},
		{size: 102400, jobs: 3000, label: "100k", row: "postline-100k", wantJobs: 1000, addedByTheSizes: true},
		{size: 102400, jobs: 200, label: "100k", row: "postline-100k", wantJobs: 200, addedByTheSizes: true},
		{size: 1500, jobs: 100, label: "1500b", row: "postline-1500b", wantJobs: 100, addedByTheSizes: true},
	}
	sizes := []int{1024, 10240, 102400, 1500}
	for _, tt := range tests {
		if got := sizeLabel(tt.size); got != tt.label {
			t.Errorf("sizeLabel(%d) = %q, want %q", tt.size, got, tt.label)
		}
		if got := sizeRowName(variantPostline, tt.size, 1024); got != tt.row {
			t.Errorf("sizeRowName(postline, %d) = %q, want %q", tt.size, got, tt.row)
		}
		if got := sizeJobs(tt.jobs, tt.size); got != tt.wantJobs {
			t.Errorf("sizeJobs(%d, %d) = %d, want %d", tt.jobs, tt.size, got, tt.wantJobs)
		}
		if got := isSizeRow(tt.row, sizes, 1024); got != tt.addedByTheSizes {
			t.Errorf("isSizeRow(%q) = %v, want %v", tt.row, got, tt.addedByTheSizes)
		}
	}
	if isSizeRow("naive", sizes, 1024) {
		t.Error("isSizeRow(naive) = true: the main table would lose the naive row")
	}
}

func TestSizedJobsAreTheirSize(t *testing.T) {
	for _, size := range []int{1024, 10240, 102400, 1001} {
		jobs := sizedJobs(3, size)
		for _, j := range jobs {
			if got := len(j.Text) + len(j.HTML); got != size {
				t.Errorf("size %d: text %d + HTML %d bytes = %d", size, len(j.Text), len(j.HTML), got)
			}
			if size >= 10240 && (strings.Count(j.Text, "\n") < size/200 || !strings.Contains(j.HTML, "<p>")) {
				t.Errorf("size %d: the body is not mail-like text and HTML", size)
			}
		}
	}
}

func TestSizesTargetsAndTable(t *testing.T) {
	// row makes a row of 1,000 mails at rate mails/s with cpu of own CPU per mail.
	// The whole run's CPU is 0.1 ms a mail more: start-up, which the
	// delivery window's sample leaves out.
	row := func(name string, rate float64, cpu time.Duration) result {
		r := result{Variant: name, Mails: 1000, Span: time.Duration(1000 / rate * float64(time.Second)), CPU: (cpu + 100*time.Microsecond) * 1000}
		r.Stack = stackCPU{Measured: true, Own: cpu * 1000}
		return r
	}
	full := []result{
		row("postline", 11000, 70*time.Microsecond), row("smtp-source-d", 20000, 0), row("postfix", 1000, 0),
		row("postline-10k", 9500, 100*time.Microsecond), row("smtp-source-d-10k", 10000, 0), row("postfix-10k", 900, 0),
		row("postline-100k", 1700, 450*time.Microsecond), row("smtp-source-d-100k", 2000, 0), row("postfix-100k", 500, 0),
	}
	sizes := []int{1024, 10240, 102400}
	tests := []struct {
		name     string
		rows     []result
		verdicts []string // one a target: 1k relay, 10k share, 100k share, 100k CPU
		tableHas []string
	}{
		{name: "all rows", rows: full,
			verdicts: []string{"PASS", "PASS", "FAIL", "FAIL"},
			tableHas: []string{"| 1k | 1000 | 11000 | 1000 | 20000 | 11.0x | 55% | 0.070 ms |", "| 10k | 1000 | 9500 | 900 | 10000 | 10.6x | 95% | 0.100 ms |", "| 100k | 1000 | 1700 | 500 | 2000 | 3.40x | 85% | 0.450 ms |"}},
		{name: "no postline rows", rows: full[1:3],
			verdicts: []string{"not measured", "not measured", "not measured", "not measured"},
			tableHas: []string{"| 1k | n/a | n/a | 1000 | 20000 | n/a | n/a | n/a |"}},
		{name: "no window sample: start to SIGTERM", rows: []result{{Variant: "postline-100k", Mails: 1000, Span: time.Second, CPU: 300 * time.Millisecond}},
			verdicts: []string{"not measured", "not measured", "not measured", "PASS"},
			tableHas: []string{"| 100k | 1000 | 1000 | n/a | n/a | n/a | n/a | 0.300 ms |"}},
		{name: "no baselines at 100k", rows: full[:7],
			verdicts: []string{"PASS", "PASS", "not measured", "FAIL"},
			tableHas: []string{"| 100k | 1000 | 1700 | n/a | n/a | n/a | n/a | 0.450 ms |"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sr := sizeRows(tt.rows, sizes, 1024)
			ts := sizesTargets(sr)
			if len(ts) != len(tt.verdicts) {
				t.Fatalf("%d targets, want %d: %+v", len(ts), len(tt.verdicts), ts)
			}
			for i, want := range tt.verdicts {
				if got := ts[i].verdict(); got != want {
					t.Errorf("target %q = %s (%s), want %s", ts[i].Name, got, ts[i].Measured, want)
				}
			}
			var b strings.Builder
			sizesTable(&b, sr)
			for _, line := range tt.tableHas {
				if !strings.Contains(b.String(), line) {
					t.Errorf("table lacks %q:\n%s", line, b.String())
				}
			}
		})
	}
}
