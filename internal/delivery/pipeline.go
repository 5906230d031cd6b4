package delivery

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/delay"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/pgpool"
	"github.com/postline/postline/job"
)

// Failure classes of the pipeline's own, written to rows and dead-letter
// headers next to the SMTP classes of package failure.
const (
	classInvalid  = "invalid"
	classInternal = "internal"
	classConflict = "conflict"
	classExpired  = "expired"
	classRender   = "render"
)

// item is one consumed record on its way through the pipeline: what the
// job is and what its attempts so far did. What becomes of it is not
// here: it is its fate (fate.go), which the stage that decides it hands to
// settle beside the item.
type item struct {
	msg     consumer.Message
	job     job.Job
	hash    []byte
	attempt int
	// throttles counts the attempts so far the relay refused as throttled.
	throttles int
	// holds counts the short throttles in a row waited out in the worker
	// (scheduleRetry).
	holds int
	// span is the record's deliver span, from intake until it is done.
	span trace.Span

	// rejected is set by intake when the record is not a valid job.
	rejected *job.ValidationError

	// Set by the claimer.
	version int64
	// life is the mail's life (idempotency.Claim.Life): its events' IDs
	// hash it in, so a replayed or re-sent mail's are its own.
	life int64
	// rcpts are the job's recipients and where each stands; loaded says
	// what earlier attempts recorded has been read into them.
	rcpts  []rcpt
	loaded bool
	// composed is the template version that rendered a template job, nil
	// until it is rendered (and for jobs that carry their bodies).
	composed *event.TemplateUse
}

// Pipeline delivers consumed jobs. Create it with New and start it with Run.
type Pipeline struct {
	cfg      Config
	logger   *slog.Logger
	store    Store
	leases   Leases // nil: leases are not extended
	relays   []*relayPool
	breakers Breakers
	dlq      DeadLetters
	retries  Retries
	metrics  *metrics

	// The outcome loop's ports; nil disables each.
	events       Events
	recipients   RecipientStates
	suppressions Suppressions
	returnPaths  ReturnPaths
	unsubscribes Unsubscribes
	composer     Composer

	tracer trace.Tracer

	// Inputs and state of the retry policy.
	window   *adaptive.Window
	budgets  *adaptive.Budgets // nil: no retry budgets
	group    Group             // nil: no lag, one member
	pressure *adaptive.PressureGuard

	// degraded is set while a store or dead-letter call keeps failing.
	degraded atomic.Bool
	// idleClaimers counts the claimers waiting for a batch: while one is,
	// intake hands a partial batch over at once instead of lingering
	// (a lone mail is not held for a batch that is not coming).
	idleClaimers atomic.Int32

	// The per-batch slices of the claim and record round trips.
	claimReqs slicePool[idempotency.ClaimRequest]
	fateRows  slicePool[idempotency.Fate]
	eventBufs slicePool[event.Event]
}

// Deps are the pipeline's collaborators.
type Deps struct {
	Store Store
	// Leases extends the leases of claimed jobs; nil means a job must be
	// sent and recorded within one lease, or the reaper may take it over.
	Leases Leases
	// Relays are the SMTP relays in priority order. At least one.
	Relays []Relay
	// Breakers guard the relays; nil lets every send through.
	Breakers    Breakers
	DeadLetters DeadLetters
	Retries     Retries
	// Group reports the consumer group's lag and live members, inputs of
	// the retry policy and of the fleet rate share; nil means no lag and a
	// lone worker.
	Group Group
	// Pressure scales the send concurrency down under Go runtime pressure
	// when Config.SendControl is set; nil means none.
	Pressure *adaptive.PressureGuard
	// Events receives the events of every recorded fate; nil publishes
	// none.
	Events Events
	// Recipients reads what earlier attempts recorded for the recipients
	// of a job back from a delay tier; nil sends every retry to all of
	// its recipients.
	Recipients RecipientStates
	// Suppressions are checked at claim and told of hard bounces at RCPT;
	// nil checks nothing.
	Suppressions Suppressions
	// ReturnPaths gives each recipient its own return path; nil sends with
	// the job's From as the return path.
	ReturnPaths ReturnPaths
	// Unsubscribes give each recipient's copy of bulk mail, and of a job
	// that asks (job.Job.Unsubscribe), its one-click unsubscribe headers;
	// nil adds none.
	Unsubscribes Unsubscribes
	// Composer renders template jobs; nil dead-letters them as
	// render_failed.
	Composer Composer
	// TracerProvider makes the spans of each record (see tracing.go),
	// joined to the trace context in its headers; nil means no spans.
	TracerProvider trace.TracerProvider
}

// New returns a Pipeline.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer, deps Deps) (*Pipeline, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.DeadLetters == nil || deps.Retries == nil || len(deps.Relays) == 0 {
		return nil, errors.New("delivery: Store, DeadLetters, Retries and at least one Relay are required")
	}
	seen := map[string]bool{}
	for _, relay := range deps.Relays {
		if relay.Name == "" || relay.NewSession == nil || seen[relay.Name] || relay.MaxConns < 0 {
			return nil, fmt.Errorf("delivery: relay %q needs a unique name, a NewSession and MaxConns >= 0", relay.Name)
		}
		seen[relay.Name] = true
	}
	window, err := adaptive.NewWindow(adaptive.WindowConfig{})
	if err != nil {
		return nil, err
	}
	var budgets *adaptive.Budgets
	if cfg.Budgets != nil {
		if budgets, err = adaptive.NewBudgets(cfg.Budgets, cfg.NowFunc()); err != nil {
			return nil, fmt.Errorf("delivery: Budgets: %w", err)
		}
	}
	relays := slices.Clone(deps.Relays)
	slices.SortStableFunc(relays, func(a, b Relay) int { return cmp.Compare(a.Priority, b.Priority) })
	pools := make([]*relayPool, len(relays))
	for i, relay := range relays {
		pools[i] = newRelayPool(relay, cfg.Senders, nil, cfg.NowFunc)
		if cfg.SendControl == nil {
			continue
		}
		sc := *cfg.SendControl
		sc.AIMD.Max = min(cmp.Or(sc.AIMD.Max, pools[i].size), pools[i].size)
		sc.AIMD.Initial = min(cmp.Or(sc.AIMD.Initial, adaptive.DefaultAIMDInitial), sc.AIMD.Max)
		sc.FleetRate = relay.FleetRate
		if pools[i].control, err = adaptive.NewSendControl(sc, deps.Pressure, cfg.NowFunc()); err != nil {
			return nil, fmt.Errorf("delivery: SendControl for relay %s: %w", relay.Name, err)
		}
	}
	tracerProvider := deps.TracerProvider
	if tracerProvider == nil {
		tracerProvider = noop.NewTracerProvider()
	}
	p := &Pipeline{cfg: cfg, logger: logger, store: deps.Store, leases: deps.Leases, relays: pools,
		breakers: deps.Breakers, dlq: deps.DeadLetters, retries: deps.Retries,
		events: deps.Events, recipients: deps.Recipients, suppressions: deps.Suppressions, returnPaths: deps.ReturnPaths,
		unsubscribes: deps.Unsubscribes, composer: deps.Composer,
		window: window, budgets: budgets, group: deps.Group, pressure: deps.Pressure,
		tracer: tracerProvider.Tracer(tracerName)}
	if p.metrics, err = newMetrics(reg); err != nil {
		return nil, err
	}
	p.initSeries()
	if err := p.registerAdaptiveMetrics(reg); err != nil {
		return nil, err
	}
	return p, nil
}

// lag is the consumer group's lag as last read, 0 without a Group.
func (p *Pipeline) lag() int64 {
	if p.group == nil {
		return 0
	}
	total, _, _ := p.group.Lag()
	return total
}

// Healthy reports whether the last store and dead-letter calls succeeded.
func (p *Pipeline) Healthy() bool { return !p.degraded.Load() }

// Run delivers src's records until src closes its channel and every record
// taken from it has been finished or abandoned, or until ctx is cancelled
// (the hard stop: in-flight sends are aborted and their records are not
// marked done, so they are redelivered). Records waiting in the delay queue
// when src closes are abandoned the same way.
func (p *Pipeline) Run(ctx context.Context, src Source) error {
	var (
		claimQ    = make(chan []*item, 2)
		sendQ     = make(chan *item, p.cfg.Senders)
		recordQ   = make(chan decided, p.cfg.BatchSize)
		reenterQ  = make(chan *item)
		intakeEnd = make(chan struct{})
		delays    = delay.New[*item](p.cfg.NowFunc)
	)
	g, ctx := errgroup.WithContext(ctx)

	g.Go(func() error {
		defer close(claimQ)
		defer close(intakeEnd)
		return p.intake(ctx, src.Messages(), reenterQ, claimQ)
	})
	g.Go(func() error {
		if n := delays.Run(ctx, intakeEnd, reenterQ); n > 0 {
			p.logger.Info("abandoned waiting records; they will be redelivered", "count", n)
		}
		return nil
	})

	var claimers sync.WaitGroup
	for range 2 {
		claimers.Add(1)
		g.Go(func() error {
			defer claimers.Done()
			for {
				p.idleClaimers.Add(1)
				batch, ok := <-claimQ
				p.idleClaimers.Add(-1)
				if !ok {
					return nil
				}
				if err := p.claim(ctx, src, batch, sendQ, delays); err != nil {
					return err
				}
			}
		})
	}
	g.Go(func() error { claimers.Wait(); close(sendQ); return nil })

	var senders sync.WaitGroup
	for range p.cfg.Senders {
		senders.Add(1)
		g.Go(func() error {
			defer senders.Done()
			return p.send(ctx, sendQ, recordQ)
		})
	}
	g.Go(func() error {
		senders.Wait()
		close(recordQ)
		for _, relay := range p.relays {
			for _, err := range relay.close() {
				p.logger.Debug("close smtp session", "relay", relay.Name, "error", err)
			}
		}
		return nil
	})

	g.Go(func() error { return p.record(ctx, src, recordQ, delays) })

	if pauser, ok := src.(Pauser); ok && p.breakers != nil {
		g.Go(func() error {
			p.pauseWhileNoRelay(ctx, intakeEnd, pauser)
			return nil
		})
	}

	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// pauseWhileNoRelay pauses consumption while every relay's circuit is
// open, so the backlog waits in Kafka (as lag) instead of being pushed
// through the delay topics, and resumes when a circuit lets mail through.
func (p *Pipeline) pauseWhileNoRelay(ctx context.Context, stop <-chan struct{}, src Pauser) {
	tick := time.NewTicker(p.cfg.PauseCheck)
	defer tick.Stop()
	paused := false
	defer func() {
		if paused {
			src.Resume()
			p.metrics.paused.Set(0)
		}
	}()
	for {
		// Take the change channel before reading the state, so a change
		// in between is not missed.
		changed := p.breakers.Changed()
		switch allowed := p.breakers.AnyAllowed(); {
		case !allowed && !paused:
			src.Pause()
			paused = true
			p.metrics.paused.Set(1)
			p.logger.Warn("every relay's circuit is open: consumption paused")
		case allowed && paused:
			src.Resume()
			paused = false
			p.metrics.paused.Set(0)
			p.logger.Info("a relay accepts mail again: consumption resumed")
		}
		select {
		case <-tick.C:
		case <-changed:
		case <-ctx.Done():
			return
		case <-stop:
			return
		}
	}
}

// intake decodes records and cuts them into batches of at most BatchSize
// records and BatchBytes bytes. A partial batch goes at once when a claimer
// waits for it with no batch queued before it, unless the last batch went
// less than claimGap ago: then it goes when that gap has passed. Otherwise
// it waits at most BatchLinger to fill. Under load the claimers are busy and
// batches fill; a lone mail is not held for a batch; and a steady moderate
// load, which would keep a claimer waiting for every record or two, pays a
// store round trip per claimGap rather than one per record.
func (p *Pipeline) intake(ctx context.Context, in <-chan consumer.Message, reenter <-chan *item, out chan<- []*item) error {
	var (
		batch     []*item
		bytes     int
		linger    = time.NewTimer(time.Hour)
		armed     bool
		lastFlush time.Time
		gap       = p.claimGap()
	)
	defer linger.Stop()
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		select {
		case out <- batch:
		case <-ctx.Done():
			return ctx.Err()
		}
		batch, bytes, lastFlush = nil, 0, time.Now()
		if armed {
			linger.Stop()
			armed = false
		}
		return nil
	}
	add := func(it *item) error {
		if len(batch) > 0 && bytes+len(it.msg.Value) > p.cfg.BatchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, it)
		bytes += len(it.msg.Value)
		if len(batch) >= p.cfg.BatchSize || bytes >= p.cfg.BatchBytes {
			return flush()
		}
		wait := p.cfg.BatchLinger
		if len(out) == 0 && p.idleClaimers.Load() > 0 {
			if wait = gap - time.Since(lastFlush); wait <= 0 {
				return flush()
			}
		}
		if !armed {
			linger.Reset(wait)
			armed = true
		}
		return nil
	}
	for {
		select {
		case m, ok := <-in:
			if !ok {
				return flush()
			}
			p.metrics.inFlight.Inc()
			if err := add(p.decode(m)); err != nil {
				return err
			}
		case it := <-reenter:
			if err := add(it); err != nil {
				return err
			}
		case <-linger.C:
			armed = false
			if err := flush(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// claimGap is the least time between two partial batches handed to idle
// claimers: half of BatchLinger (2.5 ms by default), so a steady load of
// thousands of mails a second is claimed in batches, at most that much
// later. (A fifth gave twice the claims and, at 5,000 mails/s on two
// cores, 15 ms of p50 against 8.5: the claims' CPU is the queue.)
func (p *Pipeline) claimGap() time.Duration { return p.cfg.BatchLinger / 2 }

// decode turns a consumed record into an item and starts its deliver span.
// A record that is not a valid job leaves none, and is rejected.
func (p *Pipeline) decode(m consumer.Message) *item {
	it := &item{msg: m, attempt: jobheader.Attempt(m.Headers), throttles: jobheader.Throttles(m.Headers)}
	defer p.startDeliver(it)
	var err error
	if perr := p.contain("decoding", m, func() { it.hash, err = job.DecodeHashInto(&it.job, m.Value, p.cfg.Limits) }); perr != nil {
		it.job = job.Job{}
		it.rejected = &job.ValidationError{Reason: deadletter.ReasonInternalError, Detail: perr.Error()}
		return it
	}
	if err != nil {
		it.job = job.Job{}
		var ve *job.ValidationError
		if !errors.As(err, &ve) {
			ve = &job.ValidationError{Reason: job.ReasonMalformedJSON, Detail: err.Error()}
		}
		it.rejected = ve
	}
	return it
}

// claim handles one batch: it settles rejected records and claims the rest
// in one store round trip, passing claimed records to the senders and
// settling the others (duplicate, stale, busy, conflict: claimFate).
func (p *Pipeline) claim(ctx context.Context, src Source, batch []*item, sendQ chan<- *item, delays *delay.Queue[*item]) error {
	var (
		rejected []decided
		valid    []*item
	)
	for _, it := range batch {
		if it.rejected != nil {
			rejected = append(rejected, decided{it, rejectedFate(it.rejected)})
		} else {
			valid = append(valid, it)
		}
	}
	if len(rejected) > 0 {
		if err := p.settle(ctx, src, rejected, delays); err != nil {
			return err
		}
	}
	if len(valid) == 0 {
		return nil
	}

	lent := p.claimReqs.get(len(valid))
	defer p.claimReqs.put(lent)
	reqs := *lent
	for i, it := range valid {
		reqs[i] = idempotency.ClaimRequest{
			MessageID:   it.job.MessageID,
			PayloadHash: it.hash,
			Attempt:     it.attempt,
			Priority:    string(it.job.Priority),
			Tenant:      it.job.Tenant,
			EnqueuedAt:  firstSeen(it.msg),
			FirstSeen:   firstSeen(it.msg), // no record copy: Kafka redelivers the uncommitted record
		}
	}
	suppressions := p.lookUpSuppressions(ctx, valid)
	var claims []idempotency.Claim
	start := time.Now()
	if err := p.retry(ctx, opClaim, func(ctx context.Context) (err error) {
		claims, err = p.store.Claim(ctx, reqs)
		return err
	}); err != nil {
		return err
	}
	if len(claims) != len(valid) {
		return fmt.Errorf("delivery: store returned %d claims for %d requests", len(claims), len(valid))
	}
	p.traceRoundTrip(ctx, "claim", valid, start, time.Now(), func(i int) []attribute.KeyValue {
		return []attribute.KeyValue{attrResult.String(claimResultName(claims[i].Result))}
	})

	// Every claimed job's lease is kept from the claim on, before any of
	// them is queued for a sender: the queue holds only Senders jobs, and
	// the rest of the batch may wait behind it, for a slot at a throttled
	// relay, far longer than a lease.
	if p.leases != nil {
		for _, c := range claims {
			if c.Result == idempotency.Claimed {
				p.leases.Hold(c.MessageID, c.Version)
			}
		}
	}
	var (
		unclaimed, conflicts []decided
		claimed              []*item
	)
	for i, c := range claims {
		it := valid[i]
		if c.Result == idempotency.Claimed {
			it.version, it.life = c.Version, c.Life
			// The row's attempt from now on, not the record's header: a
			// copy without a row is a first attempt whatever it says.
			if c.Attempt > 0 {
				it.attempt = c.Attempt
			}
			it.initRecipients()
			claimed = append(claimed, it)
			continue
		}
		f, err := p.claimFate(c)
		if err != nil {
			return err
		}
		if f.kind == fateConflict {
			// Dead-lettered after the claimed jobs are on their way.
			conflicts = append(conflicts, decided{it, f})
		} else {
			unclaimed = append(unclaimed, decided{it, f})
		}
	}
	if len(unclaimed) > 0 {
		if err := p.settle(ctx, src, unclaimed, delays); err != nil {
			return err
		}
	}
	if err := p.loadRecipients(ctx, claimed); err != nil {
		return err
	}
	if err := p.suppress(claimed, suppressions); err != nil {
		return err
	}
	for _, it := range claimed {
		select {
		case sendQ <- it:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if len(conflicts) > 0 {
		return p.settle(ctx, src, conflicts, delays)
	}
	return nil
}

// retry calls fn until it succeeds or ctx ends, backing off exponentially.
// Store and dead-letter calls are not given up on while they may heal: a
// record is only done once its fate is durable. An error that retrying
// cannot mend (refused credentials, a missing topic or table: see
// dependencyMayHeal) is returned, so that the stage fails and the worker
// stops instead of trying again forever.
func (p *Pipeline) retry(ctx context.Context, op string, fn func(context.Context) error) error {
	err := backoff.Policy{First: p.cfg.StoreBackoff, Max: p.cfg.MaxStoreBackoff,
		Permanent: func(err error) bool { return !dependencyMayHeal(op, err) },
		OnWait: func(err error, _ int, _ time.Duration) {
			p.metrics.dependencyErrors.WithLabelValues(op).Inc()
			if p.degraded.CompareAndSwap(false, true) {
				p.logger.Error("dependency call failed; backing off until it recovers", "op", op, "error", err)
			} else {
				p.logger.Debug("dependency call failed again", "op", op, "error", err)
			}
		}}.Do(ctx, func() error { return fn(ctx) })
	switch {
	case err == nil:
		if p.degraded.CompareAndSwap(true, false) {
			p.logger.Info("dependency recovered", "op", op)
		}
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		p.metrics.dependencyErrors.WithLabelValues(op).Inc()
		p.degraded.Store(true)
		return fmt.Errorf("delivery: %s failed and trying again cannot mend it: %w", op, err)
	}
}

// dependencyMayHeal decides, per dependency, whether a failed call is
// worth making again: the Kafka calls by kafkaconn's rule, the Postgres
// ones by pgpool's.
func dependencyMayHeal(op string, err error) bool {
	switch op {
	case opDeadLetter, opRetryPublish, opEvents:
		return kafkaclient.MayHeal(err)
	}
	return pgpool.MayHeal(err)
}

// claimResultName names a claim result in outcome labels and span
// attributes.
func claimResultName(r idempotency.ClaimResult) string {
	switch r {
	case idempotency.Claimed:
		return "claimed"
	case idempotency.Duplicate:
		return "duplicate"
	case idempotency.Stale:
		return "stale"
	case idempotency.Conflict:
		return "conflict"
	case idempotency.Busy:
		return "busy"
	default:
		return "unknown"
	}
}

// firstSeen is when the job was first published: the first-seen header, or
// the record's own timestamp.
func firstSeen(m consumer.Message) time.Time {
	if t, ok := jobheader.FirstSeen(m.Headers); ok {
		return t
	}
	return m.Time
}

// rejectedID is the Message-ID a rejected record claims to carry: its Kafka
// key, which publishers set to the Message-ID, when that looks like one.
func rejectedID(it *item) string {
	k := string(it.msg.Key)
	if len(k) == 0 || len(k) > 250 {
		return ""
	}
	for _, r := range k {
		if r <= ' ' || r > '~' {
			return ""
		}
	}
	return k
}

// rawHash fingerprints a record that is not a valid job.
func rawHash(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:]
}
