package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(options) bool
		wantErr string
	}{
		{
			name:  "defaults cap the naive run",
			args:  []string{"-smtp-source", "/x/usr/sbin/smtp-source"},
			check: func(o options) bool { return o.jobs == 20000 && o.naiveJobs == defaultNaiveJobs && o.senders == 16 },
		},
		{
			name:  "naive jobs never exceed jobs",
			args:  []string{"-jobs", "300", "-smtp-source", "s"},
			check: func(o options) bool { return o.naiveJobs == 300 },
		},
		{
			name:  "naive jobs 0 means all",
			args:  []string{"-jobs", "30000", "-naive-jobs", "0", "-smtp-source", "s"},
			check: func(o options) bool { return o.naiveJobs == 30000 },
		},
		{
			name:  "library path next to smtp-source",
			args:  []string{"-smtp-source", "/c/root/usr/sbin/smtp-source"},
			check: func(o options) bool { return o.smtpSourceLib == "/c/root/usr/lib/postfix" },
		},
		{
			name: "variants and brokers split",
			args: []string{"-variants", "postline,naive", "-brokers", "a:1,b:2"},
			check: func(o options) bool {
				return slices.Equal(o.variants, []string{"postline", "naive"}) && slices.Equal(o.brokers, []string{"a:1", "b:2"})
			},
		},
		{
			name: "memory alone needs no smtp-source and takes its defaults",
			args: []string{"-variants", "memory", "-smtp-source", ""},
			check: func(o options) bool {
				return o.mem.jobs == 2000 && o.mem.recordBytes == 900_000 && o.mem.limit == 512<<20 &&
					o.mem.goMemLimit == "450MiB" && o.mem.baseline && o.mem.cgroupRoot == "/sys/fs/cgroup/memory"
			},
		},
		{
			name:  "memory limit with a suffix",
			args:  []string{"-variants", "memory", "-memory-limit", "1GiB", "-memory-baseline-cap", "6G"},
			check: func(o options) bool { return o.mem.limit == 1<<30 && o.mem.baselineCap == 6<<30 },
		},
		{name: "memory is in the default variants", args: []string{"-smtp-source", "s"},
			check: func(o options) bool { return slices.Contains(o.variants, "memory") }},
		{name: "noindex, then template, follow postline in the default variants", args: []string{"-smtp-source", "s"},
			check: func(o options) bool {
				i := slices.Index(o.variants, "postline")
				return i >= 0 && i+2 < len(o.variants) && o.variants[i+1] == "noindex" && o.variants[i+2] == "template"
			}},
		{name: "outcomes follows template in the default variants", args: []string{"-smtp-source", "s"},
			check: func(o options) bool {
				i := slices.Index(o.variants, "template")
				return i >= 0 && i+1 < len(o.variants) && o.variants[i+1] == "outcomes" && o.dispatcherBin == "bin/webhook-dispatcher"
			}},
		{name: "postline and outcomes", args: []string{"-variants", "postline,outcomes", "-dispatcher-bin", "d", "-smtp-source", ""},
			check: func(o options) bool {
				return slices.Equal(o.variants, []string{"postline", "outcomes"}) && o.dispatcherBin == "d"
			}},
		{name: "template alone", args: []string{"-variants", "template", "-smtp-source", ""},
			check: func(o options) bool { return slices.Equal(o.variants, []string{"template"}) }},
		{name: "baseline is dropped without its binary", args: []string{"-smtp-source", "s"},
			check: func(o options) bool {
				return !slices.Contains(o.variants, "baseline") && slices.Contains(o.variants, "postfix")
			}},
		{name: "baseline runs just before postline with its binary", args: []string{"-smtp-source", "s", "-baseline-bin", "bin/worker-baseline", "-baseline-rev", "4c91515"},
			check: func(o options) bool {
				i := slices.Index(o.variants, "baseline")
				return i >= 0 && o.variants[i+1] == "postline" && o.baselineRev == "4c91515"
			}},
		{name: "smtp-source-d alone", args: []string{"-variants", "postline,postfix,smtp-source-d", "-smtp-source", "s"},
			check: func(o options) bool {
				return slices.Equal(o.variants, []string{"postline", "postfix", "smtp-source-d"})
			}},
		{name: "pid files", args: []string{"-variants", "postline", "-kafka-pid-file", "k", "-postgres-pid-file", "p", "-sink-pid-file", "s"},
			check: func(o options) bool { return len(o.components()) == 3 && len(o.sinkComponent()) == 1 }},
		{name: "halfload and lone are in the default variants, after postline", args: []string{"-smtp-source", "s"},
			check: func(o options) bool {
				i, j := slices.Index(o.variants, "postline"), slices.Index(o.variants, "halfload")
				return i >= 0 && j > i && slices.Contains(o.variants, "lone") && o.halfLoadDuration == 10*time.Second && o.loneJobs == 50
			}},
		{name: "halfload at a given rate alone", args: []string{"-variants", "halfload", "-halfload-rate", "500", "-smtp-source", ""},
			check: func(o options) bool { return o.halfLoadRate == 500 }},
		{name: "halfload before postline", args: []string{"-variants", "halfload,postline"}, wantErr: "halfload needs postline before it"},
		{name: "halfload without postline", args: []string{"-variants", "halfload,lone"}, wantErr: "halfload needs postline before it"},
		{name: "negative halfload rate", args: []string{"-variants", "postline,halfload", "-halfload-rate", "-1"}, wantErr: "-halfload-rate"},
		{name: "zero lone jobs", args: []string{"-variants", "lone", "-lone-jobs", "0"}, wantErr: "-lone-jobs: 0"},
		{name: "postfix needs smtp-source", args: []string{"-variants", "postfix", "-smtp-source", ""}, wantErr: "-smtp-source is empty"},
		{name: "no memory limit", args: []string{"-variants", "memory", "-memory-limit", "0"}, wantErr: "-memory-limit must be positive"},
		{name: "bad memory limit", args: []string{"-variants", "memory", "-memory-limit", "lots"}, wantErr: "bad size"},
		{name: "unknown variant", args: []string{"-variants", "postline,kafka"}, wantErr: `unknown variant "kafka"`},
		{name: "smtp-source needs its path", args: []string{"-smtp-source", ""}, wantErr: "-smtp-source is empty"},
		{name: "zero senders", args: []string{"-senders", "0", "-smtp-source", "s"}, wantErr: "-senders: 0"},
		{name: "stray argument", args: []string{"-smtp-source", "s", "extra"}, wantErr: `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags: %v", err)
			}
			if !tt.check(o) {
				t.Errorf("parseFlags(%q) = %+v", tt.args, o)
			}
		})
	}
}
