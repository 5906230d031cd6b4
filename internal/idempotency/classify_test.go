package idempotency

import (
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	live := now.Add(10 * time.Second)
	expired := now.Add(-time.Second)
	hashA, hashB := []byte("aaaa"), []byte("bbbb")
	req := func(hash []byte, attempt int) ClaimRequest {
		return ClaimRequest{MessageID: "m1", PayloadHash: hash, Attempt: attempt}
	}
	row := func(st Status, hash []byte, attempt int, lease time.Time) *ClaimRow {
		return &ClaimRow{Status: st, Version: 7, Attempt: attempt, PayloadHash: hash, LeaseExpiresAt: lease}
	}
	first := func(hash []byte, attempt int) *ClaimRequest { r := req(hash, attempt); return &r }

	tests := []struct {
		name        string
		in          claimInput
		want        ClaimResult
		wantStatus  Status
		wantVersion int64
		wantRetryAt time.Time
	}{
		{
			name: "inserted by the upsert",
			in:   claimInput{Req: req(hashA, 1), Claimed: true, ClaimedVersion: 1, Row: row(StatusSending, hashA, 1, live)},
			want: Claimed, wantStatus: StatusSending, wantVersion: 1,
		},
		{
			name: "re-claimed retrying row",
			in:   claimInput{Req: req(hashA, 2), Claimed: true, ClaimedVersion: 8, Row: row(StatusSending, hashA, 2, live)},
			want: Claimed, wantStatus: StatusSending, wantVersion: 8,
		},
		{
			name: "claimed without a row read back still trusts the upsert",
			in:   claimInput{Req: req(hashA, 1), Claimed: true, ClaimedVersion: 1},
			want: Claimed, wantStatus: StatusSending, wantVersion: 1,
		},
		{
			name: "sent with same hash is a duplicate",
			in:   claimInput{Req: req(hashA, 1), Row: row(StatusSent, hashA, 1, time.Time{})},
			want: Duplicate, wantStatus: StatusSent, wantVersion: 7,
		},
		{
			name: "failed with same hash is a duplicate",
			in:   claimInput{Req: req(hashA, 3), Row: row(StatusFailed, hashA, 3, time.Time{})},
			want: Duplicate, wantStatus: StatusFailed, wantVersion: 7,
		},
		{
			name: "dead with same hash but other attempt is a duplicate, not stale",
			in:   claimInput{Req: req(hashA, 1), Row: row(StatusDead, hashA, 5, time.Time{})},
			want: Duplicate, wantStatus: StatusDead, wantVersion: 7,
		},
		{
			name: "different hash on a terminal row is a conflict",
			in:   claimInput{Req: req(hashB, 1), Row: row(StatusSent, hashA, 1, time.Time{})},
			want: Conflict, wantStatus: StatusSent, wantVersion: 7,
		},
		{
			name: "different hash on a leased row is a conflict",
			in:   claimInput{Req: req(hashB, 1), Row: row(StatusSending, hashA, 1, live)},
			want: Conflict, wantStatus: StatusSending, wantVersion: 7,
		},
		{
			name: "different hash on a retrying row is a conflict",
			in:   claimInput{Req: req(hashB, 2), Row: row(StatusRetrying, hashA, 2, time.Time{})},
			want: Conflict, wantStatus: StatusRetrying, wantVersion: 7,
		},
		{
			name: "nil hash against a stored hash is a conflict",
			in:   claimInput{Req: req(nil, 1), Row: row(StatusSending, hashA, 1, live)},
			want: Conflict, wantStatus: StatusSending, wantVersion: 7,
		},
		{
			name: "older attempt on a retrying row is stale",
			in:   claimInput{Req: req(hashA, 1), Row: row(StatusRetrying, hashA, 2, time.Time{})},
			want: Stale, wantStatus: StatusRetrying, wantVersion: 7,
		},
		{
			name: "attempt mismatch under a live lease is stale, not busy",
			in:   claimInput{Req: req(hashA, 1), Row: row(StatusSending, hashA, 2, live)},
			want: Stale, wantStatus: StatusSending, wantVersion: 7,
		},
		{
			name: "next attempt under a live lease is busy: its fate is still being recorded",
			in:   claimInput{Req: req(hashA, 2), Row: row(StatusSending, hashA, 1, live), Now: now},
			want: Busy, wantStatus: StatusSending, wantVersion: 7, wantRetryAt: live,
		},
		{
			name: "next attempt after the lease lapsed is stale: the owner is gone and its record comes again",
			in:   claimInput{Req: req(hashA, 2), Row: row(StatusSending, hashA, 1, expired), Now: now},
			want: Stale, wantStatus: StatusSending, wantVersion: 7,
		},
		{
			name: "two attempts ahead of a live lease is stale",
			in:   claimInput{Req: req(hashA, 3), Row: row(StatusSending, hashA, 1, live), Now: now},
			want: Stale, wantStatus: StatusSending, wantVersion: 7,
		},
		{
			name: "next attempt of a retrying row under a live lease is stale",
			in:   claimInput{Req: req(hashA, 3), Row: row(StatusRetrying, hashA, 2, live), Now: now},
			want: Stale, wantStatus: StatusRetrying, wantVersion: 7,
		},
		{
			name: "newer attempt on a pending row is stale",
			in:   claimInput{Req: req(hashA, 3), Row: row(StatusPending, hashA, 1, time.Time{})},
			want: Stale, wantStatus: StatusPending, wantVersion: 7,
		},
		{
			name: "sending under a live lease is busy until the lease ends",
			in:   claimInput{Req: req(hashA, 1), Row: row(StatusSending, hashA, 1, live), Now: now},
			want: Busy, wantStatus: StatusSending, wantVersion: 7, wantRetryAt: live,
		},
		{
			name: "retrying under a live lease is busy",
			in:   claimInput{Req: req(hashA, 2), Row: row(StatusRetrying, hashA, 2, live), Now: now},
			want: Busy, wantStatus: StatusRetrying, wantVersion: 7, wantRetryAt: live,
		},
		{
			name: "sending with an expired lease not claimed here lost a race: re-check now",
			in:   claimInput{Req: req(hashA, 1), Row: row(StatusSending, hashA, 1, expired), Now: now},
			want: Busy, wantStatus: StatusSending, wantVersion: 7, wantRetryAt: now,
		},
		{
			name: "retrying without a lease not claimed here: re-check now",
			in:   claimInput{Req: req(hashA, 2), Row: row(StatusRetrying, hashA, 2, time.Time{}), Now: now},
			want: Busy, wantStatus: StatusRetrying, wantVersion: 7, wantRetryAt: now,
		},
		{
			name: "lease ending exactly now is not live",
			in:   claimInput{Req: req(hashA, 1), Row: row(StatusSending, hashA, 1, now), Now: now},
			want: Busy, wantStatus: StatusSending, wantVersion: 7, wantRetryAt: now,
		},
		{
			name: "no row and not claimed: re-check now",
			in:   claimInput{Req: req(hashA, 1), Now: now},
			want: Busy, wantRetryAt: now,
		},
		// Later occurrences of an ID in the same batch.
		{
			name: "repeat of the claimed first occurrence is a duplicate",
			in:   claimInput{Req: req(hashA, 1), First: first(hashA, 1), Row: row(StatusSending, hashA, 1, live), Now: now},
			want: Duplicate, wantStatus: StatusSending, wantVersion: 7,
		},
		{
			name: "different hash from the claimed first occurrence is a conflict",
			in:   claimInput{Req: req(hashB, 1), First: first(hashA, 1), Row: row(StatusSending, hashA, 1, live), Now: now},
			want: Conflict, wantStatus: StatusSending, wantVersion: 7,
		},
		{
			name: "later occurrence is never claimed even if Claimed is set",
			in:   claimInput{Req: req(hashA, 1), First: first(hashA, 1), Claimed: true, ClaimedVersion: 1, Row: row(StatusSending, hashA, 1, live), Now: now},
			want: Duplicate, wantStatus: StatusSending, wantVersion: 7,
		},
		{
			name: "repeat with no row compares with the first occurrence: same hash",
			in:   claimInput{Req: req(hashA, 1), First: first(hashA, 1), Now: now},
			want: Duplicate,
		},
		{
			name: "repeat with no row compares with the first occurrence: other hash",
			in:   claimInput{Req: req(hashB, 1), First: first(hashA, 1), Now: now},
			want: Conflict,
		},
		{
			name: "same hash, older attempt than the claimed first is stale",
			in:   claimInput{Req: req(hashA, 1), First: first(hashA, 2), Row: row(StatusSending, hashA, 2, live), Now: now},
			want: Stale, wantStatus: StatusSending, wantVersion: 7,
		},
		{
			name: "stale first, current second: busy now so it is re-claimed, not dropped",
			in:   claimInput{Req: req(hashA, 2), First: first(hashA, 1), Row: row(StatusRetrying, hashA, 2, time.Time{}), Now: now},
			want: Busy, wantStatus: StatusRetrying, wantVersion: 7, wantRetryAt: now,
		},
		{
			name: "conflicting first, matching second on a terminal row is a duplicate",
			in:   claimInput{Req: req(hashA, 1), First: first(hashB, 1), Row: row(StatusSent, hashA, 1, time.Time{}), Now: now},
			want: Duplicate, wantStatus: StatusSent, wantVersion: 7,
		},
		{
			name: "conflicting first, matching second on a leased row is busy",
			in:   claimInput{Req: req(hashA, 1), First: first(hashB, 1), Row: row(StatusSending, hashA, 1, live), Now: now},
			want: Busy, wantStatus: StatusSending, wantVersion: 7, wantRetryAt: live,
		},
		{
			name: "terminal row, repeat with another attempt is a duplicate",
			in:   claimInput{Req: req(hashA, 2), First: first(hashA, 1), Row: row(StatusSent, hashA, 1, time.Time{}), Now: now},
			want: Duplicate, wantStatus: StatusSent, wantVersion: 7,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := classify(tt.in)
			if got.MessageID != "m1" {
				t.Errorf("MessageID = %q, want m1", got.MessageID)
			}
			if got.Result != tt.want {
				t.Errorf("Result = %v, want %v", got.Result, tt.want)
			}
			if got.Status != tt.wantStatus {
				t.Errorf("Status = %q, want %q", got.Status, tt.wantStatus)
			}
			if got.Version != tt.wantVersion {
				t.Errorf("Version = %d, want %d", got.Version, tt.wantVersion)
			}
			if !got.RetryAt.Equal(tt.wantRetryAt) {
				t.Errorf("RetryAt = %v, want %v", got.RetryAt, tt.wantRetryAt)
			}
		})
	}
}

func TestClaimResultString(t *testing.T) {
	tests := []struct {
		r    ClaimResult
		want string
	}{
		{Claimed, "claimed"}, {Duplicate, "duplicate"}, {Conflict, "conflict"},
		{Busy, "busy"}, {Stale, "stale"}, {0, "ClaimResult(0)"}, {42, "ClaimResult(42)"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("ClaimResult(%d).String() = %q, want %q", int(tt.r), got, tt.want)
		}
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		s        Status
		terminal bool
		valid    bool
	}{
		{StatusPending, false, true},
		{StatusSending, false, true},
		{StatusRetrying, false, true},
		{StatusSent, true, true},
		{StatusFailed, true, true},
		{StatusDead, true, true},
		{StatusSuppressed, true, true},
		{"", false, false},
		{"SENT", false, false},
	}
	for _, tt := range tests {
		if got := tt.s.Terminal(); got != tt.terminal {
			t.Errorf("Status(%q).Terminal() = %v, want %v", tt.s, got, tt.terminal)
		}
		if got := tt.s.Valid(); got != tt.valid {
			t.Errorf("Status(%q).Valid() = %v, want %v", tt.s, got, tt.valid)
		}
	}
	if len(Statuses) != 7 {
		t.Errorf("Statuses has %d entries, want 7", len(Statuses))
	}
}

// TestClassifyAttempt checks the attempt a claim reports: the upsert's for
// Claimed (a row inserted for a copy that claims attempt 5 is at 1), the
// row's otherwise.
func TestClassifyAttempt(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	hash := []byte("aaaa")
	tests := []struct {
		name        string
		in          claimInput
		wantResult  ClaimResult
		wantAttempt int
	}{
		{
			name: "inserted for a copy claiming attempt 5 is attempt 1",
			in: claimInput{Req: ClaimRequest{MessageID: "m1", PayloadHash: hash, Attempt: 5},
				Claimed: true, ClaimedVersion: 1, ClaimedAttempt: 1,
				Row: &ClaimRow{Status: StatusSending, Version: 1, Attempt: 1, PayloadHash: hash}, Now: now},
			wantResult: Claimed, wantAttempt: 1,
		},
		{
			name: "re-claimed retrying row keeps its attempt",
			in: claimInput{Req: ClaimRequest{MessageID: "m1", PayloadHash: hash, Attempt: 3},
				Claimed: true, ClaimedVersion: 4, ClaimedAttempt: 3, Now: now},
			wantResult: Claimed, wantAttempt: 3,
		},
		{
			name: "stale reports the row's attempt",
			in: claimInput{Req: ClaimRequest{MessageID: "m1", PayloadHash: hash, Attempt: 5},
				Row: &ClaimRow{Status: StatusRetrying, Version: 2, Attempt: 2, PayloadHash: hash}, Now: now},
			wantResult: Stale, wantAttempt: 2,
		},
		{
			name:       "no row read: zero",
			in:         claimInput{Req: ClaimRequest{MessageID: "m1", PayloadHash: hash, Attempt: 2}, Now: now},
			wantResult: Busy, wantAttempt: 0,
		},
	}
	for _, tt := range tests {
		got := classify(tt.in)
		if got.Result != tt.wantResult || got.Attempt != tt.wantAttempt {
			t.Errorf("%s: classify = %v attempt %d, want %v attempt %d", tt.name, got.Result, got.Attempt, tt.wantResult, tt.wantAttempt)
		}
	}
}
