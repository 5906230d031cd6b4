package delivery

import (
	"cmp"
	"context"
	"math/rand/v2"
	"time"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/circuit"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/job"
)

// send runs one sending goroutine. A send may take the next job from in
// to chain behind its own (see offerNext): that job is delivered next, by
// this goroutine, on the session that has its envelope.
func (p *Pipeline) send(ctx context.Context, in <-chan *item, out chan<- *item) error {
	var next *follower
	for {
		f := next
		var it *item
		if f != nil {
			it = f.it
		} else {
			var ok bool
			if it, ok = <-in; !ok {
				return nil
			}
		}
		next = nil
		if f == nil || f.due {
			next = p.deliver(ctx, it, in, f)
		}
		it.decidedAt = p.cfg.NowFunc()
		it.finishRecipients()
		if ctx.Err() != nil {
			// Hard stop: the send may have been cut short; leave the record
			// unfinished so it is redelivered, and the one taken after it.
			next.hangUp()
			return ctx.Err()
		}
		select {
		case out <- it:
		case <-ctx.Done():
			next.hangUp()
			return ctx.Err()
		}
	}
}

// A follower is a job a send took from the queue to chain behind its own
// (see offerNext). Its goroutine delivers it next.
type follower struct {
	it *item
	// due: prepare let it on to a relay. When not, its outcome is set.
	due bool
	// chain is the session with its envelope on the wire, nil when the
	// session did not chain it: it is then delivered like any job.
	chain *chain
}

// A chain is a session that wrote a job's envelope behind the message
// before it (sender.Session.SendToThen), and the recipients it wrote: the
// job must go next on that session.
type chain struct {
	prov    *relayPool
	session Session
	pend    []*rcpt
	rcpts   []sender.Recipient
}

// ChainingSession is a Session that can write the next job's envelope
// behind a message (sender.Session.SendToThen); sessions without it send
// one job at a time.
type ChainingSession interface {
	SendToThen(ctx context.Context, j *job.Job, rcpts []sender.Recipient, then sender.Then) (sender.Result, bool, error)
}

// prepare decides what a job needs before a relay sees it: a job past its
// not_after or its priority's max age dies, one with no recipient left
// pending is finished, a template job is composed. It reports whether the
// job goes on to a relay; when not, its outcome is set (or, on a hard stop,
// left unfinished).
func (p *Pipeline) prepare(ctx context.Context, it *item) bool {
	now := p.cfg.NowFunc()
	priority := cmp.Or(it.job.Priority, job.PriorityNormal)
	limit := p.cfg.RetryLimits[priority]
	switch {
	case it.job.Expired(now):
		p.die(it, string(job.ReasonExpired), classExpired,
			"not_after "+it.job.NotAfter.UTC().Format(time.RFC3339)+" passed before sending")
		return false
	case now.Sub(firstSeen(it.msg)) > limit.MaxAge:
		p.die(it, deadletter.ReasonMaxAge, it.lastClass(), maxAgeText(priority, limit.MaxAge))
		return false
	}
	if len(it.pending()) == 0 {
		p.finishWithoutPending(it)
		return false
	}
	if !p.compose(ctx, it) {
		return false
	}
	if p.budgets != nil && it.attempt <= 1 {
		p.budgets.Earn(priority) // a first attempt earns a share of a retry
	}
	return true
}

// offerNext is the sender.Then of a send on prov's session: as the
// message ends it takes the next job from in, if one waits (a sender
// waiting on in would have had it first), and offers it to the session when
// it may go on the same relay now: prepared for a relay, one return path
// (sender.Chainable), the relay's circuit and send control letting one
// more send through and no other sender waiting for the relay's sessions.
// The job it took is returned through f, chained or not.
func (p *Pipeline) offerNext(ctx context.Context, in <-chan *item, prov *relayPool, f **follower) sender.Then {
	return func() (*job.Job, []sender.Recipient, bool) {
		var it *item
		select {
		case it = <-in:
		default:
		}
		if it == nil {
			return nil, nil, false
		}
		taken := &follower{it: it}
		*f = taken
		if perr := p.contain("preparing", it.msg, func() { taken.due = p.prepare(ctx, it) }); perr != nil {
			p.die(it, deadletter.ReasonInternalError, classInternal, perr.Error())
			return nil, nil, false
		}
		if !taken.due {
			return nil, nil, false
		}
		pend := it.pending()
		rcpts := p.envelope(it, pend)
		if !sender.Chainable(&it.job, rcpts) || !p.circuitAllows(ctx, prov.Name) || !prov.admitNext() {
			return nil, nil, false
		}
		taken.chain = &chain{prov: prov, pend: pend, rcpts: rcpts}
		return &it.job, rcpts, true
	}
}

// deliver sends one claimed job and sets its outcome. It walks the providers
// by priority, skipping open circuits; an auth failure moves on to the next
// provider without charging the job an attempt; a transient failure gets a
// few fast retries; what still fails is routed by its class. f is the job
// when a send before took it (prepared, and maybe chained); the job deliver
// returns is the one its own send took.
func (p *Pipeline) deliver(ctx context.Context, it *item, in <-chan *item, f *follower) (next *follower) {
	if f == nil && !p.prepare(ctx, it) {
		return nil
	}
	var carried *chain
	if f != nil {
		carried = f.chain
	}
	now := p.cfg.NowFunc()
	limit := p.cfg.RetryLimits[cmp.Or(it.job.Priority, job.PriorityNormal)]
	var (
		skip      map[string]bool // providers that refused our credentials in this attempt
		fast      int
		fastStart = now
	)
	for {
		var (
			prov    *relayPool
			session Session
			pend    []*rcpt
			rcpts   []sender.Recipient
		)
		if carried != nil {
			prov, session, pend, rcpts = carried.prov, carried.session, carried.pend, carried.rcpts
			carried = nil
		} else {
			var ok bool
			if prov, session, ok = p.pickProvider(ctx, skip); !ok {
				if ctx.Err() == nil {
					p.release(it)
				}
				return next
			}
			pend = it.pending()
			rcpts = p.envelope(it, pend)
		}
		sendCtx, span := p.startSend(ctx, it, prov.Name)
		start := p.cfg.NowFunc()
		var (
			err     error
			res     sender.Result
			chained bool
		)
		perr := p.contain("sending", it.msg, func() {
			cs, ok := session.(ChainingSession)
			if !ok || next != nil {
				res, err = session.SendTo(sendCtx, &it.job, rcpts)
				return
			}
			res, chained, err = cs.SendToThen(sendCtx, &it.job, rcpts, p.offerNext(ctx, in, prov, &next))
		})
		if perr != nil {
			// The session is in an unknown state: close it rather than
			// reuse it, and dead-letter the record rather than retry it
			// into the same panic. A job it took goes on its own.
			prov.discard(session)
			if next != nil {
				next.chain = nil
			}
			endSend(span, failure.Verdict{Class: failure.Unknown, Rule: classInternal}, false)
			p.die(it, deadletter.ReasonInternalError, classInternal, perr.Error())
			return next
		}
		if chained {
			next.chain.session = session // the session stays in use for it
		} else {
			if next != nil {
				next.chain = nil
			}
			prov.release(session)
		}
		deferred := p.applyResult(it, pend, res, prov.Name)
		switch {
		case err != nil:
		case deferred != nil:
			// Some recipients were refused for now: the job is retried
			// for them, like a failed send.
			err = deferred
		case len(res.Accepted) == 0 && len(res.Refused) > 0:
			// Every recipient was refused for good: the send failed as
			// its first refusal.
			err = res.Refused[0].Err
		}
		end := p.cfg.NowFunc()
		elapsed := end.Sub(start)
		v := p.cfg.Rules.Classify(err)
		endSend(span, v, err == nil)
		p.reportCircuit(ctx, prov.Name, v, err == nil)
		p.learn(prov, start, end, v, err == nil)
		it.provider = prov.Name
		if err == nil {
			it.outcome = idempotency.StatusSent
			p.metrics.attempts.WithLabelValues(prov.Name, "sent").Inc()
			p.metrics.sendSeconds.WithLabelValues("sent").Observe(elapsed.Seconds())
			p.metrics.publishToAccept.Observe(p.cfg.NowFunc().Sub(firstSeen(it.msg)).Seconds())
			return next
		}
		if ctx.Err() != nil {
			return next // hard stop; the caller leaves the record unfinished
		}
		it.verdict, it.errText = v, err.Error()
		p.metrics.attempts.WithLabelValues(prov.Name, string(v.Class)).Inc()
		p.metrics.sendSeconds.WithLabelValues(string(v.Class)).Observe(elapsed.Seconds())
		p.logger.Info("send failed", "message_id", it.job.MessageID, "attempt", it.attempt,
			"provider", prov.Name, "class", v.Class, "rule", v.Rule, "error", err, traceAttr(span))

		if v.Class == failure.Throttled {
			it.throttles++
		}
		switch v.Class {
		case failure.Permanent:
			it.outcome, it.class, it.reason = idempotency.StatusFailed, string(v.Class), deadletter.ReasonSMTPPermanent
			return next
		case failure.Auth:
			if skip == nil {
				skip = make(map[string]bool)
			}
			skip[prov.Name] = true
			next.unchain() // this goroutine is about to wait for another session
			continue
		case failure.Transient:
			// Fast retries are for blips of the relay or the network; a
			// message-level deferral (a full mailbox) will not clear in
			// milliseconds.
			if v.ProviderFault && fast < p.cfg.FastRetries && p.cfg.NowFunc().Sub(fastStart) < p.cfg.FastRetryBudget {
				// Full jitter: a blip seen by many senders at once must not
				// come back as one wave.
				wait := time.Duration(rand.Int64N(int64(p.cfg.FastRetryBase<<fast) + 1))
				fast++
				p.metrics.fastRetries.Inc()
				if !sleep(ctx, wait) {
					return next
				}
				next.unchain() // this goroutine is about to wait for another session
				continue
			}
		}
		p.scheduleRetry(it, v, limit, prov)
		return next
	}
}

// hangUp closes the session of f's chain, if any, on a hard stop: its
// envelope is on the wire, so the session is not given back for reuse.
func (f *follower) hangUp() {
	if f != nil && f.chain != nil {
		f.chain.prov.discard(f.chain.session)
	}
}

// unchain gives up f's chain before the job that took f tries again: it
// will wait for a session, and must not hold this one meanwhile (a relay
// with one connection would wait for itself). The session hangs up on the
// envelope it wrote, so the relay drops that transaction unsent, and goes
// back to its relay; f's job is then delivered like any other.
func (f *follower) unchain() {
	if f == nil || f.chain == nil {
		return
	}
	_ = f.chain.session.Close() // a hang-up: nothing to report
	f.chain.prov.release(f.chain.session)
	f.chain = nil
}

// learn feeds a send's outcome to the retry policy's inputs and to the
// provider's send control. A hard stop says nothing about the relay.
func (p *Pipeline) learn(prov *relayPool, start, end time.Time, v failure.Verdict, ok bool) {
	if v.Rule == failure.RuleCanceled {
		return
	}
	p.window.Observe(end, prov.Name, ok)
	if v.Class == failure.Throttled && v.ProviderFault {
		prov.throttled(end, v.RetryAfter)
	}
	if prov.control == nil {
		return
	}
	if cut := prov.control.Done(end, start, ok, v.Limit); cut != "" {
		prov.noteCut(Cut{Controller: cut, Reason: cutReason(v), At: end})
		p.metrics.decreases.WithLabelValues(prov.Name, cut).Inc()
		p.logger.Debug("relay throttled: slowing down", "provider", prov.Name, "controller", cut,
			"limit", prov.control.Limit(), "rate", prov.control.Rate())
	}
}

// pickProvider returns a provider of the best priority that has one whose
// circuit lets a send through and that skip does not exclude, with one of
// its sessions. Relays of that priority share the load; it waits while all
// of their connections are busy or their send controls hold sends back: a
// busy primary is not a reason to fail over to a backup relay.
func (p *Pipeline) pickProvider(ctx context.Context, skip map[string]bool) (*relayPool, Session, bool) {
	for i := 0; i < len(p.providers); {
		prio := p.providers[i].Priority
		var group []*relayPool
		for ; i < len(p.providers) && p.providers[i].Priority == prio; i++ {
			if prov := p.providers[i]; !skip[prov.Name] && p.circuitAllows(ctx, prov.Name) {
				group = append(group, prov)
			}
		}
		if len(group) == 0 {
			continue
		}
		if p.group != nil {
			for _, prov := range group {
				if prov.control != nil {
					prov.control.SetMembers(p.cfg.NowFunc(), p.group.SendingMembers())
				}
			}
		}
		s, prov, ok := acquireAny(ctx, group)
		return prov, s, ok
	}
	return nil, nil, false
}

// circuitAllows reports whether provider's circuit lets a send through; a
// failed check skips the provider.
func (p *Pipeline) circuitAllows(ctx context.Context, provider string) bool {
	if p.breakers == nil {
		return true
	}
	d, err := p.breakers.Allow(ctx, provider)
	if err != nil {
		p.logger.Debug("circuit check failed; skipping provider", "provider", provider, "error", err)
		return false
	}
	return d.Allowed
}

// reportCircuit tells the breakers how a send went. A message-level failure
// (a rejected recipient) shows the relay answering, so it counts as a
// success of the relay. A throttle (the relay asks us to slow down: 421/450
// 4.7.x, rate texts, a connection cap at the greeting) is reported as
// circuit.Throttle, which never counts toward opening: the relay is still
// accepting mail, and learn hands the throttle to the send control, which
// paces and narrows concurrency. What does count are the faults of a relay
// that is down or refuses us, as the failure table marks them: refused or
// lost connections, timeouts, TLS, auth, and 421 without a throttling sign
// ("service not available" at the greeting or later) or 4.3.x, the relay's
// own trouble. The breakers open on those only when the fleet's successes
// in the window are near zero.
func (p *Pipeline) reportCircuit(ctx context.Context, provider string, v failure.Verdict, ok bool) {
	if p.breakers == nil || ctx.Err() != nil {
		return
	}
	var outcome circuit.Outcome
	switch {
	case ok || !v.ProviderFault:
		outcome = circuit.Success
	case v.Class == failure.Throttled:
		outcome = circuit.Throttle
	case v.Class == failure.Auth:
		outcome = circuit.AuthFailure
	case v.Timeout:
		outcome = circuit.TimeoutFailure
	default:
		outcome = circuit.Failure
	}
	if err := p.breakers.Report(ctx, provider, outcome, string(v.Class)); err != nil {
		p.metrics.dependencyErrors.WithLabelValues(opCircuitReport).Inc()
		p.logger.Debug("circuit report failed", "provider", provider, "error", err)
	}
}

// scheduleRetry routes a retryable failure to a delay tier, or makes the job
// dead when it has used its attempts or its age. The policy decides the
// delay from the failure and the load; a retry budget that is empty adds
// the wait for its refill; the result is rounded up to a tier. A job whose
// age runs out while it waits in a tier dies when it comes back.
func (p *Pipeline) scheduleRetry(it *item, v failure.Verdict, limit RetryLimit, prov *relayPool) {
	next := it.attempt + 1
	if next > limit.MaxAttempts {
		p.die(it, deadletter.ReasonMaxAttempts, string(v.Class), it.errText)
		return
	}
	now := p.cfg.NowFunc()
	if now.Sub(firstSeen(it.msg)) > limit.MaxAge {
		// The last failure stays in the text: it is why the job is not sent.
		p.die(it, deadletter.ReasonMaxAge, string(v.Class),
			maxAgeText(cmp.Or(it.job.Priority, job.PriorityNormal), limit.MaxAge)+" (last failure: "+it.errText+")")
		return
	}
	successRate, _ := p.window.Rate(now, prov.Name)
	d := p.cfg.Policy.Decide(adaptive.Inputs{
		Class:                 v.Class,
		Attempt:               it.attempt,
		Throttles:             it.throttles,
		RetryAfter:            v.RetryAfter,
		Lag:                   p.lag(),
		SuccessRate:           successRate,
		ProviderCooldownUntil: prov.cooldown(),
		Now:                   now,
	})
	if !d.Retry {
		// The classes routed here are retryable under every policy; a
		// policy that still refuses is obeyed rather than overruled.
		it.outcome, it.class, it.reason = idempotency.StatusFailed, string(v.Class), deadletter.ReasonSMTPPermanent
		return
	}
	delay := d.Delay
	if v.Class == failure.Throttled && v.ProviderFault && delay < p.cfg.Tiers[0] && it.holds < maxThrottleHolds {
		// The relay asked us to slow down for less than the shortest tier:
		// the job waits in the worker, in its place, and the send control
		// paces it, rather than going round a delay topic to the back of
		// the jobs topic (which would round a 1 s hint up to 5 s and queue
		// it behind the whole backlog: the long tail of a throttled burst).
		// Like a release, the wait is the relay's pacing, not an attempt
		// at the message, so it is not charged one, nor a retry token (the
		// send control, not the budget, paces it); after
		// maxThrottleHolds in a row the job takes the delay tiers, which
		// charge both, so a relay that throttles for ever cannot keep a
		// job in the worker.
		p.metrics.backoffDelay.WithLabelValues(string(v.Class), d.Reason).Observe(delay.Seconds())
		it.holds++
		it.outcome, it.class, it.nextAttempt = idempotency.StatusRetrying, string(v.Class), it.attempt
		it.releaseAt, it.reentry = now.Add(delay), reentryThrottled
		return
	}
	if p.budgets != nil {
		priority := cmp.Or(it.job.Priority, job.PriorityNormal)
		if ok, until := p.budgets.Take(now, priority); !ok {
			delay = max(delay, until.Sub(now))
			p.metrics.budgetWaits.WithLabelValues(string(priority)).Inc()
		}
	}
	p.metrics.backoffDelay.WithLabelValues(string(v.Class), d.Reason).Observe(delay.Seconds())
	it.outcome, it.class, it.nextAttempt = idempotency.StatusRetrying, string(v.Class), next
	tier := p.cfg.Tiers.Pick(delay)
	it.copy = &retry.Copy{
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
	}
}

// maxThrottleHolds is how many short throttles in a row a job waits out in
// the worker before it goes to a delay tier.
const maxThrottleHolds = 3

// release hands a claimed job back without charging an attempt, because no
// provider can take mail now; it is claimed again when a circuit half-opens.
func (p *Pipeline) release(it *item) {
	wait := p.cfg.RecheckInterval
	if p.breakers != nil {
		if at, ok := p.breakers.NextProbeAt(); ok {
			wait = max(at.Sub(p.cfg.NowFunc()), 0)
		}
	}
	wait = min(max(wait, 50*time.Millisecond), p.cfg.MaxReleaseWait)
	it.outcome, it.nextAttempt = idempotency.StatusRetrying, it.attempt
	it.releaseAt, it.reentry = p.cfg.NowFunc().Add(wait), reentryRelease
	p.metrics.releases.Inc()
}

// maxAgeText is the error of a job dead for its age: it names the limit and
// the priority it comes from (a job without one counts as normal), since the
// limits differ per priority.
func maxAgeText(priority job.Priority, maxAge time.Duration) string {
	return "older than the " + maxAge.String() + " max age of " + string(priority) + " priority mail"
}

func (p *Pipeline) die(it *item, reason, class, errText string) {
	it.outcome, it.reason, it.class, it.errText = idempotency.StatusDead, reason, class, errText
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

// sleep waits d or until ctx ends; it reports whether the wait completed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
