package delivery

import (
	"context"
	"strings"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/job"
)

// rcpt is one recipient of an item.
type rcpt struct {
	index   int
	address string
	state   idempotency.RecipientState
	// fresh says this attempt (or the claim before it) decided state:
	// it is recorded, and its event published, with the fate.
	fresh bool
	// Set for a refusal at RCPT and for suppression.
	refusal    *sender.Error
	bounceType string
	rule       string
	suppress   bool
	reason     string // suppression list reason
	// dkimDomain is the domain that signed the copy the relay accepted.
	dkimDomain string
	// deferral is the relay's refusal for now at RCPT in this attempt's
	// last send: the reply of the recipient's deferred, failed or dead
	// event, rather than the send's.
	deferral *sender.Error
}

// stream is the suppression and event stream of a job.
func stream(j *job.Job) string {
	if j.Priority == job.PriorityBulk {
		return event.StreamBulk
	}
	return event.StreamTransactional
}

// initRecipients gives a claimed item its recipients, all pending, unless
// it has them from before it re-entered.
func (it *item) initRecipients() {
	if it.rcpts != nil {
		return
	}
	addrs := it.job.Recipients()
	it.rcpts = make([]rcpt, len(addrs))
	for i, a := range addrs {
		it.rcpts[i] = rcpt{index: i, address: a, state: idempotency.RecipientPending}
	}
}

// pending returns the recipients this attempt sends to.
func (it *item) pending() []*rcpt {
	var out []*rcpt
	for i := range it.rcpts {
		if it.rcpts[i].state == idempotency.RecipientPending {
			if out == nil {
				out = make([]*rcpt, 0, len(it.rcpts)-i) // room for all the rest: one allocation
			}
			out = append(out, &it.rcpts[i])
		}
	}
	return out
}

// countState counts the recipients in state.
func (it *item) countState(state idempotency.RecipientState) int {
	n := 0
	for _, r := range it.rcpts {
		if r.state == state {
			n++
		}
	}
	return n
}

// countFresh counts the recipients this attempt moved to state.
func (it *item) countFresh(state idempotency.RecipientState) int {
	n := 0
	for _, r := range it.rcpts {
		if r.fresh && r.state == state {
			n++
		}
	}
	return n
}

// everAccepted reports whether a relay took the mail for some recipient,
// in this attempt or an earlier one.
func (it *item) everAccepted() bool {
	for _, r := range it.rcpts {
		switch r.state {
		case idempotency.RecipientAccepted, idempotency.RecipientDelivered, idempotency.RecipientComplained:
			return true
		}
	}
	return false
}

// loadRecipients applies what earlier attempts recorded to items that
// come back from a delay tier: their recipients already taken or resolved
// are not sent to again.
func (p *Pipeline) loadRecipients(ctx context.Context, items []*item) error {
	if p.recipients == nil {
		return nil
	}
	var ids []string
	for _, it := range items {
		if it.attempt > 1 && !it.loaded {
			ids = append(ids, it.job.MessageID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var rows map[string][]idempotency.Recipient
	if err := p.retry(ctx, opRecipients, func(ctx context.Context) (err error) {
		rows, err = p.recipients.Recipients(ctx, ids)
		return err
	}); err != nil {
		return err
	}
	for _, it := range items {
		if it.attempt <= 1 || it.loaded {
			continue
		}
		it.loaded = true
		for _, row := range rows[it.job.MessageID] {
			if row.Index < len(it.rcpts) && row.State != idempotency.RecipientPending {
				r := &it.rcpts[row.Index]
				r.state, r.fresh = row.State, false
			}
		}
	}
	return nil
}

// suppressionLookup is one lookup of a batch's recipients in the
// suppression list. It runs beside the claim: the send waits for both
// round trips, and neither needs the other's answer.
type suppressionLookup struct {
	done chan struct{}
	hits map[SuppressionKey]string
	err  error
}

// lookUpSuppressions starts the lookup of every recipient of items; nil
// when there is nothing to look up. A claim that fails leaves it to end
// with the context.
func (p *Pipeline) lookUpSuppressions(ctx context.Context, items []*item) *suppressionLookup {
	if p.suppressions == nil {
		return nil
	}
	var keys []SuppressionKey
	for _, it := range items {
		for _, a := range it.job.Recipients() {
			keys = append(keys, suppressionKey(it, a))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	l := &suppressionLookup{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.err = p.retry(ctx, opSuppressionCheck, func(ctx context.Context) (err error) {
			l.hits, err = p.suppressions.Suppressed(ctx, keys)
			return err
		})
	}()
	return l
}

func suppressionKey(it *item, address string) SuppressionKey {
	return SuppressionKey{Tenant: it.job.Tenant, Stream: stream(&it.job), Address: strings.ToLower(address)}
}

// suppress drops the claimed items' suppressed recipients from their
// envelopes, with the answer of the batch's lookup l.
func (p *Pipeline) suppress(items []*item, l *suppressionLookup) error {
	if l == nil {
		return nil
	}
	<-l.done
	if l.err != nil {
		return l.err
	}
	for _, it := range items {
		for _, r := range it.pending() {
			if reason, ok := l.hits[suppressionKey(it, r.address)]; ok {
				r.state, r.fresh, r.reason = idempotency.RecipientSuppressed, true, reason
				p.metrics.suppressed.Inc()
			}
		}
	}
	return nil
}

// envelope is the recipients of one send and their return paths.
func (p *Pipeline) envelope(it *item, rcpts []*rcpt) []sender.Recipient {
	out := make([]sender.Recipient, len(rcpts))
	for i, r := range rcpts {
		out[i] = sender.Recipient{Address: r.address, ListUnsubscribe: p.unsubscribeURIs(it, r)}
		if p.returnPaths != nil {
			out[i].ReturnPath = p.returnPaths.Address(it.job.MessageID, r.index)
		}
	}
	return out
}

// applyResult moves the recipients of a send on: the accepted ones to
// accepted, the ones refused for good to bounced. It returns the error of
// a recipient refused for now when the send itself had none, so that the
// job is retried for it.
func (p *Pipeline) applyResult(it *item, sent []*rcpt, res sender.Result, relay string) error {
	for _, k := range res.Accepted {
		r := sent[k]
		r.state, r.fresh, r.dkimDomain = idempotency.RecipientAccepted, true, res.DKIMDomain
	}
	for _, r := range sent {
		r.deferral = nil // an earlier send's refusal is not this one's
	}
	var deferred error
	for _, ref := range res.Refused {
		r := sent[ref.Index]
		v := p.cfg.Rules.Classify(ref.Err)
		if v.Class != failure.Permanent {
			if deferred == nil {
				deferred = ref.Err
			}
			r.deferral = ref.Err
			continue
		}
		r.state, r.fresh, r.refusal = idempotency.RecipientBounced, true, ref.Err
		b := p.cfg.Rules.ClassifyBounce(ref.Err.Code, ref.Err.Enhanced, ref.Err.Text)
		r.bounceType, r.rule, r.suppress = string(b.Type), b.Rule, b.Suppress
		p.metrics.rcptRefusals.WithLabelValues(relay, r.bounceType).Inc()
	}
	return deferred
}

// recipientFates are the recipient rows the fate row writes; relay is
// the relay of the attempt's last send.
func (it *item) recipientFates(relay string) []idempotency.RecipientFate {
	var out []idempotency.RecipientFate
	for _, r := range it.rcpts {
		if !r.fresh && r.state != idempotency.RecipientPending {
			continue
		}
		o := idempotency.RecipientFate{Index: r.index, Address: r.address, State: r.state,
			Attempt: it.attempt, Provider: relay, Source: bounceSourceSMTP}
		switch {
		case r.refusal != nil:
			o.BounceType, o.Status, o.Code, o.Diagnostic, o.Rule = r.bounceType, r.refusal.Enhanced, r.refusal.Code, r.refusal.Text, r.rule
		case r.state == idempotency.RecipientSuppressed:
			o.Source, o.Rule = sourceSuppression, r.reason
		}
		out = append(out, o)
	}
	return out
}

// Sources of recipient decisions the worker makes.
const (
	bounceSourceSMTP  = "smtp"
	sourceSuppression = "suppression"
)

// appendEvents appends to dst the events of it's fate f, about to be
// recorded: one per recipient this attempt moved, and a deferral per
// recipient left pending when the job goes to a delay tier. It appends
// rather than returns a slice of its own: the batch's events grow in one
// slice sized for the batch.
func (p *Pipeline) appendEvents(dst []event.Event, it *item, f fate, now time.Time) []event.Event {
	if len(it.rcpts) == 0 {
		return dst
	}
	// An event is dated when its attempt was settled, not when the batch
	// is recorded: a deferral's next_attempt_at is a tier after the former.
	at := now
	if !f.decidedAt.IsZero() {
		at = f.decidedAt
	}
	base := event.Event{Schema: event.Schema, At: at.UTC(), MessageID: it.job.MessageID, Tenant: it.job.Tenant,
		Stream: stream(&it.job), Attempt: it.attempt, Provider: f.relay, Metadata: it.job.Metadata,
		Template: it.composed}
	out := dst
	// add appends r's event of type t and returns it, for the caller to
	// fill in: filled in place rather than through a callback, which made
	// every event escape to the heap before it was copied into out.
	add := func(r *rcpt, t event.Type) *event.Event {
		out = append(out, base)
		e := &out[len(out)-1]
		e.Type, e.Recipient, e.RecipientIndex = t, r.address, r.index
		e.ID = event.NewLifeID(it.job.MessageID, it.life, r.index, t, it.attempt)
		return e
	}
	for i := range it.rcpts {
		r := &it.rcpts[i]
		switch {
		case r.state == idempotency.RecipientPending:
			if f.kind != fateRetried {
				continue // a hand-back or a short hold in the worker: not a deferral
			}
			next := f.copy.NotBefore.UTC()
			e := add(r, event.Deferred)
			e.Class, e.NextAttemptAt, e.Reply = f.class, &next, r.reply(f)
		case !r.fresh:
		case r.state == idempotency.RecipientAccepted:
			add(r, event.Accepted).DKIMDomain = r.dkimDomain
		case r.state == idempotency.RecipientBounced:
			add(r, event.Bounced).Bounce = &event.Bounce{Type: r.bounceType, Status: r.refusal.Enhanced, Code: r.refusal.Code,
				Diagnostic: truncateDiagnostic(r.refusal.Text), Rule: r.rule, Source: bounceSourceSMTP}
		case r.state == idempotency.RecipientSuppressed:
			add(r, event.Suppressed).Reason = r.reason
		case r.state == idempotency.RecipientFailed:
			e := add(r, event.Failed)
			e.Class, e.Reason, e.Reply = f.class, f.reason, r.reply(f)
		case r.state == idempotency.RecipientDead:
			e := add(r, event.Dead)
			e.Class, e.Reason, e.Reply = f.class, f.reason, r.reply(f)
		}
	}
	return out
}

// suppressions are the hard-bounced addresses the fate adds to the
// suppression lists.
func (it *item) suppressions() []Suppression {
	var out []Suppression
	for _, r := range it.rcpts {
		if r.fresh && r.state == idempotency.RecipientBounced && r.suppress {
			out = append(out, Suppression{
				Key:       SuppressionKey{Tenant: it.job.Tenant, Stream: stream(&it.job), Address: strings.ToLower(r.address)},
				MessageID: it.job.MessageID, Status: r.refusal.Enhanced})
		}
	}
	return out
}

// recorded marks the recipients' decisions as written; their replies
// were the recorded attempt's.
func (it *item) recorded() {
	for i := range it.rcpts {
		it.rcpts[i].fresh, it.rcpts[i].deferral = false, nil
	}
}

// truncateDiagnostic bounds a relay's reply text for an event.
func truncateDiagnostic(s string) string {
	const limit = 512
	if len(s) <= limit {
		return s
	}
	s = s[:limit]
	for len(s) > 0 && s[len(s)-1]&0xC0 == 0x80 {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0xC0 {
		s = s[:len(s)-1]
	}
	return s
}
