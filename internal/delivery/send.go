package delivery

import (
	"cmp"
	"context"
	"math/rand/v2"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/circuit"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/job"
)

// send runs one sending goroutine. A send may take the next job from in
// to chain behind its own (see offerNext): that job is delivered next, by
// this goroutine, on the session that has its envelope.
func (p *Pipeline) send(ctx context.Context, in <-chan *item, out chan<- decided) error {
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
		var decision fate
		if f == nil || f.due {
			decision, next = p.deliver(ctx, it, in, f)
		} else {
			decision = f.fate
		}
		d := decided{it, it.settleAttempt(decision, p.cfg.NowFunc())}
		if ctx.Err() != nil {
			// Hard stop: the send may have been cut short; leave the record
			// unfinished so it is redelivered, and the one taken after it.
			next.hangUp()
			return ctx.Err()
		}
		select {
		case out <- d:
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
	// due: prepare let it on to a relay. When not, fate is its fate.
	due  bool
	fate fate
	// chain is the session with its envelope on the wire, nil when the
	// session did not chain it: it is then delivered like any job.
	chain *chain
}

// A chain is a session that wrote a job's envelope behind the message
// before it (sender.Session.SendToThen), and the recipients it wrote: the
// job must go next on that session.
type chain struct {
	relay   *relayPool
	session Session
	pend    []*rcpt
	rcpts   []sender.Recipient
}

// prepare readies a job for a relay: it decides the fate of a job that
// does not go on (beforeRelay) and composes a template job. It reports
// whether the job goes on to a relay; when not, it returns the job's fate
// (undecided on a hard stop).
func (p *Pipeline) prepare(ctx context.Context, it *item) (fate, bool) {
	priority := cmp.Or(it.job.Priority, job.PriorityNormal)
	if f, ok := p.beforeRelay(it, p.cfg.RetryLimits[priority]); !ok {
		return f, false
	}
	if f, ok := p.compose(ctx, it); !ok {
		return f, false
	}
	if p.budgets != nil && it.attempt <= 1 {
		p.budgets.Earn(priority) // a first attempt earns a share of a retry
	}
	return fate{}, true
}

// offerNext is the sender.Then of a send on relay's session: as the
// message ends it takes the next job from in, if one waits (a sender
// waiting on in would have had it first), and offers it to the session when
// it may go on the same relay now: prepared for a relay, one return path
// (sender.Chainable), the relay's circuit and send control letting one
// more send through and no other sender waiting for the relay's sessions.
// The job it took is returned through f, chained or not.
func (p *Pipeline) offerNext(ctx context.Context, in <-chan *item, relay *relayPool, f **follower) sender.Then {
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
		if perr := p.contain("preparing", it.msg, func() { taken.fate, taken.due = p.prepare(ctx, it) }); perr != nil {
			taken.fate, taken.due = panicked(perr, ""), false
			return nil, nil, false
		}
		if !taken.due {
			return nil, nil, false
		}
		pend := it.pending()
		rcpts := p.envelope(it, pend)
		if !sender.Chainable(&it.job, rcpts) || !p.circuitAllows(ctx, relay.Name) || !relay.admitNext() {
			return nil, nil, false
		}
		taken.chain = &chain{relay: relay, pend: pend, rcpts: rcpts}
		return &it.job, rcpts, true
	}
}

// attemptLog is what one attempt at a job has been through so far: the
// relays that refused our credentials, the resends made, and the last
// send and its failure, which its fate records.
type attemptLog struct {
	skip        map[string]bool // relays that refused our credentials in this attempt
	resends     int
	resendStart time.Time
	relay       string
	errText     string
	reply       *event.Reply
}

// deliver sends one claimed job and returns its fate. It walks the
// relays by priority, skipping open circuits; an auth failure moves on
// to the next relay without charging the job an attempt; a transient
// failure gets a few resends; what still fails is routed by its class
// (afterFailedSend). f is the job when a send before took it (prepared,
// and maybe chained); the job deliver returns is the one its own send took.
func (p *Pipeline) deliver(ctx context.Context, it *item, in <-chan *item, f *follower) (_ fate, next *follower) {
	if f == nil {
		if early, ok := p.prepare(ctx, it); !ok {
			return early, nil
		}
	}
	var carried *chain
	if f != nil {
		carried = f.chain
	}
	now := p.cfg.NowFunc()
	limit := p.cfg.RetryLimits[cmp.Or(it.job.Priority, job.PriorityNormal)]
	tried := attemptLog{resendStart: now}
	for {
		var (
			relay   *relayPool
			session Session
			pend    []*rcpt
			rcpts   []sender.Recipient
		)
		if carried != nil {
			relay, session, pend, rcpts = carried.relay, carried.session, carried.pend, carried.rcpts
			carried = nil
		} else {
			var ok bool
			if relay, session, ok = p.pickRelay(ctx, tried.skip); !ok {
				if ctx.Err() != nil {
					return fate{}, next // undecided: a hard stop
				}
				return p.handBack(tried.relay, tried.errText), next
			}
			pend = it.pending()
			rcpts = p.envelope(it, pend)
		}
		sendCtx, span := p.startSend(ctx, it, relay.Name)
		start := p.cfg.NowFunc()
		perr, err := p.sendOn(ctx, sendCtx, it, in, relay, session, pend, rcpts, &next)
		if perr != nil {
			endSend(span, failure.Verdict{Class: failure.Unknown, Rule: classInternal}, false)
			return panicked(perr, tried.relay), next
		}
		end := p.cfg.NowFunc()
		elapsed := end.Sub(start)
		v := p.cfg.Rules.Classify(err)
		endSend(span, v, err == nil)
		p.reportCircuit(ctx, relay.Name, v, err == nil)
		p.learn(relay, start, end, v, err == nil)
		tried.relay = relay.Name
		if err == nil {
			p.metrics.attempts.WithLabelValues(relay.Name, "sent").Inc()
			p.metrics.sendSeconds.WithLabelValues("sent").Observe(elapsed.Seconds())
			p.metrics.publishToAccept.Observe(p.cfg.NowFunc().Sub(firstSeen(it.msg)).Seconds())
			return sentFate(tried.relay, tried.errText), next
		}
		if ctx.Err() != nil {
			return fate{}, next // undecided: a hard stop; the caller leaves the record unfinished
		}
		tried.errText, tried.reply = err.Error(), sendReply(err)
		p.metrics.attempts.WithLabelValues(relay.Name, string(v.Class)).Inc()
		p.metrics.sendSeconds.WithLabelValues(string(v.Class)).Observe(elapsed.Seconds())
		p.logger.Info("send failed", "message_id", it.job.MessageID, "attempt", it.attempt,
			"relay", relay.Name, "class", v.Class, "rule", v.Rule, "error", err, traceAttr(span))
		if v.Class == failure.Throttled {
			it.throttles++
		}
		switch again, cut := p.tryAgain(ctx, v, relay, &tried); {
		case cut:
			return fate{}, next // a hard stop during the wait
		case again:
			next.unchain() // this goroutine is about to wait for another session
			continue
		}
		return p.afterFailedSend(it, v, tried.errText, tried.reply, limit, relay), next
	}
}

// sendOn makes one send of it on relay's session: to the recipients pend,
// whose envelope is rcpts, taking the next job from in behind it when the
// session can chain (offerNext; the job it took is returned in *next). It
// returns a panic of the session (which is then discarded), or why the
// send failed, counting a recipient refused for now as a failure of the
// send and a send every recipient of which was refused for good as failed
// by its first refusal.
func (p *Pipeline) sendOn(ctx, sendCtx context.Context, it *item, in <-chan *item, relay *relayPool, session Session,
	pend []*rcpt, rcpts []sender.Recipient, next **follower) (perr *panicError, err error) {
	var (
		res     sender.Result
		chained bool
	)
	perr = p.contain("sending", it.msg, func() {
		cs, ok := session.(ChainingSession)
		if !ok || *next != nil {
			res, err = session.SendTo(sendCtx, &it.job, rcpts)
			return
		}
		res, chained, err = cs.SendToThen(sendCtx, &it.job, rcpts, p.offerNext(ctx, in, relay, next))
	})
	if perr != nil {
		// The session is in an unknown state: close it rather than reuse
		// it, and dead-letter the record rather than retry it into the
		// same panic. A job it took goes on its own.
		relay.discard(session)
		if *next != nil {
			(*next).chain = nil
		}
		return perr, nil
	}
	if chained {
		(*next).chain.session = session // the session stays in use for it
	} else {
		if *next != nil {
			(*next).chain = nil
		}
		relay.putBack(session)
	}
	deferred := p.applyResult(it, pend, res, relay.Name)
	switch {
	case err != nil:
	case deferred != nil:
		// Some recipients were refused for now: the job is retried for
		// them, like a failed send.
		err = deferred
	case len(res.Accepted) == 0 && len(res.Refused) > 0:
		// Every recipient was refused for good: the send failed as its
		// first refusal.
		err = res.Refused[0].Err
	}
	return nil, err
}

// tryAgain decides whether a failed send is tried again within the
// attempt: an auth failure on the next relay (the one that refused us
// is skipped), a blip of the relay or the network (a transient relay
// fault) after a short, jittered wait, a few times within a budget. cut
// reports a hard stop during that wait.
func (p *Pipeline) tryAgain(ctx context.Context, v failure.Verdict, relay *relayPool, tried *attemptLog) (again, cut bool) {
	switch v.Class {
	case failure.Auth:
		if tried.skip == nil {
			tried.skip = make(map[string]bool)
		}
		tried.skip[relay.Name] = true
		return true, false
	case failure.Transient:
		// Resends are for blips of the relay or the network; a
		// message-level deferral (a full mailbox) will not clear in
		// milliseconds.
		if !v.RelayFault || tried.resends >= p.cfg.Resends || p.cfg.NowFunc().Sub(tried.resendStart) >= p.cfg.ResendBudget {
			return false, false
		}
		// Full jitter: a blip seen by many senders at once must not come
		// back as one wave.
		wait := time.Duration(rand.Int64N(int64(p.cfg.ResendBase<<tried.resends) + 1))
		tried.resends++
		p.metrics.resends.Inc()
		if backoff.Sleep(ctx, wait) != nil {
			return false, true
		}
		return true, false
	}
	return false, false
}

// hangUp closes the session of f's chain, if any, on a hard stop: its
// envelope is on the wire, so the session is not given back for reuse.
func (f *follower) hangUp() {
	if f != nil && f.chain != nil {
		f.chain.relay.discard(f.chain.session)
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
	f.chain.relay.putBack(f.chain.session)
	f.chain = nil
}

// learn feeds a send's result to the retry policy's inputs and to the
// relay's send control. A hard stop says nothing about the relay.
func (p *Pipeline) learn(relay *relayPool, start, end time.Time, v failure.Verdict, ok bool) {
	if v.Rule == failure.RuleCanceled {
		return
	}
	p.window.Observe(end, relay.Name, ok)
	if v.Class == failure.Throttled && v.RelayFault {
		relay.throttled(end, v.RetryAfter)
	}
	if relay.control == nil {
		return
	}
	if cut := relay.control.Done(end, start, ok, v.Limit); cut != "" {
		relay.noteCut(Cut{Controller: cut, Reason: cutReason(v), At: end})
		p.metrics.decreases.WithLabelValues(relay.Name, cut).Inc()
		p.logger.Debug("relay throttled: slowing down", "relay", relay.Name, "controller", cut,
			"limit", relay.control.Limit(), "rate", relay.control.Rate())
	}
}

// pickRelay returns a relay of the best priority that has one whose
// circuit lets a send through and that skip does not exclude, with one of
// its sessions. Relays of that priority share the load; it waits while all
// of their connections are busy or their send controls hold sends back: a
// busy primary is not a reason to fail over to a backup relay.
func (p *Pipeline) pickRelay(ctx context.Context, skip map[string]bool) (*relayPool, Session, bool) {
	for i := 0; i < len(p.relays); {
		prio := p.relays[i].Priority
		var group []*relayPool
		for ; i < len(p.relays) && p.relays[i].Priority == prio; i++ {
			if relay := p.relays[i]; !skip[relay.Name] && p.circuitAllows(ctx, relay.Name) {
				group = append(group, relay)
			}
		}
		if len(group) == 0 {
			continue
		}
		if p.group != nil {
			for _, relay := range group {
				if relay.control != nil {
					relay.control.SetMembers(p.cfg.NowFunc(), p.group.SendingMembers())
				}
			}
		}
		s, relay, ok := acquireAny(ctx, group)
		return relay, s, ok
	}
	return nil, nil, false
}

// circuitAllows reports whether relay's circuit lets a send through; a
// failed check skips the relay.
func (p *Pipeline) circuitAllows(ctx context.Context, relay string) bool {
	if p.breakers == nil {
		return true
	}
	d, err := p.breakers.Allow(ctx, relay)
	if err != nil {
		p.logger.Debug("circuit check failed; skipping relay", "relay", relay, "error", err)
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
func (p *Pipeline) reportCircuit(ctx context.Context, relay string, v failure.Verdict, ok bool) {
	if p.breakers == nil || ctx.Err() != nil {
		return
	}
	var result circuit.SendResult
	switch {
	case ok || !v.RelayFault:
		result = circuit.Success
	case v.Class == failure.Throttled:
		result = circuit.Throttle
	case v.Class == failure.Auth:
		result = circuit.AuthFailure
	case v.Timeout:
		result = circuit.TimeoutFailure
	default:
		result = circuit.Failure
	}
	if err := p.breakers.Report(ctx, relay, result, string(v.Class)); err != nil {
		p.metrics.dependencyErrors.WithLabelValues(opCircuitReport).Inc()
		p.logger.Debug("circuit report failed", "relay", relay, "error", err)
	}
}
