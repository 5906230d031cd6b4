package redrive

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/reaper"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/job"
)

// runner is one Run: what it has seen and done.
type runner struct {
	cfg     Config
	opts    Options
	pace    pacer
	seen    map[string]bool // Message-IDs this run took
	runLife int64
	sum     Summary
}

// redrive takes one batch (at most the burst) along the replay path:
// reopen the rows, lift the suppressions, wait for the rate, write the
// redriven events, publish.
func (w *runner) redrive(ctx context.Context, batch []letter) error {
	if len(batch) == 0 {
		return nil
	}
	defer w.progress()
	var (
		resets []idempotency.Reset
		took   []letter
	)
	for _, l := range batch {
		switch {
		case l.jobErr != nil:
			w.sum.SkippedInvalid++
			if w.opts.Invalid != nil {
				w.opts.Invalid(l.DeadLetter, l.jobErr)
			}
		case w.seen[l.job.MessageID]:
			// Reopened earlier in this run: pending now, like a row an
			// earlier re-drive reopened.
			w.sum.SkippedNotReplayable++
		default:
			w.seen[l.job.MessageID] = true
			resets = append(resets, idempotency.Reset{MessageID: l.job.MessageID, PayloadHash: l.job.Hash(), Payload: l.msg.Value})
			took = append(took, l)
		}
	}
	if len(resets) == 0 {
		return nil
	}
	reopened, err := w.cfg.Store.Reopen(ctx, resets)
	if err != nil {
		return err
	}
	lives := make(map[string]int64, len(reopened))
	for _, r := range reopened {
		lives[r.MessageID] = r.Life
	}
	var (
		send []letter
		ids  []string
	)
	for _, l := range took {
		if _, ok := lives[l.job.MessageID]; ok {
			send = append(send, l)
			ids = append(ids, l.job.MessageID)
		} else {
			w.sum.SkippedNotReplayable++
		}
	}
	if len(send) == 0 {
		return nil
	}
	if w.cfg.Lists != nil {
		// Re-driving says the failure was wrong (a relay misconfigured, a
		// mailbox since created): the addresses it put on the suppression
		// lists come off, or the mail would be suppressed. Entries of any
		// other origin (complaints, reports, operators) stay.
		n, err := w.cfg.Lists.LiftFromMessages(ctx, ids, suppression.SourceRelayRefusal)
		if err != nil {
			return unpublished(ids, err)
		}
		w.sum.Unsuppressed += n
	}
	if err := w.pace.wait(ctx, len(send)); err != nil {
		return unpublished(ids, err)
	}
	now := w.cfg.Clock.Now()
	if w.cfg.Events != nil {
		var events []event.Event
		for _, l := range send {
			life := lives[l.job.MessageID]
			if life == 0 {
				life = w.runLife
			}
			events = appendRedriven(events, l, life, w.opts, now)
		}
		// Before the records: a consumer reads the redriven event before
		// the new life's, which share its partition.
		if err := w.cfg.Events.Publish(ctx, events...); err != nil {
			return unpublished(ids, err)
		}
		w.sum.Events += len(events)
	}
	msgs := make([]kafka.Message, len(send))
	for i, l := range send {
		msgs[i] = RedriveMessage(l.msg, now)
	}
	if err := w.cfg.Publisher.PublishRaw(ctx, msgs); err != nil {
		return unpublished(ids, err)
	}
	w.sum.Redriven += len(msgs)
	return nil
}

func (w *runner) progress() {
	if w.opts.Progress != nil {
		w.opts.Progress(w.sum)
	}
}

// unpublished is the error of a batch whose rows were reopened but whose
// records were not published: nothing is lost, the workers' reaper
// publishes the rows' stored records once the replay grace has passed, but
// the operator should know which.
func unpublished(ids []string, err error) error {
	return fmt.Errorf("the rows of %s were reset to pending but their records were not published; "+
		"the workers' reaper publishes them again after %s (postctl status shows them): %w",
		strings.Join(ids, " "), reaper.DefaultReplayGrace, err)
}

// appendRedriven appends the redriven events of l's job, one per
// recipient, in the life the re-drive started.
func appendRedriven(dst []event.Event, l letter, life int64, o Options, at time.Time) []event.Event {
	j := &l.job
	stream := event.StreamTransactional
	if j.Priority == job.PriorityBulk {
		stream = event.StreamBulk
	}
	for i, addr := range j.Recipients() {
		dst = append(dst, event.Event{
			Schema: event.Schema, ID: event.NewLifeID(j.MessageID, life, i, event.Redriven, 0), Type: event.Redriven,
			At: at.UTC(), MessageID: j.MessageID, Tenant: j.Tenant, Stream: stream, Recipient: addr, RecipientIndex: i,
			// What it was dead-lettered for: the reason and class it is
			// re-driven from.
			Reason: l.Reason, Class: l.Class, Metadata: j.Metadata, Note: o.Note, Actor: o.Actor,
		})
	}
	return dst
}
