package suppression

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// precedenceCases are the upsert rule's cases: whether next replaces old
// at t0. The integration test runs the same table through the database.
var precedenceCases = []struct {
	name      string
	old, next Entry
	want      bool
}{
	{"bounce does not replace complaint",
		Entry{Reason: ReasonComplaint}, Entry{Reason: ReasonHardBounce}, false},
	{"soft bounce does not replace complaint",
		Entry{Reason: ReasonComplaint}, Entry{Reason: ReasonSoftBounce, ExpiresAt: t0.Add(time.Hour)}, false},
	{"complaint replaces hard bounce",
		Entry{Reason: ReasonHardBounce}, Entry{Reason: ReasonComplaint}, true},
	{"expiring complaint does not replace a lasting bounce",
		Entry{Reason: ReasonHardBounce}, Entry{Reason: ReasonComplaint, ExpiresAt: t0.Add(time.Hour)}, false},
	{"expiring entry does not replace a lasting one",
		Entry{Reason: ReasonHardBounce}, Entry{Reason: ReasonHardBounce, ExpiresAt: t0.Add(time.Hour)}, false},
	{"lasting entry replaces an expiring one of the same reason",
		Entry{Reason: ReasonHardBounce, ExpiresAt: t0.Add(time.Hour)}, Entry{Reason: ReasonHardBounce}, true},
	{"later soft bounce extends an earlier one",
		Entry{Reason: ReasonSoftBounce, ExpiresAt: t0.Add(time.Hour)}, Entry{Reason: ReasonSoftBounce, ExpiresAt: t0.Add(2 * time.Hour)}, true},
	{"shorter soft bounce does not shorten",
		Entry{Reason: ReasonSoftBounce, ExpiresAt: t0.Add(2 * time.Hour)}, Entry{Reason: ReasonSoftBounce, ExpiresAt: t0.Add(time.Hour)}, false},
	{"equal entry keeps the first",
		Entry{Reason: ReasonHardBounce, Source: "dsn"}, Entry{Reason: ReasonHardBounce, Source: "ses"}, false},
	{"hard bounce replaces soft bounce",
		Entry{Reason: ReasonSoftBounce, ExpiresAt: t0.Add(time.Hour)}, Entry{Reason: ReasonHardBounce}, true},
	{"soft bounce does not replace hard bounce",
		Entry{Reason: ReasonHardBounce}, Entry{Reason: ReasonSoftBounce, ExpiresAt: t0.Add(time.Hour)}, false},
	{"unsubscribe does not replace hard bounce",
		Entry{Reason: ReasonHardBounce}, Entry{Reason: ReasonUnsubscribe}, false},
	{"hard bounce makes a manual entry with expiry lasting",
		Entry{Reason: ReasonManual, ExpiresAt: t0.Add(time.Hour)}, Entry{Reason: ReasonHardBounce}, true},
	{"hard bounce does not replace a lasting manual entry",
		Entry{Reason: ReasonManual, Note: "vip"}, Entry{Reason: ReasonHardBounce}, false},
	{"manual replaces complaint",
		Entry{Reason: ReasonComplaint}, Entry{Reason: ReasonManual, ExpiresAt: t0.Add(time.Hour)}, true},
	{"manual replaces manual",
		Entry{Reason: ReasonManual}, Entry{Reason: ReasonManual, Note: "again"}, true},
	{"identical manual entry changes nothing",
		Entry{Reason: ReasonManual, Note: "same"}, Entry{Reason: ReasonManual, Note: "same"}, false},
	{"anything replaces an expired entry",
		Entry{Reason: ReasonComplaint, ExpiresAt: t0}, Entry{Reason: ReasonSoftBounce, ExpiresAt: t0.Add(time.Hour)}, true},
}

func TestSupersedes(t *testing.T) {
	for _, tt := range precedenceCases {
		t.Run(tt.name, func(t *testing.T) {
			if got := Supersedes(tt.next, tt.old, t0); got != tt.want {
				t.Errorf("Supersedes(%+v, %+v) = %v, want %v", tt.next, tt.old, got, tt.want)
			}
		})
	}
}

func TestStronger(t *testing.T) {
	tests := []struct {
		name string
		a, b Entry
		want bool
	}{
		{"reason first", Entry{Reason: ReasonComplaint, ExpiresAt: t0}, Entry{Reason: ReasonHardBounce}, true},
		{"weaker reason", Entry{Reason: ReasonSoftBounce}, Entry{Reason: ReasonManual}, false},
		{"lasting over expiring", Entry{Reason: ReasonManual}, Entry{Reason: ReasonManual, ExpiresAt: t0}, true},
		{"later expiry", Entry{Reason: ReasonManual, ExpiresAt: t0.Add(time.Hour)}, Entry{Reason: ReasonManual, ExpiresAt: t0}, true},
		{"own stream over every stream", Entry{Reason: ReasonManual, Stream: StreamBulk}, Entry{Reason: ReasonManual, Stream: StreamAll}, true},
		{"every stream under own stream", Entry{Reason: ReasonManual, Stream: StreamAll}, Entry{Reason: ReasonManual, Stream: StreamBulk}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stronger(tt.a, tt.b); got != tt.want {
				t.Errorf("stronger = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPrepare(t *testing.T) {
	valid := Entry{Tenant: "acme", Stream: StreamBulk, Address: "Ada <ADA@x.org>", Reason: ReasonHardBounce, Source: "dsn"}
	with := func(f func(*Entry)) Entry { e := valid; f(&e); return e }
	tests := []struct {
		name    string
		in      Entry
		check   func(Entry) bool
		wantErr string
	}{
		{name: "normalized, created now, lasting", in: valid, check: func(e Entry) bool {
			return e.Address == "ada@x.org" && e.CreatedAt.Equal(t0) && e.ExpiresAt.IsZero()
		}},
		{name: "soft bounce gets the TTL", in: with(func(e *Entry) { e.Reason = ReasonSoftBounce }), check: func(e Entry) bool {
			return e.ExpiresAt.Equal(t0.Add(DefaultSoftBounceTTL))
		}},
		{name: "soft bounce keeps its expiry", in: with(func(e *Entry) { e.Reason, e.ExpiresAt = ReasonSoftBounce, t0.Add(time.Minute) }),
			check: func(e Entry) bool { return e.ExpiresAt.Equal(t0.Add(time.Minute)) }},
		{name: "times cut to microseconds", in: with(func(e *Entry) { e.CreatedAt = t0.Add(1500 * time.Nanosecond) }),
			check: func(e Entry) bool { return e.CreatedAt.Equal(t0.Add(time.Microsecond)) }},
		{name: "bad address", in: with(func(e *Entry) { e.Address = "nope" }), wantErr: "address"},
		{name: "bad stream", in: with(func(e *Entry) { e.Stream = "marketing" }), wantErr: `stream "marketing"`},
		{name: "empty stream", in: with(func(e *Entry) { e.Stream = "" }), wantErr: `stream ""`},
		{name: "bad reason", in: with(func(e *Entry) { e.Reason = "spam" }), wantErr: `reason "spam"`},
		{name: "long note", in: with(func(e *Entry) { e.Note = strings.Repeat("n", MaxNoteBytes+1) }), wantErr: "note: 1001 bytes"},
		{name: "NUL in source", in: with(func(e *Entry) { e.Source = "a\x00b" }), wantErr: "source: holds a NUL"},
		{name: "long tenant", in: with(func(e *Entry) { e.Tenant = strings.Repeat("t", MaxTenantBytes+1) }), wantErr: "tenant"},
		{name: "expires before created", in: with(func(e *Entry) { e.ExpiresAt = t0.Add(-time.Second) }), wantErr: "not after created_at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := prepare(tt.in, t0, DefaultSoftBounceTTL)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("prepare = %+v, %v; want an ErrInvalid error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.check(got) {
				t.Fatalf("prepare = %+v, %v", got, err)
			}
		})
	}
}

func TestParseReasonAndStream(t *testing.T) {
	for _, r := range Reasons() {
		if got, err := ParseReason(" " + string(r) + " "); err != nil || got != r {
			t.Errorf("ParseReason(%q) = %q, %v", r, got, err)
		}
	}
	if _, err := ParseReason("bounce"); err == nil || !strings.Contains(err.Error(), "hard_bounce") {
		t.Errorf("ParseReason(bounce): %v, want the list of reasons", err)
	}
	for _, s := range []Stream{StreamTransactional, StreamBulk, StreamAll} {
		if got, err := ParseStream(string(s)); err != nil || got != s {
			t.Errorf("ParseStream(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseStream(""); err == nil {
		t.Error("ParseStream(\"\") succeeded")
	}
	// Every reason has a strength, and the SQL ranks what Go ranks.
	for _, r := range Reasons() {
		if r.rank() == 0 || !strings.Contains(rankSQL("x"), "'"+string(r)+"' THEN "+string(rune('0'+r.rank()))) {
			t.Errorf("reason %s: rank %d, SQL %s", r, r.rank(), rankSQL("x"))
		}
	}
}

func TestConfigAndFilterValidate(t *testing.T) {
	if err := (Config{}).WithDefaults().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
	if err := (Config{SoftBounceTTL: time.Millisecond}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "SoftBounceTTL 1ms") {
		t.Errorf("SoftBounceTTL 1ms: %v", err)
	}
	if err := (Config{PurgeBatch: -1}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "PurgeBatch -1") {
		t.Errorf("PurgeBatch -1: %v", err)
	}
	filters := []struct {
		f       Filter
		wantErr string
	}{
		{Filter{}, ""},
		{Filter{Tenant: new(""), Stream: StreamAll, Reason: ReasonComplaint, AddressPrefix: "ada@", Limit: MaxListLimit}, ""},
		{Filter{Stream: "mkt"}, `stream "mkt"`},
		{Filter{Reason: "spam"}, `reason "spam"`},
		{Filter{Limit: -1}, "limit -1"},
		{Filter{Limit: MaxListLimit + 1}, "limit 10001"},
		{Filter{Tenant: new("a\x00")}, "tenant"},
	}
	for _, tt := range filters {
		err := tt.f.validate()
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("Filter %+v: validate = %v, want %q", tt.f, err, tt.wantErr)
		}
	}
}
