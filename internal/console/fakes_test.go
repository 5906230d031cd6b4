package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/webhook"
)

// fakeMail is the mail read layer as the tests need it: one page of mail
// for any search and the lives of those mails; it records the filters.
type fakeMail struct {
	mu      sync.Mutex
	mails   []mailquery.Mail
	lives   map[string]mailquery.Life
	next    string
	filters []mailquery.Filter
	// findErr, when set, is Find's answer.
	findErr error
}

func (f *fakeMail) Find(_ context.Context, flt mailquery.Filter) (mailquery.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.filters = append(f.filters, flt)
	if f.findErr != nil {
		return mailquery.Page{}, f.findErr
	}
	return mailquery.Page{Mails: f.mails, Next: f.next}, nil
}

func (f *fakeMail) Life(_ context.Context, id string) (mailquery.Life, error) {
	if l, ok := f.lives[id]; ok {
		return l, nil
	}
	return mailquery.Life{}, fmt.Errorf("life of %s: %w", id, errNoSuchMail)
}

// errNoSuchMail stands in for mailquery.ErrNotFound.
var errNoSuchMail = errors.New("no such mail")

// sampleMail is one bounced mail with a full life.
func sampleMail() (mailquery.Mail, mailquery.Life) {
	at := time.Date(2026, 12, 5, 14, 49, 17, 0, time.UTC)
	m := mailquery.Mail{MessageID: "m1@postline.test", Tenant: "acme", Status: "sent", Stream: "transactional", Priority: "normal",
		Provider: "primary", Confirmation: "confirmed", Attempt: 1, CreatedAt: at, UpdatedAt: at, SentAt: at,
		Recipients: []mailquery.Recipient{
			{Index: 0, Address: "ada@example.com", State: "delivered", Code: 250, Status: "2.0.0", Source: "dsn", ResolvedAt: at},
			{Index: 1, Address: "bob@example.com", State: "bounced", BounceType: "hard", Code: 550, Status: "5.1.1",
				Diagnostic: "smtp; 550 5.1.1 no such user", Source: "dsn", ResolvedAt: at},
		}}
	l := mailquery.Life{Mail: m, DKIMDomain: "postline.test", Template: &mailquery.TemplateUse{Name: "welcome", Version: 3, Why: "label live"},
		Entries: []mailquery.Entry{
			{At: at, Type: "claimed", RecipientIndex: -1, Attempt: 1},
			{At: at.Add(time.Second), Type: "accepted", RecipientIndex: 0, Recipient: "ada@example.com", Attempt: 1, Provider: "primary", Code: 250},
			{At: at.Add(2 * time.Second), Type: "bounced", RecipientIndex: 1, Recipient: "bob@example.com", Code: 550, Status: "5.1.1",
				Diagnostic: "smtp; 550 5.1.1 no such user", BounceType: "hard", Rule: "user_unknown", Source: "dsn"},
			{At: at.Add(time.Hour), Type: "redriven", RecipientIndex: -1, Attempt: 2, Note: "relay fixed", Actor: "olga"},
		},
		Webhooks: []mailquery.WebhookDelivery{{Endpoint: "crm", EventID: "e1", EventType: "bounced", State: "dead", Attempts: 13, LastStatus: 503,
			LastError: "HTTP 503", DeadAt: at.Add(72 * time.Hour), DeadReason: "horizon"}}}
	return m, l
}

// fakeAccounts are sessions by token, for the tests without PostgreSQL.
type fakeAccounts struct {
	sessions map[string]operator.Session
}

func (f *fakeAccounts) Login(context.Context, string, string, string) (operator.Session, error) {
	return operator.Session{}, operator.ErrWrongPassword
}

func (f *fakeAccounts) Lookup(_ context.Context, token string) (operator.Session, error) {
	if s, ok := f.sessions[token]; ok {
		return s, nil
	}
	return operator.Session{}, operator.ErrNoSession
}

func (f *fakeAccounts) Logout(_ context.Context, token string) error {
	delete(f.sessions, token)
	return nil
}

// fakeAudit keeps entries in memory.
type fakeAudit struct {
	mu      sync.Mutex
	entries []operator.AuditEntry
}

func (f *fakeAudit) Write(_ context.Context, actor, action string, _ any, result, client string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, operator.AuditEntry{Actor: actor, Action: action, Result: result, Client: client})
	return nil
}

func (f *fakeAudit) Read(context.Context, operator.AuditFilter) ([]operator.AuditEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]operator.AuditEntry(nil), f.entries...), nil
}

// fakeSuppressions is a list of entries (Add appends: it keeps no rule).
type fakeSuppressions struct {
	entries []suppression.Entry
}

func (f *fakeSuppressions) List(context.Context, suppression.Filter) ([]suppression.Entry, error) {
	return f.entries, nil
}

func (f *fakeSuppressions) Add(_ context.Context, e []suppression.Entry) (int, error) {
	f.entries = append(f.entries, e...)
	return len(e), nil
}

func (f *fakeSuppressions) Check(_ context.Context, keys []suppression.Key) (map[suppression.Key]suppression.Entry, error) {
	out := map[suppression.Key]suppression.Entry{}
	for _, k := range keys {
		for _, e := range f.entries {
			// As the store: an entry of the key's stream or of every stream.
			if e.Tenant == k.Tenant && e.Address == k.Address && (e.Stream == k.Stream || e.Stream == suppression.StreamAll) {
				out[k] = e
			}
		}
	}
	return out, nil
}

func (f *fakeSuppressions) Import(ctx context.Context, e []suppression.Entry) (int, error) {
	return f.Add(ctx, e)
}

func (f *fakeSuppressions) Remove(_ context.Context, keys []suppression.Key) (int, error) {
	n := 0
	for _, k := range keys {
		for i, e := range f.entries {
			if e.Key() == k {
				f.entries = append(f.entries[:i], f.entries[i+1:]...)
				n++
				break
			}
		}
	}
	return n, nil
}

// fakeRedriver plans and runs from fixed summaries, recording the filters;
// a run waits for release when it is set.
type fakeRedriver struct {
	mu      sync.Mutex
	letters []redrive.DeadLetter
	plan    redrive.Summary
	plans   []redrive.Filter
	runs    []redrive.Filter
	opts    []redrive.Options
	release chan struct{}
	// planErr, when set, is Plan's answer.
	planErr error
}

func (f *fakeRedriver) List(_ context.Context, flt redrive.Filter, fn func(redrive.DeadLetter) error) error {
	for _, l := range f.letters {
		if flt.Match(l) {
			if err := fn(l); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *fakeRedriver) Plan(_ context.Context, flt redrive.Filter) (redrive.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plans = append(f.plans, flt)
	if f.planErr != nil {
		return redrive.Summary{}, f.planErr
	}
	return f.plan, nil
}

func (f *fakeRedriver) Run(ctx context.Context, flt redrive.Filter, o redrive.Options) (redrive.Summary, error) {
	f.mu.Lock()
	f.runs, f.opts = append(f.runs, flt), append(f.opts, o)
	release := f.release
	f.mu.Unlock()
	s := f.plan
	s.DryRun = false
	if o.Progress != nil {
		o.Progress(redrive.Summary{Matched: 1})
	}
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return redrive.Summary{}, ctx.Err()
		}
	}
	return s, nil
}

func (f *fakeRedriver) calls() (plans, runs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.plans), len(f.runs)
}

// fakeWebhooks is endpoints in memory.
type fakeWebhooks struct {
	mu        sync.Mutex
	endpoints []webhook.EndpointReport
	replays   []webhook.ReplayFilter
	dead      int
}

func (f *fakeWebhooks) Endpoints(context.Context) ([]webhook.EndpointReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]webhook.EndpointReport(nil), f.endpoints...), nil
}

func (f *fakeWebhooks) SetDisabled(_ context.Context, endpoint string, disable bool, reason, _ string, now time.Time) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, e := range f.endpoints {
		if e.Endpoint != endpoint {
			continue
		}
		if e.Disabled() == disable {
			return false, nil
		}
		f.endpoints[i].DisabledAt, f.endpoints[i].DisabledReason = time.Time{}, ""
		if disable {
			f.endpoints[i].DisabledAt, f.endpoints[i].DisabledReason = now, reason
		}
		return true, nil
	}
	return false, nil
}

func (f *fakeWebhooks) Replay(_ context.Context, flt webhook.ReplayFilter, _ float64, dryRun bool, _ string, _ time.Time) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !dryRun {
		f.replays = append(f.replays, flt)
	}
	return f.dead, nil
}

func (f *fakeWebhooks) Log(_ context.Context, endpoint string, _ int) ([]webhook.LogEntry, error) {
	if endpoint == "billing" {
		return []webhook.LogEntry{{At: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC), Action: "disabled", Actor: "console:olga", Detail: "migrating"}}, nil
	}
	return nil, nil
}

func (f *fakeWebhooks) Requeue(_ context.Context, ps []webhook.Pending, _ float64, flt webhook.ReplayFilter, _ string, _ time.Time) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replays = append(f.replays, flt)
	return len(ps), nil
}

// fakeFleet is the fleet views as a test sets them. Its histogram has the
// buckets the query asks for, with letters counted in theirs; it records
// the queries.
type fakeFleet struct {
	mu                              sync.Mutex
	queues                          fleet.Queues
	relays                          fleet.Relays
	letters                         []redrive.DeadLetter
	queuesErr, relaysErr, histogErr error
	asked                           []fleet.HistogramQuery
}

func (f *fakeFleet) Queues(context.Context) (fleet.Queues, error) { return f.queues, f.queuesErr }

func (f *fakeFleet) Relays(context.Context) (fleet.Relays, error) { return f.relays, f.relaysErr }

func (f *fakeFleet) DeadLetterHistogram(_ context.Context, q fleet.HistogramQuery) (fleet.Histogram, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, q)
	if f.histogErr != nil {
		return fleet.Histogram{}, f.histogErr
	}
	h := fleet.Histogram{Since: q.Since, Until: q.Until, Bucket: q.Bucket, BucketSeconds: q.Bucket.Seconds(), Reasons: []fleet.ReasonCount{}}
	totals := map[string]int{}
	for start := q.Since.Truncate(q.Bucket); start.Before(q.Until); start = start.Add(q.Bucket) {
		b := fleet.Bucket{Start: start, End: start.Add(q.Bucket), ByReason: map[string]int{}}
		for _, l := range f.letters {
			if !l.Time.Before(b.Start) && l.Time.Before(b.End) && !l.Time.Before(q.Since) && l.Time.Before(q.Until) {
				b.Total++
				b.ByReason[l.Reason]++
				totals[l.Reason]++
				h.Total++
			}
		}
		h.Buckets = append(h.Buckets, b)
	}
	for reason, n := range totals {
		h.Reasons = append(h.Reasons, fleet.ReasonCount{Reason: reason, Count: n})
	}
	slices.SortFunc(h.Reasons, func(a, b fleet.ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Reason, b.Reason))
	})
	return h, nil
}
