package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/job"
)

// A fate is what became of one record in the pipeline: the end of its job
// (sent, suppressed, failed, dead, rejected, a duplicate, a stale copy, a
// conflict), or where it waits for its next try (a delay tier, a wait in
// the worker). Every fate is decided in this file, by the stage that meets
// it, and travels beside its item (decided) to the recorder, which applies
// it in one switch (settle, in record.go): what a record's end writes
// (row, dead letter, retry copy, events, re-entry, offset) is read in one
// place.
type fate struct {
	kind fateKind
	// relay is the relay of the attempt's last send, "" when no send
	// was made.
	relay string
	// class is the failure class written to the row, the dead letter and
	// the events; reason the dead-letter reason of a rejected, failed or
	// dead record; errText the error they carry. A record sent after a
	// failover or a resend keeps its last failure's text, as the row's
	// last error.
	class, reason, errText string
	// reply is the relay's answer to the attempt's last failed send, for
	// the events of the recipients it leaves pending, failed or dead; nil
	// when no send failed.
	reply *event.Reply
	// decidedAt is when the sender settled the attempt: the time of its
	// events, which may be recorded seconds later when the fate rows
	// queue behind a slow batch. Zero for fates decided at intake or claim.
	decidedAt time.Time
	// copy is the retry copy of a record retried through a delay tier.
	copy *retry.Copy
	// wakeAt is when a busy, held or handed-back record re-enters intake.
	wakeAt time.Time
}

// decided is an item and the fate a stage decided for it, on its way to
// settle.
type decided struct {
	it   *item
	fate fate
}

// A fateKind names a fate.
type fateKind int

const (
	// undecided: a hard stop cut the job off. Nothing is recorded and the
	// record is not marked done, so Kafka redelivers it.
	undecided fateKind = iota

	// Decided at intake and claim: the record ends without a send, or
	// waits for the lease another worker holds.

	// fateRejected: the record is not a valid job. Dead-lettered, with a
	// dead row when its key names a Message-ID.
	fateRejected
	// fateDuplicate: the Message-ID is already done for this payload.
	fateDuplicate
	// fateStale: the copy's attempt is not the row's (an old copy).
	fateStale
	// fateConflict: the Message-ID was used for another payload.
	// Dead-lettered, and counted on the row.
	fateConflict
	// fateBusy: another live worker holds the Message-ID's lease; the
	// record is claimed again at wakeAt.
	fateBusy

	// Decided by the sender, and written to the job's row.

	// fateSent: a relay took the mail for one recipient or more.
	fateSent
	// fateSuppressed: the suppression lists dropped every recipient.
	fateSuppressed
	// fateFailed: refused for good. Dead-lettered as reason.
	fateFailed
	// fateDead: given up on (expired, too old, out of attempts, not
	// renderable, a panic). Dead-lettered as reason.
	fateDead
	// fateRetried: retried through a delay tier: copy waits in the tier's
	// topic until copy.NotBefore, charged the next attempt.
	fateRetried
	// fateHeld: a short throttle, waited out in the worker until wakeAt,
	// in the record's place and without charging an attempt.
	fateHeld
	// fateHandedBack: no relay (or no template store) can take the job
	// now; it is claimed again at wakeAt without charging an attempt.
	fateHandedBack
)

// recorded reports whether the fate is written to the job's row.
func (f fate) recorded() bool { return f.status() != "" }

// status is the row's status of a recorded fate.
func (f fate) status() idempotency.Status {
	switch f.kind {
	case fateSent:
		return idempotency.StatusSent
	case fateSuppressed:
		return idempotency.StatusSuppressed
	case fateFailed:
		return idempotency.StatusFailed
	case fateDead:
		return idempotency.StatusDead
	case fateRetried, fateHeld, fateHandedBack:
		return idempotency.StatusRetrying
	}
	return ""
}

// doneLabel is the outcome label (postline_delivery_records_total and the
// deliver span) of a fate that finishes the record; reentryCause is the
// cause label (postline_delivery_reentries_total) of one that feeds it back
// into intake. Each fate has exactly one of the two.
func (f fate) doneLabel() string {
	switch f.kind {
	case fateRejected:
		return "rejected"
	case fateDuplicate:
		return claimResultName(idempotency.Duplicate)
	case fateStale:
		return claimResultName(idempotency.Stale)
	case fateConflict:
		return "conflict"
	case fateRetried:
		return "retried"
	}
	return string(f.status())
}

func (f fate) reentryCause() string {
	switch f.kind {
	case fateBusy:
		return reentryBusy
	case fateHeld:
		return reentryThrottled
	case fateHandedBack:
		return reentryHandBack
	}
	return ""
}

// The causes of a re-entry (postline_delivery_reentries_total).
const (
	reentryBusy      = "busy"
	reentryHandBack  = "release"
	reentryThrottled = "throttled"
)

// rejectedFate is the fate of a record that is not a valid job.
func rejectedFate(ve *job.ValidationError) fate {
	class := classInvalid
	if ve.Reason == deadletter.ReasonInternalError {
		class = classInternal
	}
	return fate{kind: fateRejected, reason: string(ve.Reason), class: class, errText: ve.Error()}
}

// claimFate is the fate the claim decides for a record it did not claim.
func (p *Pipeline) claimFate(c idempotency.Claim) (fate, error) {
	switch c.Result {
	case idempotency.Duplicate:
		return fate{kind: fateDuplicate}, nil
	case idempotency.Stale:
		return fate{kind: fateStale}, nil
	case idempotency.Conflict:
		return fate{kind: fateConflict}, nil
	case idempotency.Busy:
		wait := min(max(c.RetryAt.Sub(p.cfg.NowFunc()), 0), p.cfg.RecheckInterval)
		return fate{kind: fateBusy, wakeAt: p.cfg.NowFunc().Add(wait)}, nil
	}
	return fate{}, fmt.Errorf("delivery: unknown claim result %d for %s", c.Result, c.MessageID)
}

// dead is the fate of a job given up on.
func dead(reason, class, errText string) fate {
	return fate{kind: fateDead, reason: reason, class: class, errText: errText}
}

// panicked is the fate of a job whose handling panicked: dead as
// internal_error, rather than tried again into the same panic. relay is
// the relay of the attempt's last send before the panic, if any.
func panicked(perr *panicError, relay string) fate {
	f := dead(deadletter.ReasonInternalError, classInternal, perr.Error())
	f.relay = relay
	return f
}

// beforeRelay decides the fate of a claimed job before a relay sees it: a
// job past its not_after or its priority's max age dies, and one with no
// recipient left pending is finished. It reports whether the job goes on.
func (p *Pipeline) beforeRelay(it *item, limit RetryLimit) (fate, bool) {
	now := p.cfg.NowFunc()
	switch {
	case it.job.Expired(now):
		return dead(string(job.ReasonExpired), classExpired,
			"not_after "+it.job.NotAfter.UTC().Format(time.RFC3339)+" passed before sending"), false
	case now.Sub(firstSeen(it.msg)) > limit.MaxAge:
		return dead(deadletter.ReasonMaxAge, it.lastClass(), maxAgeText(cmp.Or(it.job.Priority, job.PriorityNormal), limit.MaxAge)), false
	}
	if len(it.pending()) == 0 {
		return it.withoutPending(), false
	}
	return fate{}, true
}

// withoutPending is the fate of a job none of whose recipients is left to
// send to: sent if a relay took it for someone, suppressed if the
// suppression lists dropped the rest, failed otherwise.
func (it *item) withoutPending() fate {
	switch {
	case it.everAccepted():
		return fate{kind: fateSent}
	case it.countState(idempotency.RecipientSuppressed) > 0 && it.countState(idempotency.RecipientBounced) == 0 &&
		it.countState(idempotency.RecipientFailed) == 0:
		return fate{kind: fateSuppressed, class: sourceSuppression}
	default:
		return fate{kind: fateFailed, class: string(failure.Permanent), reason: deadletter.ReasonSMTPPermanent,
			errText: "every recipient was refused or suppressed"}
	}
}

// errNoTemplateStore is why a template job cannot be composed by a worker
// without a Composer.
var errNoTemplateStore = errors.New("no template store")

// composeFailed decides the fate of a template job that was not rendered:
// a worker without a template store, a panic and a template no version of
// which renders the job are dead; a template store that does not answer
// hands the job back, like a relay that cannot take mail now.
func (p *Pipeline) composeFailed(ctx context.Context, it *item, err error) fate {
	var perr *panicError
	switch {
	case errors.Is(err, errNoTemplateStore):
		return dead(deadletter.ReasonRenderFailed, classRender, "the job names template "+it.job.Template.Name+
			" but this worker has no template store")
	case errors.As(err, &perr):
		return panicked(perr, "")
	case ctx.Err() != nil:
		return fate{} // hard stop: the record is left unfinished
	case errors.Is(err, ErrComposeUnavailable):
		p.logger.Warn("template store unavailable; the job waits", "message_id", it.job.MessageID,
			"template", it.job.Template.Name, "error", err)
		return p.handBack("", "")
	default:
		p.metrics.renderFailures.Inc()
		return dead(deadletter.ReasonRenderFailed, classRender, err.Error())
	}
}

// sentFate is the fate of a job a relay took; errText is the attempt's
// last failure before it (a failover or a resend), if any.
func sentFate(relay, errText string) fate {
	return fate{kind: fateSent, relay: relay, errText: errText}
}

// afterFailedSend decides the fate of a job whose send failed for a reason
// the sender does not try again within the attempt: a permanent failure
// fails it, any other is retried (scheduleRetry). Either fate carries
// reply, the failure's reply for the events (sendReply).
func (p *Pipeline) afterFailedSend(it *item, v failure.Verdict, errText string, reply *event.Reply, limit RetryLimit,
	relay *relayPool) fate {
	var f fate
	if v.Class == failure.Permanent {
		f = fate{kind: fateFailed, class: string(v.Class), reason: deadletter.ReasonSMTPPermanent, errText: errText}
	} else {
		f = p.scheduleRetry(it, v, errText, limit, relay)
	}
	f.relay, f.reply = relay.Name, reply
	return f
}

// scheduleRetry routes a retryable failure to a delay tier, or makes the job
// dead when it has used its attempts or its age. The policy decides the
// delay from the failure and the load; a retry budget that is empty adds
// the wait for its refill; the result is rounded up to a tier. A job whose
// age runs out while it waits in a tier dies when it comes back.
func (p *Pipeline) scheduleRetry(it *item, v failure.Verdict, errText string, limit RetryLimit, relay *relayPool) fate {
	next := it.attempt + 1
	if next > limit.MaxAttempts {
		return dead(deadletter.ReasonMaxAttempts, string(v.Class), errText)
	}
	now := p.cfg.NowFunc()
	if now.Sub(firstSeen(it.msg)) > limit.MaxAge {
		// The last failure stays in the text: it is why the job is not sent.
		return dead(deadletter.ReasonMaxAge, string(v.Class),
			maxAgeText(cmp.Or(it.job.Priority, job.PriorityNormal), limit.MaxAge)+" (last failure: "+errText+")")
	}
	successRate, _ := p.window.Rate(now, relay.Name)
	d := p.cfg.Policy.Decide(adaptive.Inputs{
		Class:              v.Class,
		Attempt:            it.attempt,
		Throttles:          it.throttles,
		RetryAfter:         v.RetryAfter,
		Lag:                p.lag(),
		SuccessRate:        successRate,
		RelayCooldownUntil: relay.cooldown(),
		Now:                now,
	})
	if !d.Retry {
		// The classes routed here are retryable under every policy; a
		// policy that still refuses is obeyed rather than overruled.
		return fate{kind: fateFailed, class: string(v.Class), reason: deadletter.ReasonSMTPPermanent, errText: errText}
	}
	delay := d.Delay
	if v.Class == failure.Throttled && v.RelayFault && delay < p.cfg.Tiers[0] && it.holds < maxThrottleHolds {
		// The relay asked us to slow down for less than the shortest tier:
		// the job waits in the worker, in its place, and the send control
		// paces it, rather than going round a delay topic to the back of
		// the jobs topic (which would round a 1 s hint up to 5 s and queue
		// it behind the whole backlog: the long tail of a throttled burst).
		// Like a hand-back, the wait is the relay's pacing, not an attempt
		// at the message, so it is not charged one, nor a retry token (the
		// send control, not the budget, paces it); after
		// maxThrottleHolds in a row the job takes the delay tiers, which
		// charge both, so a relay that throttles for ever cannot keep a
		// job in the worker.
		p.metrics.backoffDelay.WithLabelValues(string(v.Class), d.Reason).Observe(delay.Seconds())
		it.holds++
		return fate{kind: fateHeld, class: string(v.Class), errText: errText, wakeAt: now.Add(delay)}
	}
	if p.budgets != nil {
		priority := cmp.Or(it.job.Priority, job.PriorityNormal)
		if ok, until := p.budgets.Take(now, priority); !ok {
			delay = max(delay, until.Sub(now))
			p.metrics.budgetWaits.WithLabelValues(string(priority)).Inc()
		}
	}
	p.metrics.backoffDelay.WithLabelValues(string(v.Class), d.Reason).Observe(delay.Seconds())
	tier := p.cfg.Tiers.Pick(delay)
	return fate{kind: fateRetried, class: string(v.Class), errText: errText, copy: &retry.Copy{
		Key:   it.msg.Key,
		Value: it.msg.Value,
		// The copy keeps the record's trace context (the publisher's span,
		// or the reinject span of the previous retry), not this attempt's:
		// the scheduler's reinject span becomes its child (see tracing.go).
		Headers:   it.msg.Headers,
		Attempt:   next,
		NotBefore: now.Add(tier),
		FirstSeen: firstSeen(it.msg),
		LastClass: string(v.Class),
		Throttles: it.throttles,
		Tier:      tier,
	}}
}

// maxThrottleHolds is how many short throttles in a row a job waits out in
// the worker before it goes to a delay tier.
const maxThrottleHolds = 3

// handBack is the fate of a claimed job no relay (or template store)
// can take now: handed back without charging an attempt, it is claimed
// again when a circuit half-opens. relay and errText are the attempt's
// last send and failure, if it made one.
func (p *Pipeline) handBack(relay, errText string) fate {
	wait := p.cfg.RecheckInterval
	if p.breakers != nil {
		if at, ok := p.breakers.NextProbeAt(); ok {
			wait = max(at.Sub(p.cfg.NowFunc()), 0)
		}
	}
	wait = min(max(wait, 50*time.Millisecond), p.cfg.MaxHandBackWait)
	p.metrics.handBacks.Inc()
	return fate{kind: fateHandedBack, relay: relay, errText: errText, wakeAt: p.cfg.NowFunc().Add(wait)}
}

// settleAttempt closes the sender's attempt, settled at now, with its fate
// f: the recipients still pending fail or die with a failed or dead job,
// and a job that failed after a relay took it for some recipients is sent
// (to those), not failed. It returns the fate to record.
func (it *item) settleAttempt(f fate, now time.Time) fate {
	f.decidedAt = now
	var to idempotency.RecipientState
	switch f.kind {
	case undecided:
		return f // a hard stop: nothing is recorded
	case fateFailed:
		to = idempotency.RecipientFailed
	case fateDead:
		to = idempotency.RecipientDead
	}
	if to != "" {
		for _, r := range it.pending() {
			r.state, r.fresh = to, true
		}
	}
	if f.kind == fateFailed && it.everAccepted() {
		f.kind, f.reason = fateSent, ""
	}
	return f
}

// maxAgeText is the error of a job dead for its age: it names the limit and
// the priority it comes from (a job without one counts as normal), since the
// limits differ per priority.
func maxAgeText(priority job.Priority, maxAge time.Duration) string {
	return "older than the " + maxAge.String() + " max age of " + string(priority) + " priority mail"
}

// lastClass is the failure class of the previous attempt, from the record's
// headers.
func (it *item) lastClass() string {
	c := jobheader.Carrier(it.msg.Headers)
	if v := c.Get(jobheader.KeyLastClass); v != "" {
		return v
	}
	return classExpired
}
