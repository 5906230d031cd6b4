// Package reaper owns recovering jobs whose row is stuck in sending and that
// have a stored record copy: the worker that claimed the row crashed (or
// stalled) after the claim and before recording a fate, and its lease
// expired. Every Interval the reaper reads such rows (their lease expired
// more than Grace ago), re-publishes the stored record to the jobs topic with
// the row's attempt, first-seen time and trace context, and only then
// hands back the row (sending -> retrying, same attempt) so the re-published
// copy is claimable. The worker stores no copy of the records it claims (see
// package idempotency): their offsets are not committed before the fate
// is recorded, so Kafka redelivers them and they re-claim their rows; the
// copies the reaper works from are the ones a replay stored.
//
// Publish comes before HandBack: a crash between the two leaves the row stuck,
// so the next pass publishes it again, and the duplicate copy is deduped by
// the claim (the first copy claims the row; later ones find it leased, sent
// or at another attempt). Handing back first could lose the job: a handed-back row
// with no record on its way would never be claimed.
//
// Several workers may run reapers at once. They may all read the same stuck
// row and all publish it, but HandBack is a compare-and-set on the row version
// that also requires the lease to be expired, so exactly one hand-back wins;
// the copies the losers published are deduped by the claim like any
// redelivery. A copy consumed before the hand-back still claims the row (an
// expired lease is claimable), and the hand-back then simply loses.
//
// A live owner never loses its row: a worker's lease keeper
// (idempotency.LeaseKeeper) extends the lease of every job it holds, queued
// for a relay or sending, so a row is only read as stuck once its lease
// expired more than Grace ago, on the database's clock: its owner stopped
// extending it. Such re-publications are counted as takeovers.
//
// The same passes re-publish stalled replays: rows a dead-letter replay made
// pending more than ReplayGrace ago that no worker has claimed since (the
// replay's publish failed after its reset, so nothing is on its way), and
// then restart their grace (TouchReplays) rather than hand them back.
//
// The retention is enforced on a clock of its own: every PurgeInterval,
// terminal rows (sent, failed, dead) whose fate is older than Retention,
// the dedupe window, are deleted in statements of at most PurgeBatch rows
// with PurgePause between them, until one comes back short or the interval
// has passed. Rows come due at the rate mail was sent one retention
// earlier, so frequent passes delete about that much a second, where a pass
// every Interval would delete an interval's worth in a burst, at the
// statements' fastest, and hold the database's CPU for that long.
//
// Given a suppression store (WithSuppressions), the same passes delete the
// suppression entries that have expired. The store lets one purge of the
// fleet's run at a time (the others' find the turn taken and delete
// nothing), and reads only the entries expired and not yet deleted, by their
// expiry: a pass costs what expired since the last one.
//
// The package knows the store and a publisher through the small interfaces
// below; it does not consume, send or decide retries.
package reaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/internal/suppression"
)

// Defaults of Config.
const (
	DefaultInterval = 30 * time.Second
	DefaultGrace    = 10 * time.Second
	// DefaultReplayGrace is far above the time a replayed record takes to
	// reach a worker when the fleet keeps up: a re-published copy of one
	// still waiting costs a record, not a send.
	DefaultReplayGrace = 5 * time.Minute
	DefaultBatch       = 100
	DefaultJobsTopic   = "mail.jobs"
	// DefaultRetention is the dedupe window: a duplicate of a message
	// delivered up to 30 days ago is still recognised.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultPurgeBatch keeps each delete statement short, so it holds few
	// row locks and little WAL at a time.
	DefaultPurgeBatch = 1000
	DefaultPurgePause = 100 * time.Millisecond
	// DefaultPurgeInterval is short so that each pass deletes a few
	// seconds' worth of rows come due: the load the purge puts on the
	// database follows the delivery rate of one retention earlier instead
	// of arriving in bursts.
	DefaultPurgeInterval = 5 * time.Second
	// MinRetention is the shortest Retention accepted: shorter would forget
	// messages while their duplicates can still arrive (redeliveries,
	// retries of up to a day or two).
	MinRetention = time.Hour
)

// Config configures a Reaper.
type Config struct {
	// Interval is the time between passes. Defaults to DefaultInterval (30s).
	Interval time.Duration
	// Grace is how long past its lease expiry a row must be before it is
	// reaped, so that a worker finishing late records its fate first.
	// Defaults to DefaultGrace (10s).
	Grace time.Duration
	// ReplayGrace is how long a row a replay made pending may wait
	// unclaimed before its record is published again. Defaults to
	// DefaultReplayGrace (5m).
	ReplayGrace time.Duration
	// Batch is the most rows one round of a pass handles; a pass goes on
	// while rounds come back full. Defaults to DefaultBatch (100).
	Batch int
	// JobsTopic is the topic the Publisher writes to, for logs; a
	// Publisher that reports its topic (Topic() string, as *job.Publisher
	// does) overrides it. Defaults to DefaultJobsTopic (mail.jobs).
	JobsTopic string
	// Retention is how long a terminal row (sent, failed, dead) is kept
	// after its fate; older ones are deleted, and a duplicate arriving
	// later is delivered as a new message. Defaults to DefaultRetention
	// (30 days); at least MinRetention (1h).
	Retention time.Duration
	// PurgeBatch is the most rows one delete statement removes. Defaults
	// to DefaultPurgeBatch (1000).
	PurgeBatch int
	// PurgePause is the pause between two delete statements of a pass.
	// Defaults to DefaultPurgePause (100ms).
	PurgePause time.Duration
	// PurgeInterval is the time between two passes of the purge, and the
	// longest one pass lasts. Defaults to DefaultPurgeInterval (5s).
	PurgeInterval time.Duration
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	cfg.Grace = cmp.Or(cfg.Grace, DefaultGrace)
	cfg.ReplayGrace = cmp.Or(cfg.ReplayGrace, DefaultReplayGrace)
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.JobsTopic = cmp.Or(cfg.JobsTopic, DefaultJobsTopic)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.PurgeBatch = cmp.Or(cfg.PurgeBatch, DefaultPurgeBatch)
	cfg.PurgePause = cmp.Or(cfg.PurgePause, DefaultPurgePause)
	cfg.PurgeInterval = cmp.Or(cfg.PurgeInterval, DefaultPurgeInterval)
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg Config) Validate() error {
	switch {
	case cfg.Interval < time.Millisecond || cfg.PurgeInterval < time.Millisecond:
		return configerr.Errorf("Interval", "reaper config: Interval %v and PurgeInterval %v must be at least 1ms", cfg.Interval, cfg.PurgeInterval)
	case cfg.Grace < 0 || cfg.ReplayGrace < 0:
		return configerr.Errorf("Grace", "reaper config: Grace %v and ReplayGrace %v must not be negative", cfg.Grace, cfg.ReplayGrace)
	case cfg.Batch < 1:
		return configerr.Errorf("Batch", "reaper config: Batch %d is below 1", cfg.Batch)
	case cfg.Retention < MinRetention:
		return configerr.Errorf("Retention", "reaper config: Retention %v is shorter than %v", cfg.Retention, MinRetention)
	case cfg.PurgeBatch < 1:
		return configerr.Errorf("PurgeBatch", "reaper config: PurgeBatch %d is below 1", cfg.PurgeBatch)
	case cfg.PurgePause < 0:
		return configerr.Errorf("PurgePause", "reaper config: PurgePause %v is negative", cfg.PurgePause)
	}
	return nil
}

// Store is the part of the idempotency store the reaper uses. It must be
// safe for concurrent use; HandBack must be a compare-and-set that lets at
// most one of several concurrent callers win per row version.
type Store interface {
	// Stuck returns rows in sending whose lease expired more than grace
	// ago, oldest first.
	Stuck(ctx context.Context, grace time.Duration, limit int) ([]idempotency.Stuck, error)
	// HandBack moves rows from sending to retrying and returns the IDs whose
	// compare-and-set was lost.
	HandBack(ctx context.Context, ids []string, versions []int64) (lost []string, err error)
	StalledReplays(ctx context.Context, grace time.Duration, limit int) ([]idempotency.Stuck, error)
	TouchReplays(ctx context.Context, ids []string, versions []int64) (lost []string, err error)
	// Purge deletes up to limit terminal rows whose fate is older than
	// olderThan and returns how many it deleted.
	Purge(ctx context.Context, olderThan time.Duration, limit int) (int, error)
}

// Suppressions is the part of the suppression store the purge uses. It must
// be safe for concurrent use.
type Suppressions interface {
	// PurgeExpired deletes a batch of expired entries and returns how many
	// it deleted: 0 when none is left, or while another purge of the fleet
	// runs.
	PurgeExpired(ctx context.Context) (int, error)
}

// Publisher writes records to the jobs topic as they are, returning once
// the broker acknowledged all of them. *kafkaclient.TopicWriter satisfies
// it.
type Publisher interface {
	PublishRaw(ctx context.Context, msgs []kafka.Message) error
}

var (
	_ Store        = (*idempotency.Store)(nil)
	_ Publisher    = (*kafkaclient.TopicWriter)(nil)
	_ Suppressions = (*suppression.Store)(nil)
)

// Option sets what a Reaper works on beyond its Store and Publisher.
type Option func(*Reaper)

// WithSuppressions has the purge passes delete expired suppression entries
// of store too.
func WithSuppressions(store Suppressions) Option {
	return func(r *Reaper) { r.suppressions = store }
}

// Reaper re-publishes rows stuck in sending. Run it in one goroutine per
// process; several processes may run reapers against one database.
type Reaper struct {
	cfg          Config
	store        Store
	pub          Publisher
	suppressions Suppressions // nil: none purged
	logger       *slog.Logger

	republished      prometheus.Counter
	takeovers        prometheus.Counter
	handedBack       *prometheus.CounterVec
	purged           prometheus.Counter
	suppressionsGone prometheus.Counter
	errors           prometheus.Counter
}

// topicReporter is a Publisher that knows its topic (*job.Publisher).
type topicReporter interface{ Topic() string }

// New returns a Reaper. A nil logger discards logs; a nil reg leaves the
// metrics unregistered.
func New(cfg Config, store Store, pub Publisher, logger *slog.Logger, reg prometheus.Registerer, opts ...Option) (*Reaper, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || pub == nil {
		return nil, errors.New("reaper: nil store or publisher")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// The logs name the topic the records really go to.
	if tr, ok := pub.(topicReporter); ok && tr.Topic() != "" {
		cfg.JobsTopic = tr.Topic()
	}
	set := metricreg.NewExclusiveSet(reg, "reaper")
	r := &Reaper{
		cfg: cfg, store: store, pub: pub, logger: logger,
		republished:      set.Counter("republished_total", "Records re-published to the jobs topic: rows stuck in sending, and replays stalled in pending."),
		takeovers:        set.Counter("takeovers_total", "Rows stuck in sending re-published because their lease had expired past the grace: the owner stopped extending it (crashed or stalled)."),
		purged:           set.Counter("purged_total", "Terminal rows deleted because their fate was older than the retention (the dedupe window)."),
		handedBack:       set.CounterVec("releases_total", "Stuck rows handed back after re-publishing, by result (released: handed back; lost: another reaper or a claim came first).", "result"),
		suppressionsGone: set.Counter("suppressions_purged_total", "Expired suppression entries deleted."),
		errors:           set.Counter("pass_errors_total", "Reaper passes that failed on the store or the publisher (tried again next interval)."),
	}
	for _, opt := range opts {
		opt(r)
	}
	for _, res := range []string{"released", "lost"} {
		r.handedBack.WithLabelValues(res)
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("reaper: register metrics: %w", err)
	}
	return r, nil
}

// Run recovers rows every Interval and purges every PurgeInterval, each on
// its own clock, until ctx ends, then returns nil. A failed pass is counted
// and logged, and the next one tries again.
func (r *Reaper) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		r.every(ctx, r.cfg.PurgeInterval, func(ctx context.Context) error {
			_, err := r.Purge(ctx)
			_, errSuppressions := r.PurgeSuppressions(ctx)
			return errors.Join(err, errSuppressions)
		})
	})
	r.every(ctx, r.cfg.Interval, func(ctx context.Context) error {
		_, err := r.recoverRows(ctx)
		return err
	})
	wg.Wait()
	return nil
}

// every runs pass now and then every interval until ctx ends.
func (r *Reaper) every(ctx context.Context, interval time.Duration, pass func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := pass(ctx); err != nil && ctx.Err() == nil {
			r.errors.Inc()
			r.logger.WarnContext(ctx, "reaper pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once makes one pass of each kind: rounds of Stuck -> publish -> HandBack,
// then rounds of StalledReplays -> publish -> TouchReplays, each while
// rounds come back full, then the purge (see Purge) and that of expired
// suppression entries (PurgeSuppressions). Run makes them on their own
// clocks. It returns how many rows it recovered
// (not counting rows lost to another reaper or a claim, nor purged rows).
func (r *Reaper) Once(ctx context.Context) (int, error) {
	n, err := r.recoverRows(ctx)
	if err != nil {
		return n, err
	}
	if _, err := r.Purge(ctx); err != nil {
		return n, err
	}
	if _, err := r.PurgeSuppressions(ctx); err != nil {
		return n, err
	}
	return n, nil
}

// PurgeSuppressions deletes the suppression entries that have expired, if
// the Reaper has a suppression store: batches of the store's size,
// PurgePause apart, until one deletes nothing (none left, or another
// worker's purge holds the turn) or PurgeInterval has passed. It returns
// how many it deleted.
func (r *Reaper) PurgeSuppressions(ctx context.Context) (int, error) {
	if r.suppressions == nil {
		return 0, nil
	}
	total, err := r.purgeBatches(ctx, func(ctx context.Context) (int, error) {
		n, err := r.suppressions.PurgeExpired(ctx)
		r.suppressionsGone.Add(float64(n))
		if err != nil {
			return n, fmt.Errorf("purge expired suppression entries: %w", err)
		}
		return n, nil
	}, func(n int) bool { return n == 0 })
	if err == nil && total > 0 {
		r.logger.DebugContext(ctx, "purged expired suppression entries", "entries", total)
	}
	return total, err
}

// Purge deletes terminal rows older than Retention: statements of at most
// PurgeBatch rows, PurgePause apart, until one comes back short or
// PurgeInterval has passed (the rest waits for the next pass). It returns
// how many rows it deleted.
func (r *Reaper) Purge(ctx context.Context) (int, error) {
	total, err := r.purgeBatches(ctx, func(ctx context.Context) (int, error) {
		n, err := r.store.Purge(ctx, r.cfg.Retention, r.cfg.PurgeBatch)
		r.purged.Add(float64(n))
		if err != nil {
			return n, fmt.Errorf("purge rows older than %v: %w", r.cfg.Retention, err)
		}
		return n, nil
	}, func(n int) bool { return n < r.cfg.PurgeBatch })
	// A pass every few seconds: the count is in purged_total, and the log
	// only for debugging.
	if err == nil && total > 0 {
		r.logger.DebugContext(ctx, "purged terminal rows past the retention", "rows", total, "retention", r.cfg.Retention)
	}
	return total, err
}

// purgeBatches runs batch, PurgePause apart, until last says a batch's
// count means nothing is left or PurgeInterval has passed, and returns the
// total batch deleted. An error, or ctx ending, stops it with the total so
// far.
func (r *Reaper) purgeBatches(ctx context.Context, batch func(context.Context) (int, error), last func(n int) bool) (int, error) {
	total := 0
	deadline := time.Now().Add(r.cfg.PurgeInterval)
	for {
		n, err := batch(ctx)
		total += n
		if err != nil || last(n) || !time.Now().Add(r.cfg.PurgePause).Before(deadline) {
			return total, err
		}
		if err := backoff.Sleep(ctx, r.cfg.PurgePause); err != nil {
			return total, err
		}
	}
}

// recoverRows makes the recovery rounds of a pass and returns how many rows it
// recovered.
func (r *Reaper) recoverRows(ctx context.Context) (int, error) {
	total := 0
	for _, round := range []func(context.Context) (int, bool, error){r.round, r.replayRound} {
		for {
			n, full, err := round(ctx)
			total += n
			if err != nil {
				return total, err
			}
			// A full round that recovered nothing would read the same rows again.
			if !full || n == 0 {
				break
			}
		}
	}
	return total, nil
}

// replayRound re-publishes one batch of stalled replays and restarts their
// grace. It reports how many it touched and whether the batch was full.
func (r *Reaper) replayRound(ctx context.Context) (touched int, full bool, err error) {
	stalled, err := r.store.StalledReplays(ctx, r.cfg.ReplayGrace, r.cfg.Batch)
	if err != nil || len(stalled) == 0 {
		return 0, false, err
	}
	ids, versions, err := r.republish(ctx, stalled, "stalled replays")
	if err != nil {
		return 0, false, err
	}
	lost, err := r.store.TouchReplays(ctx, ids, versions)
	if err != nil {
		// Published but not touched: the next pass publishes them again,
		// and the claim dedupes the extra copies.
		return 0, false, fmt.Errorf("touch %d re-published replays: %w", len(ids), err)
	}
	for _, st := range stalled {
		r.logger.InfoContext(ctx, "re-published stalled replay", "message_id", st.MessageID, "topic", r.cfg.JobsTopic)
	}
	return len(stalled) - len(lost), len(stalled) == r.cfg.Batch, nil
}

// round handles one batch of stuck rows; full reports that the batch was
// full, so more may be waiting.
func (r *Reaper) round(ctx context.Context) (handedBack int, full bool, err error) {
	stuck, err := r.store.Stuck(ctx, r.cfg.Grace, r.cfg.Batch)
	if err != nil {
		return 0, false, err
	}
	if len(stuck) == 0 {
		return 0, false, nil
	}
	ids, versions, err := r.republish(ctx, stuck, "stuck jobs")
	if err != nil {
		return 0, false, err
	}
	r.takeovers.Add(float64(len(stuck)))
	lost, err := r.store.HandBack(ctx, ids, versions)
	if err != nil {
		// The copies are published: the rows stay stuck and are published
		// again next pass, and the claim dedupes the extra copies.
		return 0, false, fmt.Errorf("hand back %d re-published jobs: %w", len(ids), err)
	}
	lostSet := make(map[string]bool, len(lost))
	for _, id := range lost {
		lostSet[id] = true
	}
	for _, st := range stuck {
		if lostSet[st.MessageID] {
			continue
		}
		handedBack++
		r.logger.InfoContext(ctx, "re-published stuck job", "message_id", st.MessageID, "attempt", st.Attempt,
			"topic", r.cfg.JobsTopic, "lease_owner", st.LeaseOwner, "lease_expired_at", st.LeaseExpiresAt)
	}
	r.handedBack.WithLabelValues("released").Add(float64(handedBack))
	r.handedBack.WithLabelValues("lost").Add(float64(len(lost)))
	return handedBack, len(stuck) == r.cfg.Batch, nil
}

// republish publishes the stored records of rows (what names them in an
// error) to the jobs topic and returns their IDs and versions, parallel,
// for the compare-and-set that follows the publish.
func (r *Reaper) republish(ctx context.Context, rows []idempotency.Stuck, what string) (ids []string, versions []int64, err error) {
	msgs := make([]kafka.Message, len(rows))
	ids = make([]string, len(rows))
	versions = make([]int64, len(rows))
	for i, st := range rows {
		msgs[i] = Message(st)
		ids[i], versions[i] = st.MessageID, st.Version
	}
	if err := r.pub.PublishRaw(ctx, msgs); err != nil {
		return nil, nil, fmt.Errorf("re-publish %d %s to %s: %w", len(msgs), what, r.cfg.JobsTopic, err)
	}
	r.republished.Add(float64(len(msgs)))
	return ids, versions, nil
}

// Message is the record re-published for a stuck row: the stored key (the
// message ID when none was stored) and value, the stored trace context
// headers, the row's attempt and the first-seen time.
func Message(st idempotency.Stuck) kafka.Message {
	key := st.Key
	if key == nil {
		key = []byte(st.MessageID)
	}
	var headers []kafka.Header
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := st.TraceHeaders[k]; ok {
			headers = jobheader.Set(headers, k, v)
		}
	}
	headers = jobheader.Set(headers, jobheader.KeyAttempt, strconv.Itoa(max(st.Attempt, 1)))
	if !st.FirstSeen.IsZero() {
		headers = jobheader.Set(headers, jobheader.KeyFirstSeen, jobheader.FormatTime(st.FirstSeen))
	}
	return kafka.Message{Key: key, Value: st.Payload, Headers: headers}
}
