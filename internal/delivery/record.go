package delivery

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/delay"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/retry"
)

// record takes the senders' decided items in batches and settles them, at
// most one batch per BatchLinger: a batch that comes sooner than that after
// the last one waits out the rest of it to fill. A fate's row carries the
// time its attempt ended (fate.decidedAt), so the wait delays no timestamp;
// what it saves is a store transaction and an events request per handful
// of mails at a steady moderate load, when each would otherwise carry one
// or two. Under full load a settle takes longer than the linger and
// nothing waits; an idle pipeline's first mail goes at once.
func (p *Pipeline) record(ctx context.Context, src Source, in <-chan decided, delays *delay.Queue[*item]) error {
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	var last time.Time
	for {
		first, ok := <-in
		if !ok {
			return nil
		}
		batch := []decided{first}
		due := last.Add(p.cfg.BatchLinger)
	fill:
		for len(batch) < p.cfg.BatchSize {
			// What is ready joins at once; only an empty queue waits,
			// and only until the batch is due.
			select {
			case d, ok := <-in:
				if !ok {
					break fill
				}
				batch = append(batch, d)
				continue
			default:
			}
			wait := time.Until(due)
			if wait <= 0 {
				break
			}
			linger.Reset(wait)
			select {
			case d, ok := <-in:
				linger.Stop()
				if !ok {
					break fill
				}
				batch = append(batch, d)
			case <-linger.C:
				break fill
			case <-ctx.Done():
				linger.Stop()
				break fill
			}
		}
		last = time.Now()
		if err := p.settle(ctx, src, batch, delays); err != nil {
			return err
		}
	}
}

// settle applies the fates of a batch of decided items (fate.go), in one
// switch over the fate: it gathers what each fate writes, makes the writes
// (write), then feeds the waiting records back to intake and marks the
// others done, so their offsets may be committed.
func (p *Pipeline) settle(ctx context.Context, src Source, batch []decided, delays *delay.Queue[*item]) error {
	var (
		w   writes
		now = p.cfg.NowFunc()
	)
	if p.events != nil {
		lentEvents := p.eventBufs.get(len(batch)) // most mails have one recipient
		w.events = (*lentEvents)[:0]
		// appendEvents may outgrow the lent array: what goes back is the
		// slice as it ended.
		defer func() { *lentEvents = w.events; p.eventBufs.put(lentEvents) }()
	}
	for _, d := range batch {
		it, f := d.it, d.fate
		switch f.kind {
		case fateRejected:
			w.letters = append(w.letters, p.letter(it, f.reason, f.class, f.errText))
			if id := rejectedID(it); id != "" {
				w.rejections = append(w.rejections, idempotency.Rejection{MessageID: id, PayloadHash: rawHash(it.msg.Value),
					Reason: f.reason, Error: f.errText, EnqueuedAt: firstSeen(it.msg)})
			}
			p.logger.Warn("rejected record",
				"topic", it.msg.Topic, "partition", it.msg.Partition, "offset", it.msg.Offset,
				"reason", f.reason, "error", f.errText, traceAttr(it.span))
		case fateConflict:
			w.letters = append(w.letters, p.letter(it, deadletter.ReasonMessageIDConflict, classConflict,
				"Message-ID "+it.job.MessageID+" was already used for a different payload"))
			w.conflicts = append(w.conflicts, it.job.MessageID)
			p.logger.Warn("message-id conflict", "message_id", it.job.MessageID,
				"topic", it.msg.Topic, "partition", it.msg.Partition, "offset", it.msg.Offset, traceAttr(it.span))
		case fateDuplicate, fateStale, fateBusy:
			// Nothing to write: done, or waiting for the lease.
		case fateSent, fateSuppressed, fateHeld, fateHandedBack:
			// The row, below, and nothing else.
		case fateFailed, fateDead:
			w.letters = append(w.letters, p.letter(it, f.reason, f.class, f.errText))
		case fateRetried:
			w.copies = append(w.copies, *f.copy)
		}
		if !f.recorded() {
			continue
		}
		if p.events != nil {
			w.events = p.appendEvents(w.events, it, f, now)
		}
		w.suppress = append(w.suppress, it.suppressions()...)
		w.recorded = append(w.recorded, d)
	}
	if len(w.recorded) > 0 {
		lentOuts := p.fateRows.get(len(w.recorded))
		defer p.fateRows.put(lentOuts)
		w.outs = *lentOuts
		for i, d := range w.recorded {
			w.outs[i] = p.fateRow(d, now)
		}
	}
	if err := p.write(ctx, &w); err != nil {
		return err
	}
	for _, d := range batch {
		d.it.recorded()
		if cause := d.fate.reentryCause(); cause != "" {
			// Its next fate is decided when it is claimed again.
			p.metrics.reentries.WithLabelValues(cause).Inc()
			delays.Add(d.fate.wakeAt, d.it)
			continue
		}
		p.done(src, d)
	}
	return nil
}

// writes are what the fates of a batch write, gathered by settle.
type writes struct {
	letters    []deadletter.Letter
	copies     []retry.Copy
	events     []event.Event
	suppress   []Suppression
	rejections []idempotency.Rejection
	conflicts  []string
	// recorded are the items whose fate is written to their rows, outs.
	recorded []decided
	outs     []idempotency.Fate
}

// write makes w's writes, one round trip per kind, in an order that lets a
// crash anywhere redeliver the record without losing anything: dead
// letters and retry copies are durable before the row says where the job
// went (the claim dedupes the copies), and events go out before the state
// they report (written again, with the same IDs, on redelivery). Only once
// the fate is written (or lost) may the lease lapse.
func (p *Pipeline) write(ctx context.Context, w *writes) error {
	start := time.Now()
	if len(w.letters) > 0 {
		if err := p.retry(ctx, opDeadLetter, func(ctx context.Context) error { return p.dlq.Publish(ctx, w.letters...) }); err != nil {
			return err
		}
	}
	if len(w.copies) > 0 {
		if err := p.retry(ctx, opRetryPublish, func(ctx context.Context) error { return p.retries.Publish(ctx, w.copies...) }); err != nil {
			return err
		}
	}
	if len(w.events) > 0 {
		if err := p.retry(ctx, opEvents, func(ctx context.Context) error { return p.events.Publish(ctx, w.events...) }); err != nil {
			return err
		}
	}
	if len(w.suppress) > 0 && p.suppressions != nil {
		if err := p.retry(ctx, opSuppress, func(ctx context.Context) error { return p.suppressions.Suppress(ctx, w.suppress) }); err != nil {
			return err
		}
	}
	if len(w.rejections) > 0 {
		if err := p.retry(ctx, opRecordRejected, func(ctx context.Context) error { return p.store.RecordRejected(ctx, w.rejections) }); err != nil {
			return err
		}
	}
	if len(w.conflicts) > 0 {
		if err := p.retry(ctx, opNoteConflicts, func(ctx context.Context) error { return p.store.NoteConflicts(ctx, w.conflicts) }); err != nil {
			return err
		}
	}
	if len(w.outs) == 0 {
		return nil
	}
	var lost []string
	if err := p.retry(ctx, opRecord, func(ctx context.Context) (err error) {
		lost, err = p.store.Record(ctx, w.outs)
		return err
	}); err != nil {
		return err
	}
	if p.leases != nil {
		for _, d := range w.recorded {
			p.leases.Drop(d.it.job.MessageID, d.it.version)
		}
	}
	if p.tracing() {
		items := make([]*item, len(w.recorded))
		for i, d := range w.recorded {
			items[i] = d.it
		}
		p.traceRoundTrip(ctx, "record", items, start, time.Now(), func(i int) []attribute.KeyValue {
			return []attribute.KeyValue{attrFate.String(string(w.outs[i].Status))}
		})
	}
	if len(lost) > 0 {
		// Another worker took the row over (our lease ran out). Its claim
		// decides the job's fate; ours is finished either way.
		p.logger.Warn("fates lost a compare-and-set", "count", len(lost), "first_message_id", lost[0])
	}
	return nil
}

// fateRow is the row write of a recorded item's fate.
func (p *Pipeline) fateRow(d decided, now time.Time) idempotency.Fate {
	it, f := d.it, d.fate
	attempt := it.attempt // unchanged for a hold or a hand-back
	if f.kind == fateRetried {
		attempt = f.copy.Attempt
	}
	o := idempotency.Fate{
		MessageID:  it.job.MessageID,
		Version:    it.version,
		Status:     f.status(),
		Attempt:    attempt,
		Provider:   f.relay,
		ErrorClass: f.class,
		Error:      f.errText,
		Recipients: it.recipientFates(f.relay),
		Stream:     stream(&it.job),
		Metadata:   it.job.Metadata,
		At:         f.decidedAt,
	}
	if it.composed != nil {
		o.Template, o.TemplateVersion, o.TemplateWhy = it.composed.Name, it.composed.Version, it.composed.Why
	}
	if !p.cfg.NoConfirm && it.countFresh(idempotency.RecipientAccepted) > 0 {
		o.ConfirmBy = now.Add(p.cfg.ConfirmWindow)
	}
	return o
}

func (p *Pipeline) letter(it *item, reason, class, errText string) deadletter.Letter {
	return deadletter.Letter{
		Key:       it.msg.Key,
		Value:     it.msg.Value,
		Headers:   it.msg.Headers,
		Topic:     it.msg.Topic,
		Partition: it.msg.Partition,
		Offset:    it.msg.Offset,
		Reason:    reason,
		Class:     class,
		Error:     errText,
		Attempt:   it.attempt,
	}
}

// done marks d's record done, which lets the consumer commit its offset,
// and ends its deliver span.
func (p *Pipeline) done(src Source, d decided) {
	label := d.fate.doneLabel()
	src.MarkDone(d.it.msg)
	p.metrics.inFlight.Dec()
	p.metrics.records.WithLabelValues(label).Inc()
	endDeliver(d.it, d.fate, label)
}
