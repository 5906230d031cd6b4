// Package outcome applies what comes back after a relay took a mail: the
// delivery reports and complaints that return to a recipient's return path
// or arrive as a provider's signed event, and the silence of mail nobody
// reported on within its confirmation window. For each report it finds the
// recipient (by the return path's verified token, or for a signed event by
// Message-ID and address), decides the transition with the shared rule set,
// moves the recipient's row on by compare-and-set, and only then, for a
// transition that won, adds hard bounces and complaints to the suppression
// lists and writes the event (in that order: the event's reader finds the
// address suppressed): a report that loses to a concurrent one
// announces nothing, and is decided again on the state the winner left. The
// compare-and-set writes what the transition owes (its event and suppression
// entry) to an outbox in the same transaction; the applier deletes the entry
// once it has published, and Run drains the entries an applier left behind
// (it died in between, or publishing failed), so no transition loses its
// event. A report that names no recipient it can verify is counted and
// dropped, never acted on.
//
// It owns the policy of the confirm phase; it does no I/O of its own: the
// store, the events topic and the suppression lists are ports.
package outcome

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/report"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/suppression"
)

// Store is the recipient state (idempotency.Store). Safe for concurrent
// use.
type Store interface {
	RecipientsByRef(ctx context.Context, ref []byte, idx int) ([]idempotency.Recipient, error)
	RecipientByAddress(ctx context.Context, messageID, address string) (idempotency.Recipient, bool, error)
	// Resolve moves recipients by compare-and-set and writes the outbox
	// entries (Resolution.EventID, Effect) of those it moved, in one
	// transaction.
	Resolve(ctx context.Context, res []idempotency.Resolution) (applied []bool, settled map[string]string, err error)
	// MessageExists reports whether the mail has a row (claimed, perhaps
	// not recorded yet) or was purged long ago.
	MessageExists(ctx context.Context, messageID string) (bool, error)
	// Outbox lists the outbox entries older than minAge, oldest first;
	// OutboxDone deletes entries whose effects were performed.
	Outbox(ctx context.Context, minAge time.Duration, limit int) ([]idempotency.OutboxEntry, error)
	OutboxDone(ctx context.Context, eventIDs []string) error
}

// Events publishes events and returns once they are durable.
type Events interface {
	Publish(ctx context.Context, events ...event.Event) error
}

// Lists are the suppression lists (suppression.Store).
type Lists interface {
	Add(ctx context.Context, entries []suppression.Entry) (changed int, err error)
}

// Tokens verifies return path tokens (returnpath.Signer).
type Tokens interface {
	Verify(token string) (ref returnpath.Ref, idx int, ok bool)
}

// Defaults of Config.
const (
	DefaultDrainInterval = 10 * time.Second
	DefaultDrainAge      = 30 * time.Second
	DefaultDrainBatch    = 500
)

// Config configures an Applier.
type Config struct {
	// Rules classify bounces: hard, soft or policy, and whether to
	// suppress. Use the worker's rule set. Defaults to failure.Default().
	Rules *failure.RuleSet
	// NowFunc is the clock of events. Defaults to time.Now.
	NowFunc func() time.Time
	// DrainInterval is how often Run looks for transitions whose event
	// and suppression entry no applier finished. Defaults to
	// DefaultDrainInterval (10s).
	DrainInterval time.Duration
	// DrainAge is how long after its transition an outbox entry is left to
	// the applier that made it before the drain performs it: longer than
	// an applier takes from its compare-and-set to the end of its publish,
	// so the drain does not copy what a live applier is publishing (a copy
	// would be harmless: same ID). Measured on the database's clock.
	// Defaults to DefaultDrainAge (30s).
	DrainAge time.Duration
	// DrainBatch is how many entries one drain pass performs at most; a
	// full pass is followed by another at once. Defaults to
	// DefaultDrainBatch (500).
	DrainBatch int
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.Rules == nil {
		cfg.Rules = failure.Default()
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	cfg.DrainInterval = cmp.Or(cfg.DrainInterval, DefaultDrainInterval)
	cfg.DrainAge = cmp.Or(cfg.DrainAge, DefaultDrainAge)
	cfg.DrainBatch = cmp.Or(cfg.DrainBatch, DefaultDrainBatch)
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg Config) Validate() error {
	switch {
	case cfg.DrainInterval <= 0:
		return fmt.Errorf("outcome config: DrainInterval %v must be positive", cfg.DrainInterval)
	case cfg.DrainAge < 0:
		return fmt.Errorf("outcome config: DrainAge %v is negative", cfg.DrainAge)
	case cfg.DrainBatch < 1:
		return fmt.Errorf("outcome config: DrainBatch %d is below 1", cfg.DrainBatch)
	}
	return nil
}

// Applier applies reports. Safe for concurrent use.
type Applier struct {
	cfg     Config
	logger  *slog.Logger
	store   Store
	events  Events
	lists   Lists
	tokens  Tokens
	metrics *metrics
}

// New returns an Applier. lists may be nil (nothing is suppressed).
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer, store Store, events Events, lists Lists, tokens Tokens) (*Applier, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || events == nil || tokens == nil {
		return nil, errors.New("outcome: store, events and tokens are required")
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Applier{cfg: cfg, logger: logger, store: store, events: events, lists: lists, tokens: tokens, metrics: m}, nil
}

// The results of a report (postline_outcome_reports_total{result}).
const (
	ResultApplied = "applied" // the recipient moved on
	ResultForged  = "forged"  // the token did not verify, or a returned report had none
	ResultUnknown = "unknown" // it verified, but names no recipient we have
	// ResultEarly: the token verifies but the worker has not recorded the
	// send yet (a relay can bounce within milliseconds, before the
	// outcome is written): the report is refused for now, so that its
	// sender offers it again.
	ResultEarly   = "early"
	ResultStale   = "stale"   // the recipient had moved past what the report says
	ResultDelayed = "delayed" // still being retried: resolves nothing
)

// ApplyReturned applies reports that came back to a return path: only a
// report whose token verifies is acted on. An error means nothing was
// lost and the whole message should be offered again (the receiver answers
// 451): transitions made before the error stay made, their events are
// published by the drain (Run) if not by this call, and the reports about
// them find them done when they come again.
func (a *Applier) ApplyReturned(ctx context.Context, reports []report.Report) error {
	return a.apply(ctx, tries(reports), false)
}

// ApplySigned applies reports from a provider's signed request: a report
// is found by its token when it carries one that verifies, else by its
// Message-ID and recipient address.
func (a *Applier) ApplySigned(ctx context.Context, reports []report.Report) error {
	return a.apply(ctx, tries(reports), true)
}

// maxLost is how many times a report may lose its compare-and-set to a
// concurrent writer and be decided again on the state that writer left.
// Each loss means the recipient moved forward, and it can do so at most
// three times (accepted, delivered, bounced, complained), so a report
// losing more often is only a store that keeps changing under it: it is
// counted stale.
const maxLost = 3

// try is a report on its way, with how often it lost a compare-and-set.
type try struct {
	rep  report.Report
	lost int
}

func tries(reports []report.Report) []try {
	out := make([]try, len(reports))
	for i, r := range reports {
		out[i] = try{rep: r}
	}
	return out
}

// step is one report on its way to a transition.
type step struct {
	rep  report.Report
	lost int // compare-and-sets the report lost before
	row  idempotency.Recipient
	to   idempotency.RecipientState
	kind event.Type
	// For bounces.
	bounce failure.Bounce
}

func (a *Applier) apply(ctx context.Context, reports []try, signed bool) error {
	var (
		steps []step
		early bool
	)
	// A second report about a recipient that already has a step in this
	// round is decided in the next round, on the state the first one left:
	// deciding both on the state read now would make the second's
	// compare-and-set lose for certain.
	var later []try
	taken := map[rowKey]bool{}
	for _, t := range reports {
		rep := t.rep
		source := cmp.Or(rep.Source, "unknown")
		row, result, err := a.find(ctx, rep, signed)
		if err != nil {
			return err
		}
		if result == "" && row.State == idempotency.RecipientPending && rep.Kind != report.Delayed {
			result = ResultEarly
		}
		if result != "" {
			early = early || result == ResultEarly
			a.metrics.reports.WithLabelValues(source, string(rep.Kind), result).Inc()
			if result == ResultForged {
				a.logger.Warn("report dropped: its return path token does not verify", "source", source, "kind", rep.Kind)
			}
			continue
		}
		k := rowKey{row.MessageID, row.Index}
		if taken[k] {
			later = append(later, t)
			continue
		}
		s, ok := a.decide(rep, row)
		if !ok {
			a.metrics.reports.WithLabelValues(source, string(rep.Kind), a.noTransition(rep)).Inc()
			continue
		}
		s.lost = t.lost
		taken[k] = true
		steps = append(steps, s)
	}
	if len(steps) == 0 {
		return earlyError(early)
	}
	now := a.cfg.NowFunc().UTC()
	events := make([]event.Event, len(steps))
	entries := make([]*suppression.Entry, len(steps))
	res := make([]idempotency.Resolution, len(steps))
	for i, s := range steps {
		events[i] = a.eventOf(s, now)
		if e, ok := suppressionOf(s, now); ok {
			entries[i] = &e
		}
		body, err := encodeEffect(events[i], entries[i])
		if err != nil {
			return fmt.Errorf("outcome: %w", err)
		}
		res[i] = idempotency.Resolution{MessageID: s.row.MessageID, Index: s.row.Index, Life: s.row.Life,
			From: s.row.State, To: s.to,
			Status: s.rep.Status, Code: s.rep.Code, Diagnostic: s.rep.Diagnostic, Source: s.rep.Source,
			FeedbackType: s.rep.FeedbackType, EventID: events[i].ID, Effect: body}
		if s.to == idempotency.RecipientBounced {
			res[i].BounceType, res[i].Rule = string(s.bounce.Type), s.bounce.Rule
		}
	}
	// The compare-and-set first: only a transition that happened gets its
	// event and suppression entry, which the same transaction put in the
	// outbox for the drain in case this applier goes no further.
	applied, settled, err := a.store.Resolve(ctx, res)
	if err != nil {
		return fmt.Errorf("outcome: %w", err)
	}
	var (
		won      []event.Event
		suppress []suppression.Entry
		ids      []string
	)
	for i, s := range steps {
		source := cmp.Or(s.rep.Source, "unknown")
		if !applied[i] {
			// A concurrent report (or replay) moved the recipient first:
			// decide this one again on the state it left, in the next
			// round; a complaint that lost to a delivery still applies.
			if s.lost < maxLost {
				later = append(later, try{rep: s.rep, lost: s.lost + 1})
			} else {
				a.metrics.reports.WithLabelValues(source, string(s.rep.Kind), ResultStale).Inc()
			}
			continue
		}
		a.metrics.reports.WithLabelValues(source, string(s.rep.Kind), ResultApplied).Inc()
		a.metrics.transitions.WithLabelValues(string(s.kind), string(s.bounce.Type)).Inc()
		if s.bounce.Type == failure.BouncePolicy {
			// Not suppressed: a policy or reputation refusal is about the
			// sender, and an operator should see it.
			a.logger.Warn("policy bounce", "message_id", s.row.MessageID, "recipient_index", s.row.Index,
				"status", s.rep.Status, "source", s.rep.Source, "rule", s.bounce.Rule)
		}
		won = append(won, events[i])
		ids = append(ids, events[i].ID)
		if entries[i] != nil {
			suppress = append(suppress, *entries[i])
		}
	}
	for _, c := range settled {
		a.metrics.confirmations.WithLabelValues(c).Inc()
	}
	if err := a.perform(ctx, won, suppress, ids); err != nil {
		return err
	}
	if len(later) > 0 {
		if err := a.apply(ctx, later, signed); err != nil {
			return err
		}
	}
	return earlyError(early)
}

// perform publishes the events of transitions made and adds their
// suppression entries, then deletes their outbox entries. When it fails the
// entries stay, and the drain performs them.
func (a *Applier) perform(ctx context.Context, events []event.Event, entries []suppression.Entry, ids []string) error {
	if len(events) == 0 {
		return nil
	}
	if err := a.publishEffects(ctx, events, entries); err != nil {
		return fmt.Errorf("outcome: %w", err)
	}
	if err := a.store.OutboxDone(ctx, ids); err != nil {
		// Everything is out: the drain will publish the same events (same
		// IDs) again and add entries that change nothing. Not the report's
		// failure.
		a.logger.Warn("outbox entries of published transitions not deleted; the drain will publish them again",
			"events", len(ids), "error", err)
	}
	return nil
}

// publishEffects adds the suppression entries of transitions and publishes
// their events: what perform and Drain owe before the outbox entries may
// go. The entries come first, so that whoever reads a bounced or complained
// event finds the address already suppressed; a failure after them leaves
// the outbox entry, and adding an entry again changes nothing.
func (a *Applier) publishEffects(ctx context.Context, events []event.Event, entries []suppression.Entry) error {
	if len(entries) > 0 && a.lists != nil {
		if _, err := a.lists.Add(ctx, entries); err != nil {
			return fmt.Errorf("suppress %d addresses: %w", len(entries), err)
		}
		for _, e := range entries {
			a.metrics.suppressed.WithLabelValues(string(e.Reason)).Inc()
		}
	}
	if err := a.events.Publish(ctx, events...); err != nil {
		return fmt.Errorf("publish %d events: %w", len(events), err)
	}
	return nil
}

// effect is what a transition owes, as its outbox entry stores it: the
// event document, and the suppression entry if it adds one.
type effect struct {
	Event       json.RawMessage    `json:"event"`
	Suppression *suppression.Entry `json:"suppression,omitempty"`
}

func encodeEffect(e event.Event, entry *suppression.Entry) ([]byte, error) {
	doc, err := e.Encode()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(effect{Event: doc, Suppression: entry})
	if err != nil {
		return nil, fmt.Errorf("encode the effect of %s: %w", e.ID, err)
	}
	return b, nil
}

func decodeEffect(b []byte) (event.Event, *suppression.Entry, error) {
	var f effect
	if err := json.Unmarshal(b, &f); err != nil {
		return event.Event{}, nil, err
	}
	e, err := event.Decode(f.Event)
	if err != nil {
		return event.Event{}, nil, err
	}
	return e, f.Suppression, nil
}

// Run drains the outbox every DrainInterval until ctx ends (see Drain). A
// failed pass is logged and tried again at the next tick.
func (a *Applier) Run(ctx context.Context) error {
	return runPasses(ctx, a.cfg.DrainInterval, a.logger, "outbox drain failed; trying again later",
		func(ctx context.Context) (bool, error) {
			n, err := a.Drain(ctx)
			return n >= a.cfg.DrainBatch, err
		})
}

// runPasses calls pass every interval until ctx ends, again at once while
// it reports more to do. A failed pass is logged as failed and tried again
// at the next tick; a failure because ctx ended ends the run.
func runPasses(ctx context.Context, interval time.Duration, logger *slog.Logger, failed string, pass func(context.Context) (more bool, err error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for {
			more, err := pass(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				logger.Warn(failed, "error", err)
				break
			}
			if !more {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Drain makes one pass over the outbox: it performs the transitions made
// more than DrainAge ago whose applier did not finish them (it died
// between its compare-and-set and its publish, or publishing failed),
// publishing their events and adding their suppression entries, and
// deletes their entries. The events carry the IDs the applier gave them,
// so one it did publish before dying is a copy consumers drop. It returns
// how many entries it performed.
func (a *Applier) Drain(ctx context.Context) (int, error) {
	entries, err := a.store.Outbox(ctx, a.cfg.DrainAge, a.cfg.DrainBatch)
	if err != nil || len(entries) == 0 {
		return 0, err
	}
	var (
		events   []event.Event
		suppress []suppression.Entry
		ids      []string
	)
	for _, en := range entries {
		e, entry, err := decodeEffect(en.Body)
		if err != nil {
			// Written by this package: a bug, or an entry from a version
			// that wrote another form. Left for an operator; the others go.
			a.logger.Error("outbox entry does not decode; left in postline_event_outbox", "event_id", en.EventID,
				"message_id", en.MessageID, "error", err)
			continue
		}
		events = append(events, e)
		ids = append(ids, en.EventID)
		if entry != nil {
			suppress = append(suppress, *entry)
		}
	}
	if len(events) > 0 {
		if err := a.publishEffects(ctx, events, suppress); err != nil {
			return 0, fmt.Errorf("outcome: drain: %w", err)
		}
		if err := a.store.OutboxDone(ctx, ids); err != nil {
			return 0, fmt.Errorf("outcome: drain: %w", err)
		}
		a.metrics.drained.Add(float64(len(events)))
		a.logger.Warn("published transitions an applier left unfinished (it stopped, or publishing failed)",
			"events", len(events), "suppressions", len(suppress))
	}
	return len(events), nil
}

// ErrEarly is returned when a report came before the send it is about was
// recorded: the caller refuses it for now (SMTP 451, HTTP 503) and its
// sender offers it again. The reports applied with it stay applied; the
// next offer finds them done.
var ErrEarly = errors.New("outcome: a report came before its send was recorded; offer it again later")

func earlyError(early bool) error {
	if early {
		return ErrEarly
	}
	return nil
}

// rowKey names one recipient row.
type rowKey struct {
	messageID string
	index     int
}

// find returns the recipient a report is about, or the result it is
// dropped with.
func (a *Applier) find(ctx context.Context, rep report.Report, signed bool) (idempotency.Recipient, string, error) {
	if rep.Token != "" {
		ref, idx, ok := a.tokens.Verify(rep.Token)
		if !ok {
			return idempotency.Recipient{}, ResultForged, nil
		}
		rows, err := a.store.RecipientsByRef(ctx, ref[:], idx)
		if err != nil {
			return idempotency.Recipient{}, "", fmt.Errorf("outcome: %w", err)
		}
		switch {
		case len(rows) == 1:
			return rows[0], "", nil
		case len(rows) > 1:
			// Two Message-IDs share the reference: the report's own
			// Message-ID or address tells them apart.
			for _, r := range rows {
				if (rep.MessageID != "" && r.MessageID == rep.MessageID) ||
					(rep.MessageID == "" && rep.Recipient != "" && strings.EqualFold(r.Address, rep.Recipient)) {
					return r, "", nil
				}
			}
			return idempotency.Recipient{}, ResultUnknown, nil
		}
		// A token that verifies names mail we sent. Without a recipient row,
		// either the worker has not recorded the send yet (the mail's own
		// row exists: offer the report again later), or the mail was purged
		// after its retention (nothing left to move on).
		if rep.MessageID == "" || returnpath.RefOf(rep.MessageID) != ref {
			return idempotency.Recipient{}, ResultUnknown, nil
		}
		exists, err := a.store.MessageExists(ctx, rep.MessageID)
		if err != nil {
			return idempotency.Recipient{}, "", fmt.Errorf("outcome: %w", err)
		}
		if !exists {
			return idempotency.Recipient{}, ResultUnknown, nil
		}
		return idempotency.Recipient{}, ResultEarly, nil
	}
	if !signed {
		return idempotency.Recipient{}, ResultForged, nil
	}
	if rep.MessageID == "" || rep.Recipient == "" {
		return idempotency.Recipient{}, ResultUnknown, nil
	}
	row, ok, err := a.store.RecipientByAddress(ctx, rep.MessageID, rep.Recipient)
	if err != nil {
		return idempotency.Recipient{}, "", fmt.Errorf("outcome: %w", err)
	}
	if !ok {
		return idempotency.Recipient{}, ResultUnknown, nil
	}
	return row, "", nil
}

// decide is the transition a report asks of row, if it may take it.
func (a *Applier) decide(rep report.Report, row idempotency.Recipient) (step, bool) {
	s := step{rep: rep, row: row}
	switch rep.Kind {
	case report.Delivered:
		s.to, s.kind = idempotency.RecipientDelivered, event.Delivered
	case report.Bounced:
		s.to, s.kind = idempotency.RecipientBounced, event.Bounced
		s.bounce = a.classify(rep)
	case report.Complained:
		s.to, s.kind = idempotency.RecipientComplained, event.Complained
	default:
		return step{}, false
	}
	return s, row.State.CanBecome(s.to)
}

// classify decides a bounce's type by the rule set, from the report's
// status, code and text; a provider's own permanent or temporary verdict
// stands in for a status it did not give. A provider's hard verdict makes
// the bounce hard and suppressing, unless the rules call the reply a
// policy refusal (about the sender, not the address).
func (a *Applier) classify(rep report.Report) failure.Bounce {
	status := rep.Status
	if status == "" && rep.Code == 0 && rep.Permanent != nil {
		status = map[bool]string{true: "5.0.0", false: "4.0.0"}[*rep.Permanent]
	}
	b := a.cfg.Rules.ClassifyBounce(rep.Code, status, rep.Diagnostic)
	if rep.Hard && b.Type == failure.BounceSoft {
		b = failure.Bounce{Type: failure.BounceHard, Rule: failure.RuleProviderHard, Suppress: true}
	}
	return b
}

func (a *Applier) noTransition(rep report.Report) string {
	if rep.Kind == report.Delayed {
		return ResultDelayed
	}
	return ResultStale
}

func (a *Applier) eventOf(s step, now time.Time) event.Event {
	e := event.Event{
		Schema: event.Schema, ID: event.NewLifeID(s.row.MessageID, s.row.Life, s.row.Index, s.kind, 0), Type: s.kind, At: now,
		MessageID: s.row.MessageID, Tenant: s.row.Tenant, Stream: streamOf(s.row), Recipient: s.row.Address,
		RecipientIndex: s.row.Index, Provider: s.row.Provider, Metadata: s.row.Metadata,
	}
	switch s.kind {
	case event.Bounced:
		e.Bounce = &event.Bounce{Type: string(s.bounce.Type), Status: validStatus(s.rep.Status), Code: validCode(s.rep.Code),
			Diagnostic: s.rep.Diagnostic, Rule: s.bounce.Rule, Source: cmp.Or(s.rep.Source, report.SourceUnstructured)}
	case event.Complained:
		e.FeedbackType = s.rep.FeedbackType
	}
	return e
}

// suppressionOf is the suppression entry a transition adds: a hard bounce
// the rules mark for suppression keeps the address off every stream of the
// tenant (it does not exist); a complaint keeps it off the stream it came
// on. Neither expires. Soft and policy bounces add nothing.
func suppressionOf(s step, now time.Time) (suppression.Entry, bool) {
	e := suppression.Entry{Tenant: s.row.Tenant, Address: s.row.Address, Source: cmp.Or(s.rep.Source, "report"),
		MessageID: s.row.MessageID, CreatedAt: now}
	switch {
	case s.to == idempotency.RecipientBounced && s.bounce.Suppress && s.bounce.Type == failure.BounceHard:
		e.Reason, e.Stream = suppression.ReasonHardBounce, suppression.StreamAll
	case s.to == idempotency.RecipientComplained:
		e.Reason, e.Stream = suppression.ReasonComplaint, suppression.Stream(streamOf(s.row))
	default:
		return suppression.Entry{}, false
	}
	return e, true
}

func streamOf(r idempotency.Recipient) string {
	if r.Stream == event.StreamBulk {
		return event.StreamBulk
	}
	return event.StreamTransactional
}

// validStatus keeps a status the event schema accepts, "" otherwise.
func validStatus(s string) string {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || len(parts[0]) != 1 || !strings.Contains("245", parts[0]) {
		return ""
	}
	for _, p := range parts[1:] {
		if len(p) < 1 || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return ""
		}
	}
	return s
}

// validCode keeps a reply code the event schema accepts, 0 otherwise.
func validCode(c int) int {
	if c < 200 || c > 599 {
		return 0
	}
	return c
}
