package unsubscribe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/internal/suppression"
)

// Channel is how an unsubscribe came in: the channel label of
// postline_unsubscribe_requests_total.
type Channel string

// The channels.
const (
	// ChannelPost is a POST to a one-click link (RFC 8058's, or the form
	// of the page a GET shows).
	ChannelPost Channel = "post"
	// ChannelGet is a GET of a one-click link: a person's click, or a
	// scanner following links. It shows a page and changes nothing.
	ChannelGet Channel = "get"
	// ChannelMailto is a message to the mailto address.
	ChannelMailto Channel = "mailto"
)

// Result is what became of one request: the result label of
// postline_unsubscribe_requests_total.
type Result string

// The results.
const (
	// ResultOK: the token verified; for a POST or a message, the address
	// was unsubscribed and the event published.
	ResultOK Result = "ok"
	// ResultReplayed: the address was already unsubscribed (or suppressed
	// more strongly) on the token's stream: nothing changed, no event.
	ResultReplayed Result = "replayed"
	// ResultForged: the token's HMAC matches no key. Nothing changed.
	ResultForged Result = "forged"
	// ResultMalformed: not a token. Nothing changed.
	ResultMalformed Result = "malformed"
	// ResultError: the suppression lists or the events topic failed; the
	// caller is asked to try again (503, 451).
	ResultError Result = "error"
)

// Channels and Results list the label values, whose series exist from the
// start.
var (
	Channels = []Channel{ChannelPost, ChannelGet, ChannelMailto}
	Results  = []Result{ResultOK, ResultReplayed, ResultForged, ResultMalformed, ResultError}
)

// Events publishes events; it returns once they are durable. An
// eventstream.Writer. Safe for concurrent use.
type Events interface {
	Publish(ctx context.Context, events ...event.Event) error
}

// Lists are the suppression lists (a *suppression.Store). Safe for
// concurrent use.
type Lists interface {
	List(ctx context.Context, f suppression.Filter) ([]suppression.Entry, error)
	Add(ctx context.Context, entries []suppression.Entry) (int, error)
}

var _ Lists = (*suppression.Store)(nil)

// The Source of the suppression entries an unsubscribe adds, by channel.
const (
	SourceOneClick = "one_click"
	SourceMailto   = "mailto"
)

// Config configures an Applier.
type Config struct {
	// NowFunc is the clock of the events and entries. Defaults to
	// time.Now.
	NowFunc func() time.Time
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return cfg
}

// Applier takes unsubscribes in: it verifies the token, and applies a
// verified one once. It is safe for concurrent use.
type Applier struct {
	cfg      Config
	logger   *slog.Logger
	signer   *Signer
	events   Events
	lists    Lists
	requests *prometheus.CounterVec
}

// NewApplier returns an Applier verifying tokens with signer. A nil
// logger discards logs; reg may be nil (no metrics).
func NewApplier(cfg Config, logger *slog.Logger, reg prometheus.Registerer, signer *Signer, events Events, lists Lists) (*Applier, error) {
	cfg = cfg.WithDefaults()
	if signer == nil || events == nil || lists == nil {
		return nil, errors.New("unsubscribe: the signer, events and lists are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	set := metricreg.NewExclusiveSet(reg, "unsubscribe")
	requests := set.CounterVec("requests_total", "Unsubscribe requests (one-click POSTs, GETs of the links, mail to the unsubscribe addresses), by channel and result.", "channel", "result")
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("unsubscribe: register metrics: %w", err)
	}
	for _, c := range Channels {
		for _, r := range Results {
			requests.WithLabelValues(string(c), string(r))
		}
	}
	return &Applier{cfg: cfg, logger: logger, signer: signer, events: events, lists: lists, requests: requests}, nil
}

// Check verifies token and counts it for channel, changing nothing: a GET
// of a link. It returns what the token names when it verifies.
func (a *Applier) Check(channel Channel, token string) (Token, Result) {
	t, r := a.verify(token)
	a.requests.WithLabelValues(string(channel), string(r)).Inc()
	return t, r
}

func (a *Applier) verify(token string) (Token, Result) {
	t, err := a.signer.Verify(token)
	switch {
	case errors.Is(err, ErrForged):
		return Token{}, ResultForged
	case err != nil:
		return Token{}, ResultMalformed
	}
	return t, ResultOK
}

// Apply takes an unsubscribe in from channel. A token that verifies and
// whose address is not yet unsubscribed (or suppressed more strongly) on
// its tenant's stream gets its unsubscribed event published, then its
// suppression entry added (ResultOK): should the entry fail after the
// event went out, the caller's retry publishes a copy of the event, with
// its ID, and adds the entry. A token already applied changes nothing
// (ResultReplayed). err is set only with ResultError: the lists or the
// events topic failed, and the caller should be asked to try again.
func (a *Applier) Apply(ctx context.Context, channel Channel, token string) (Result, error) {
	r, err := a.apply(ctx, channel, token)
	a.requests.WithLabelValues(string(channel), string(r)).Inc()
	return r, err
}

func (a *Applier) apply(ctx context.Context, channel Channel, token string) (Result, error) {
	t, r := a.verify(token)
	if r != ResultOK {
		// Neither the token nor anything it might name is logged.
		a.logger.Debug("unsubscribe refused", "channel", string(channel), "result", string(r))
		return r, nil
	}
	now := a.cfg.NowFunc()
	addr, err := suppression.Normalize(t.Address)
	if err != nil {
		// Links signs only addresses that normalize.
		return ResultMalformed, nil
	}
	source := SourceOneClick
	if channel == ChannelMailto {
		source = SourceMailto
	}
	entry := suppression.Entry{Tenant: t.Tenant, Stream: suppression.Stream(t.Stream), Address: addr,
		Reason: suppression.ReasonUnsubscribe, Source: source, MessageID: t.MessageID, CreatedAt: now}
	tenant := t.Tenant
	// The entry of exactly this key, if any: the address sorts first among
	// the addresses it is a prefix of.
	old, err := a.lists.List(ctx, suppression.Filter{Tenant: &tenant, Stream: entry.Stream, AddressPrefix: addr, Limit: 1})
	if err != nil {
		return ResultError, fmt.Errorf("unsubscribe: read the suppression list: %w", err)
	}
	if len(old) == 1 && old[0].Address == addr && !suppression.Supersedes(entry, old[0], now) {
		a.logger.Debug("unsubscribe already applied", "channel", string(channel), "message_id", t.MessageID, "stream", t.Stream)
		return ResultReplayed, nil
	}
	e := event.Event{
		Schema:         event.Schema,
		ID:             event.NewLifeID(t.MessageID, t.Life, t.Recipient, event.Unsubscribed, 0),
		Type:           event.Unsubscribed,
		At:             now.UTC(),
		MessageID:      t.MessageID,
		Tenant:         t.Tenant,
		Stream:         t.Stream,
		Recipient:      t.Address,
		RecipientIndex: t.Recipient,
	}
	if err := a.events.Publish(ctx, e); err != nil {
		return ResultError, fmt.Errorf("unsubscribe: publish the event: %w", err)
	}
	if _, err := a.lists.Add(ctx, []suppression.Entry{entry}); err != nil {
		return ResultError, fmt.Errorf("unsubscribe: add the suppression entry: %w", err)
	}
	a.logger.Info("unsubscribed", "channel", string(channel), "message_id", t.MessageID, "stream", t.Stream)
	return ResultOK, nil
}
