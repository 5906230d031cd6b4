package fleet

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/redrive"
)

// at is a time on 2026-12-01 UTC.
func at(hour, minute int) time.Time { return time.Date(2026, 12, 1, hour, minute, 0, 0, time.UTC) }

func letter(t time.Time, reason string) redrive.DeadLetter {
	return redrive.DeadLetter{Time: t, Reason: reason}
}

func TestDeadLetterHistogram(t *testing.T) {
	now := at(13, 15)
	type bucket struct {
		start, end time.Time
		byReason   map[string]int
	}
	tests := []struct {
		name        string
		query       HistogramQuery
		letters     []redrive.DeadLetter
		wantBuckets []bucket
		wantReasons []ReasonCount
	}{
		{
			name:  "hourly, aligned to whole hours, first and last cut short by the window",
			query: HistogramQuery{Since: at(10, 30), Bucket: time.Hour},
			letters: []redrive.DeadLetter{
				letter(at(10, 29), "smtp_permanent"), // before the window
				letter(at(10, 30), "smtp_permanent"),
				letter(at(12, 0).Add(-time.Nanosecond), "max_attempts"),
				letter(at(12, 0), "smtp_permanent"),
				letter(at(12, 0), "max_age"),
				letter(at(13, 14), "smtp_permanent"),
				letter(at(13, 15), "smtp_permanent"), // at the end: not counted
			},
			wantBuckets: []bucket{
				{at(10, 30), at(11, 0), map[string]int{"smtp_permanent": 1}},
				{at(11, 0), at(12, 0), map[string]int{"max_attempts": 1}},
				{at(12, 0), at(13, 0), map[string]int{"smtp_permanent": 1, "max_age": 1}},
				{at(13, 0), at(13, 15), map[string]int{"smtp_permanent": 1}},
			},
			// Most first, then by name.
			wantReasons: []ReasonCount{{"smtp_permanent", 3}, {"max_age", 1}, {"max_attempts", 1}},
		},
		{
			name:  "a window on bucket boundaries, empty buckets kept, a letter without a reason",
			query: HistogramQuery{Since: at(10, 0), Until: at(10, 40), Bucket: 10 * time.Minute},
			letters: []redrive.DeadLetter{
				letter(at(10, 5), ""),
				letter(at(10, 35), "render_failed"),
				letter(at(10, 39), "render_failed"),
				letter(at(10, 40), "render_failed"),
			},
			wantBuckets: []bucket{
				{at(10, 0), at(10, 10), map[string]int{"": 1}},
				{at(10, 10), at(10, 20), map[string]int{}},
				{at(10, 20), at(10, 30), map[string]int{}},
				{at(10, 30), at(10, 40), map[string]int{"render_failed": 2}},
			},
			wantReasons: []ReasonCount{{"render_failed", 2}, {"", 1}},
		},
		{
			name:        "a window inside one bucket, nothing in it",
			query:       HistogramQuery{Since: at(9, 10), Until: at(9, 20), Bucket: 24 * time.Hour},
			letters:     []redrive.DeadLetter{letter(at(9, 9), "max_age"), letter(at(9, 20), "max_age")},
			wantBuckets: []bucket{{at(9, 10), at(9, 20), map[string]int{}}},
			wantReasons: []ReasonCount{},
		},
		{
			name:  "times in another zone: the same instants, buckets in UTC",
			query: HistogramQuery{Since: at(11, 0).In(time.FixedZone("UTC-5:30", -(5*60+30)*60)), Until: at(13, 0), Bucket: time.Hour},
			letters: []redrive.DeadLetter{
				letter(at(11, 59).In(time.FixedZone("UTC+9", 9*60*60)), "max_age"),
			},
			wantBuckets: []bucket{
				{at(11, 0), at(12, 0), map[string]int{"max_age": 1}},
				{at(12, 0), at(13, 0), map[string]int{}},
			},
			wantReasons: []ReasonCount{{"max_age", 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &fakeDeadLetters{letters: tt.letters}
			r := &Reader{now: func() time.Time { return now }, deadLetters: src}
			h, err := r.DeadLetterHistogram(t.Context(), tt.query)
			if err != nil {
				t.Fatal(err)
			}
			// One listing, filtered on the window; the scan told where it
			// starts.
			wantUntil := tt.query.Until
			if wantUntil.IsZero() {
				wantUntil = now
			}
			if !src.since.Equal(tt.query.Since) || !src.filter.Since.Equal(tt.query.Since) || !src.filter.Until.Equal(wantUntil) ||
				len(src.filter.Reasons)+len(src.filter.Tenants)+len(src.filter.Classes)+src.filter.Limit != 0 {
				t.Errorf("listed from %v with filter %+v, want the window [%v, %v) only", src.since, src.filter, tt.query.Since, wantUntil)
			}
			if !h.Since.Equal(tt.query.Since) || !h.Until.Equal(wantUntil) || h.Since.Location() != time.UTC || h.Until.Location() != time.UTC {
				t.Errorf("window [%v, %v), want [%v, %v) in UTC", h.Since, h.Until, tt.query.Since, wantUntil)
			}
			if h.Bucket != tt.query.Bucket || h.BucketSeconds != tt.query.Bucket.Seconds() {
				t.Errorf("bucket %v (%vs), want %v", h.Bucket, h.BucketSeconds, tt.query.Bucket)
			}
			var got []bucket
			total := 0
			for _, b := range h.Buckets {
				got = append(got, bucket{b.Start, b.End, b.ByReason})
				sum := 0
				for _, n := range b.ByReason {
					sum += n
				}
				if b.Total != sum {
					t.Errorf("bucket at %v: total %d, by reason %v", b.Start, b.Total, b.ByReason)
				}
				if b.Start.Location() != time.UTC || b.End.Location() != time.UTC {
					t.Errorf("bucket [%v, %v) not in UTC", b.Start, b.End)
				}
				total += b.Total
			}
			if !reflect.DeepEqual(got, tt.wantBuckets) {
				t.Errorf("buckets\n%v\nwant\n%v", got, tt.wantBuckets)
			}
			if !reflect.DeepEqual(h.Reasons, tt.wantReasons) {
				t.Errorf("reasons %v, want %v", h.Reasons, tt.wantReasons)
			}
			if h.Total != total {
				t.Errorf("total %d, buckets sum to %d", h.Total, total)
			}
		})
	}
}

func TestDeadLetterHistogramRefuses(t *testing.T) {
	now := at(12, 0)
	tests := []struct {
		name    string
		query   HistogramQuery
		wantErr string
	}{
		{"no start", HistogramQuery{Bucket: time.Hour}, "needs a start"},
		{"no bucket", HistogramQuery{Since: at(11, 0)}, "bucket 0s: must be positive"},
		{"negative bucket", HistogramQuery{Since: at(11, 0), Bucket: -time.Hour}, "must be positive"},
		{"start at the end", HistogramQuery{Since: at(11, 0), Until: at(11, 0), Bucket: time.Hour}, "is not before its end"},
		{"start in the future", HistogramQuery{Since: at(12, 1), Bucket: time.Hour}, "is not before its end"},
		{"too many buckets", HistogramQuery{Since: now.Add(-2 * time.Hour), Bucket: time.Second}, "7200 buckets of 1s: at most 5000"},
		{"a window of centuries", HistogramQuery{Since: time.Date(2, 1, 1, 0, 0, 0, 0, time.UTC), Bucket: time.Hour}, "at most 5000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &fakeDeadLetters{}
			r := &Reader{now: func() time.Time { return now }, deadLetters: src}
			_, err := r.DeadLetterHistogram(t.Context(), tt.query)
			var qe *QueryError
			if !errors.As(err, &qe) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want a *QueryError saying %q", err, tt.wantErr)
			}
			if !src.since.IsZero() {
				t.Error("the topic was read for a refused query")
			}
		})
	}
	// The most buckets allowed is fine.
	r := &Reader{now: func() time.Time { return now }, deadLetters: &fakeDeadLetters{}}
	h, err := r.DeadLetterHistogram(t.Context(), HistogramQuery{Since: now.Add(-MaxBuckets * time.Second), Bucket: time.Second})
	if err != nil || len(h.Buckets) != MaxBuckets {
		t.Errorf("%d buckets of 1s: %d buckets, %v", MaxBuckets, len(h.Buckets), err)
	}
}

func TestDeadLetterHistogramListFails(t *testing.T) {
	errRead := errors.New("read mail.dlq/0: broker down")
	r := &Reader{now: time.Now, deadLetters: &fakeDeadLetters{err: errRead}}
	if _, err := r.DeadLetterHistogram(t.Context(), HistogramQuery{Since: time.Now().Add(-time.Hour), Bucket: time.Minute}); !errors.Is(err, errRead) {
		t.Errorf("error %v, want the listing's", err)
	}
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.DeadLetterHistogram(t.Context(), HistogramQuery{Since: time.Now().Add(-time.Hour), Bucket: time.Minute}); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("without a dead-letter topic: %v, want ErrNotConfigured", err)
	}
}

// FuzzHistogramBuckets: the buckets tile the window without gaps or
// overlaps, and every dead letter in the window is counted once, in the
// bucket that holds its time; none outside it is.
func FuzzHistogramBuckets(f *testing.F) {
	f.Add(int64(1800), int64(3*3600), int64(3600), int64(100), int64(5000))
	f.Add(int64(0), int64(600), int64(60), int64(0), int64(599))
	f.Add(int64(-7), int64(1), int64(86400), int64(-8), int64(1))
	f.Fuzz(func(t *testing.T, sinceSec, windowSec, bucketSec, aSec, bSec int64) {
		base := at(0, 0)
		if windowSec <= 0 || bucketSec <= 0 || windowSec > 1<<40 || bucketSec > 1<<40 ||
			sinceSec < -1<<40 || sinceSec > 1<<40 || aSec < -1<<41 || aSec > 1<<41 || bSec < -1<<41 || bSec > 1<<41 {
			t.Skip()
		}
		since := base.Add(time.Duration(sinceSec) * time.Second)
		q := HistogramQuery{Since: since, Until: since.Add(time.Duration(windowSec) * time.Second), Bucket: time.Duration(bucketSec) * time.Second}
		letters := []redrive.DeadLetter{letter(base.Add(time.Duration(aSec)*time.Second), "a"), letter(base.Add(time.Duration(bSec)*time.Second), "b")}
		r := &Reader{now: time.Now, deadLetters: &fakeDeadLetters{letters: letters}}
		h, err := r.DeadLetterHistogram(t.Context(), q)
		var qe *QueryError
		if errors.As(err, &qe) {
			return // too many buckets
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.Buckets[0].Start.Equal(q.Since) || !h.Buckets[len(h.Buckets)-1].End.Equal(q.Until) {
			t.Fatalf("buckets cover [%v, %v), want [%v, %v)", h.Buckets[0].Start, h.Buckets[len(h.Buckets)-1].End, q.Since, q.Until)
		}
		for i, b := range h.Buckets {
			if !b.Start.Before(b.End) || b.End.Sub(b.Start) > q.Bucket || (i > 0 && !b.Start.Equal(h.Buckets[i-1].End)) {
				t.Fatalf("bucket %d [%v, %v) after %v", i, b.Start, b.End, h.Buckets[max(i-1, 0)].End)
			}
		}
		for _, l := range letters {
			inWindow := !l.Time.Before(q.Since) && l.Time.Before(q.Until)
			counted := 0
			for _, b := range h.Buckets {
				if n := b.ByReason[l.Reason]; n > 0 {
					counted += n
					if l.Time.Before(b.Start) || !l.Time.Before(b.End) {
						t.Fatalf("%s at %v counted in [%v, %v)", l.Reason, l.Time, b.Start, b.End)
					}
				}
			}
			if want := map[bool]int{true: 1, false: 0}[inWindow]; counted != want {
				t.Fatalf("%s at %v (window [%v, %v)) counted %d times, want %d", l.Reason, l.Time, q.Since, q.Until, counted, want)
			}
		}
	})
}
