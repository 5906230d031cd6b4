package delivery

import (
	"testing"
	"time"

	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/retry"
)

// TestFateLabels: every fate either finishes its record, with one outcome
// label, or feeds it back to intake, with one re-entry cause; the ones
// written to a row have the row's status.
func TestFateLabels(t *testing.T) {
	tests := []struct {
		kind      fateKind
		done      string
		reentry   string
		status    idempotency.Status
		hasStatus bool
	}{
		{kind: fateRejected, done: "rejected"},
		{kind: fateDuplicate, done: "duplicate"},
		{kind: fateStale, done: "stale"},
		{kind: fateConflict, done: "conflict"},
		{kind: fateBusy, reentry: reentryBusy},
		{kind: fateSent, done: "sent", status: idempotency.StatusSent, hasStatus: true},
		{kind: fateSuppressed, done: "suppressed", status: idempotency.StatusSuppressed, hasStatus: true},
		{kind: fateFailed, done: "failed", status: idempotency.StatusFailed, hasStatus: true},
		{kind: fateDead, done: "dead", status: idempotency.StatusDead, hasStatus: true},
		{kind: fateRetried, done: "retried", status: idempotency.StatusRetrying, hasStatus: true},
		{kind: fateHeld, reentry: reentryThrottled, status: idempotency.StatusRetrying, hasStatus: true},
		{kind: fateHandedBack, reentry: reentryHandBack, status: idempotency.StatusRetrying, hasStatus: true},
	}
	for _, tt := range tests {
		f := fate{kind: tt.kind}
		if got := f.reentryCause(); got != tt.reentry {
			t.Errorf("kind %d: re-entry cause %q, want %q", tt.kind, got, tt.reentry)
		}
		if tt.reentry == "" {
			if got := f.doneLabel(); got != tt.done {
				t.Errorf("kind %d: outcome label %q, want %q", tt.kind, got, tt.done)
			}
		}
		if f.recorded() != tt.hasStatus || f.status() != tt.status {
			t.Errorf("kind %d: recorded %v with status %q, want %v with %q", tt.kind, f.recorded(), f.status(), tt.hasStatus, tt.status)
		}
	}
}

// TestSettleAttempt: the recipients left pending fail or die with the job,
// and a job that failed after a relay took it for a recipient is sent.
func TestSettleAttempt(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	failed := fate{kind: fateFailed, class: string(failure.Permanent), reason: deadletter.ReasonSMTPPermanent, errText: "550 no"}
	tests := []struct {
		name     string
		accepted bool // the first recipient was accepted before
		in       fate
		want     fateKind
		reason   string
		pending  idempotency.RecipientState // what the second recipient becomes
	}{
		{"failed", false, failed, fateFailed, deadletter.ReasonSMTPPermanent, idempotency.RecipientFailed},
		{"failed after an acceptance is sent", true, failed, fateSent, "", idempotency.RecipientFailed},
		{"dead", false, dead(deadletter.ReasonMaxAttempts, "transient", "421"), fateDead, deadletter.ReasonMaxAttempts, idempotency.RecipientDead},
		{"retried leaves it pending", false, fate{kind: fateRetried, copy: &retry.Copy{}}, fateRetried, "", idempotency.RecipientPending},
		{"handed back leaves it pending", false, fate{kind: fateHandedBack}, fateHandedBack, "", idempotency.RecipientPending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := &item{job: multiJob("s@x", "a@example.com", "b@example.com"), attempt: 1}
			it.initRecipients()
			if tt.accepted {
				it.rcpts[0].state = idempotency.RecipientAccepted
			}
			got := it.settleAttempt(tt.in, at)
			if got.kind != tt.want || got.reason != tt.reason || !got.decidedAt.Equal(at) {
				t.Errorf("fate %d reason %q at %s, want %d reason %q at %s", got.kind, got.reason, got.decidedAt, tt.want, tt.reason, at)
			}
			if got.class != tt.in.class || got.errText != tt.in.errText {
				t.Errorf("class %q error %q, want them kept: %q %q", got.class, got.errText, tt.in.class, tt.in.errText)
			}
			if s := it.rcpts[1].state; s != tt.pending {
				t.Errorf("pending recipient became %s, want %s", s, tt.pending)
			}
		})
	}
	var it item
	if got := it.settleAttempt(fate{}, at); got.kind != undecided {
		t.Errorf("a hard stop's fate became %d, want undecided", got.kind)
	}
}

// TestWithoutPending: a job with no recipient left to send to is sent if a
// relay took it for someone, suppressed if the lists dropped the rest, and
// failed otherwise.
func TestWithoutPending(t *testing.T) {
	tests := []struct {
		name   string
		states []idempotency.RecipientState
		want   fateKind
		class  string
	}{
		{"one accepted", []idempotency.RecipientState{idempotency.RecipientAccepted, idempotency.RecipientBounced}, fateSent, ""},
		{"all suppressed", []idempotency.RecipientState{idempotency.RecipientSuppressed}, fateSuppressed, sourceSuppression},
		{"suppressed and bounced", []idempotency.RecipientState{idempotency.RecipientSuppressed, idempotency.RecipientBounced}, fateFailed, string(failure.Permanent)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := &item{}
			for i, s := range tt.states {
				it.rcpts = append(it.rcpts, rcpt{index: i, state: s})
			}
			f := it.withoutPending()
			if f.kind != tt.want || f.class != tt.class {
				t.Errorf("fate %d class %q, want %d %q", f.kind, f.class, tt.want, tt.class)
			}
			if f.kind == fateFailed && (f.reason != deadletter.ReasonSMTPPermanent || f.errText == "") {
				t.Errorf("failed without its reason or error: %+v", f)
			}
		})
	}
}
