package main

import (
	"strings"
	"testing"
	"time"
)

const timeVReport = `	Command being timed: "bin/worker"
	User time (seconds): 5.13
	System time (seconds): 2.55
	Percent of CPU this job got: 41%
	Elapsed (wall clock) time (h:mm:ss or m:ss): 0:18.41
	Average shared text size (kbytes): 0
	Maximum resident set size (kbytes): 32968
	Average resident set size (kbytes): 0
	Page size (bytes): 4096
	Exit status: 0
`

func TestParseTimeV(t *testing.T) {
	tests := []struct {
		name    string
		report  string
		want    usage
		wantErr string
	}{
		{
			name:   "worker",
			report: timeVReport,
			want: usage{User: 5130 * time.Millisecond, System: 2550 * time.Millisecond,
				Elapsed: 18410 * time.Millisecond, MaxRSSBytes: 32968 << 10},
		},
		{
			name: "non-zero exit and hours",
			report: "Command exited with non-zero status 3\n" +
				"\tUser time (seconds): 0.00\n\tSystem time (seconds): 0.01\n" +
				"\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:03\n" +
				"\tMaximum resident set size (kbytes): 908\n\tExit status: 3\n",
			want: usage{System: 10 * time.Millisecond, Elapsed: time.Hour + 2*time.Minute + 3*time.Second,
				MaxRSSBytes: 908 << 10, ExitStatus: 3},
		},
		{
			name:   "killed by the OOM killer",
			report: "Command terminated by signal 9\n" + timeVReport,
			want: usage{User: 5130 * time.Millisecond, System: 2550 * time.Millisecond,
				Elapsed: 18410 * time.Millisecond, MaxRSSBytes: 32968 << 10, Signal: 9},
		},
		{
			name:    "bad signal",
			report:  "Command terminated by signal x\n" + timeVReport,
			wantErr: "bad signal line",
		},
		{
			name:   "child output mixed in",
			report: "hello: world\nsome line\n" + timeVReport,
			want: usage{User: 5130 * time.Millisecond, System: 2550 * time.Millisecond,
				Elapsed: 18410 * time.Millisecond, MaxRSSBytes: 32968 << 10},
		},
		{
			name:    "no RSS",
			report:  "\tUser time (seconds): 1.00\n\tSystem time (seconds): 1.00\n",
			wantErr: "Maximum resident set size",
		},
		{
			name:    "no user time",
			report:  "\tSystem time (seconds): 1.00\n\tMaximum resident set size (kbytes): 1\n",
			wantErr: "User time",
		},
		{
			name:    "bad seconds",
			report:  strings.Replace(timeVReport, "5.13", "five", 1),
			wantErr: "bad seconds",
		},
		{
			name:    "bad clock",
			report:  strings.Replace(timeVReport, "0:18.41", "0:78.41", 1),
			wantErr: "bad clock",
		},
		{
			name:    "empty",
			report:  "",
			wantErr: "User time",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTimeV(tt.report)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseTimeV error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseTimeV: %v", err)
			}
			if got != tt.want {
				t.Errorf("parseTimeV = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestUsageCPU(t *testing.T) {
	u := usage{User: 1500 * time.Millisecond, System: 250 * time.Millisecond}
	if got, want := u.CPU(), 1750*time.Millisecond; got != want {
		t.Errorf("CPU() = %v, want %v", got, want)
	}
}
