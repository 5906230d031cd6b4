package benchmetrics

import (
	"strings"
	"testing"
)

func TestParseCounters(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       Counters
		wantErr    bool
	}{
		{
			name: "a worker's exposition",
			text: `# HELP postline_delivery_records_total records finished by the pipeline
# TYPE postline_delivery_records_total counter
postline_delivery_records_total{outcome="conflict"} 0
postline_delivery_records_total{outcome="dead"} 2
postline_delivery_records_total{outcome="duplicate"} 7
postline_delivery_records_total{outcome="failed"} 1
postline_delivery_records_total{outcome="rejected"} 0
postline_delivery_records_total{outcome="retried"} 3
postline_delivery_records_total{outcome="sent"} 1.234567e+06
postline_delivery_records_total_created{outcome="sent"} 1.7e+09
# TYPE postline_reaper_purged_total counter
postline_reaper_purged_total 4000
postline_reaper_takeovers_total 11
postline_delivery_attempts_total{provider="default",result="sent"} 99
# TYPE postline_idempotency_round_trip_seconds histogram
postline_idempotency_round_trip_seconds_bucket{op="purge",le="0.1"} 3
postline_idempotency_round_trip_seconds_bucket{op="purge",le="+Inf"} 4
postline_idempotency_round_trip_seconds_sum{op="purge"} 0.25
postline_idempotency_round_trip_seconds_count{op="purge"} 4
postline_idempotency_round_trip_seconds_bucket{op="claim",le="+Inf"} 1000
postline_idempotency_round_trip_seconds_sum{op="claim"} 9.5
postline_idempotency_round_trip_seconds_count{op="claim"} 1000
`,
			want: Counters{Sent: 1234567, Failed: 3, Purged: 4000, Takeovers: 11, Duplicates: 7, PurgeStatements: 4, PurgeSeconds: 0.25},
		},
		{
			name: "other labels and a timestamp",
			text: `postline_delivery_records_total{instance="w1",outcome="sent"} 10 1700000000000` + "\n",
			want: Counters{Sent: 10},
		},
		{name: "nothing of ours", text: "go_goroutines 12\n"},
		{name: "a bad value", text: `postline_delivery_records_total{outcome="sent"} many` + "\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.text))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("Parse = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseGoAllocs(t *testing.T) {
	text := `# HELP go_memstats_alloc_bytes_total Total number of bytes allocated in heap until now, even if released already.
# TYPE go_memstats_alloc_bytes_total counter
go_memstats_alloc_bytes_total 1.2345678e+08
go_memstats_alloc_bytes 4.5e+06
# TYPE go_memstats_mallocs_total counter
go_memstats_mallocs_total 987654
postline_sent_total{provider="smtp"} 5
`
	got, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if !got.HasAllocs || got.AllocBytes != 1.2345678e+08 || got.Mallocs != 987654 {
		t.Errorf("Parse = %+v, want 1.2345678e+08 bytes, 987654 objects", got)
	}
	if got, err := Parse(strings.NewReader("go_memstats_alloc_bytes_total 1\n")); err != nil || got.HasAllocs {
		t.Errorf("no mallocs counter: HasAllocs %v, %v; want false", got.HasAllocs, err)
	}
	if _, err := Parse(strings.NewReader("go_memstats_alloc_bytes_total x\ngo_memstats_mallocs_total 1\n")); err == nil {
		t.Error("a bad value: want an error")
	}
}
