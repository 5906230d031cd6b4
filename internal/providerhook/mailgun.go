package providerhook

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/report"
)

// Defaults for MailgunConfig.
const (
	DefaultMailgunMaxAge   = 5 * time.Minute
	DefaultReplayCacheSize = 100_000
	maxMailgunTokenBytes   = 256
	maxMailgunSignatureHex = 2 * sha256.Size
	redacted               = "[redacted]"
)

// MailgunConfig configures the Mailgun handler. Its String, GoString and
// LogValue never show SigningKey.
type MailgunConfig struct {
	// SigningKey is the domain's HTTP webhook signing key, the HMAC-SHA256
	// key of every webhook's signature. Required.
	SigningKey string
	// MaxAge is how far a webhook's signed timestamp may be from now, either
	// way; older (or later) requests are refused. Defaults to 5m.
	MaxAge time.Duration
	// ReplayCacheSize is how many signed tokens are remembered to refuse a
	// replayed request. It should exceed the webhook rate times twice
	// MaxAge: a token pushed out while its timestamp is still in the window
	// could be replayed. Defaults to 100000.
	ReplayCacheSize int
	// MaxBodyBytes caps a request body; a larger one is refused with 413.
	// Defaults to 256 KiB.
	MaxBodyBytes int64
	// Token recovers a report's token from the envelope sender
	// (envelope.sender). Defaults to nil: reports name the mail by
	// Message-ID and recipient only.
	Token TokenFunc
	// NowFunc is the clock the timestamp window is checked against.
	// Defaults to time.Now.
	NowFunc func() time.Time
}

// WithDefaults returns c with every zero field set to its default.
func (c MailgunConfig) WithDefaults() MailgunConfig {
	c.MaxAge = cmp.Or(c.MaxAge, DefaultMailgunMaxAge)
	c.ReplayCacheSize = cmp.Or(c.ReplayCacheSize, DefaultReplayCacheSize)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	return c
}

// Validate reports every invalid field of c, each by name and value (never
// the signing key's). Call it on c.WithDefaults().
func (c MailgunConfig) Validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("providerhook mailgun config: %s = %v: %s", field, value, why))
	}
	if c.SigningKey == "" {
		bad("SigningKey", `""`, "required")
	}
	if c.MaxAge <= 0 {
		bad("MaxAge", c.MaxAge, "must be positive")
	}
	if c.ReplayCacheSize <= 0 {
		bad("ReplayCacheSize", c.ReplayCacheSize, "must be positive")
	}
	if c.MaxBodyBytes <= 0 {
		bad("MaxBodyBytes", c.MaxBodyBytes, "must be positive")
	}
	if c.NowFunc == nil {
		bad("NowFunc", "nil", "required")
	}
	return errors.Join(errs...)
}

// String describes c with the signing key redacted.
func (c MailgunConfig) String() string {
	key := ""
	if c.SigningKey != "" {
		key = redacted
	}
	return fmt.Sprintf("{SigningKey:%s MaxAge:%s ReplayCacheSize:%d MaxBodyBytes:%d Token:%t}",
		key, c.MaxAge, c.ReplayCacheSize, c.MaxBodyBytes, c.Token != nil)
}

// GoString is String, so %#v does not print the key either.
func (c MailgunConfig) GoString() string { return "providerhook.MailgunConfig" + c.String() }

// LogValue logs c with the signing key redacted.
func (c MailgunConfig) LogValue() slog.Value {
	key := ""
	if c.SigningKey != "" {
		key = redacted
	}
	return slog.GroupValue(
		slog.String("signing_key", key),
		slog.Duration("max_age", c.MaxAge),
		slog.Int("replay_cache_size", c.ReplayCacheSize),
		slog.Int64("max_body_bytes", c.MaxBodyBytes),
		slog.Bool("token", c.Token != nil),
	)
}

// Mailgun is the http.Handler for Mailgun's event webhooks.
type Mailgun struct {
	cfg     MailgunConfig
	key     []byte
	seen    *lru.Cache[string, struct{}]
	reports Reports
	logger  *slog.Logger
	metrics *metrics
}

// NewMailgun returns the Mailgun handler, which hands the reports of
// verified events to reports.
func NewMailgun(cfg MailgunConfig, reports Reports, logger *slog.Logger, reg prometheus.Registerer) (*Mailgun, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reports == nil {
		return nil, errors.New("providerhook: NewMailgun: reports is nil")
	}
	if logger == nil {
		return nil, errors.New("providerhook: NewMailgun: logger is nil")
	}
	seen, err := lru.New[string, struct{}](cfg.ReplayCacheSize)
	if err != nil {
		return nil, fmt.Errorf("providerhook: replay cache: %w", err)
	}
	m, err := newMetrics(reg, providerMailgun)
	if err != nil {
		return nil, err
	}
	return &Mailgun{cfg: cfg, key: []byte(cfg.SigningKey), seen: seen, reports: reports,
		logger: logger.With("provider", providerMailgun), metrics: m}, nil
}

// mailgunWebhook is the JSON body of a Mailgun webhook. The event stays
// raw until the signature verified.
type mailgunWebhook struct {
	Signature struct {
		Timestamp string `json:"timestamp"`
		Token     string `json:"token"`
		Signature string `json:"signature"`
	} `json:"signature"`
	EventData json.RawMessage `json:"event-data"`
}

// ServeHTTP takes one webhook: it verifies the signature, the timestamp
// window and that the token is new, then applies the event's report.
func (h *Mailgun) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	servePost(w, r, h.cfg.MaxBodyBytes, h.metrics, h.handle)
}

func (h *Mailgun) handle(r *http.Request, body []byte) (int, string) {
	var hook mailgunWebhook
	if err := json.Unmarshal(body, &hook); err != nil {
		h.logger.Debug("providerhook: refused mailgun webhook", "err", err)
		return http.StatusBadRequest, resultBadRequest
	}
	sig := hook.Signature
	if sig.Timestamp == "" || sig.Token == "" || sig.Signature == "" ||
		len(sig.Token) > maxMailgunTokenBytes || len(sig.Signature) > maxMailgunSignatureHex ||
		len(hook.EventData) == 0 {
		h.logger.Debug("providerhook: refused mailgun webhook without a signature or event")
		return http.StatusBadRequest, resultBadRequest
	}
	if !h.signed(sig.Timestamp, sig.Token, sig.Signature) {
		h.logger.Debug("providerhook: refused mailgun webhook: signature does not verify")
		return http.StatusUnauthorized, resultBadSignature
	}
	if !h.fresh(sig.Timestamp) {
		h.logger.Debug("providerhook: refused mailgun webhook: timestamp outside the window", "timestamp", sig.Timestamp)
		return http.StatusUnauthorized, resultExpired
	}
	if found, _ := h.seen.ContainsOrAdd(sig.Token, struct{}{}); found {
		// 406 tells Mailgun not to retry: the request was taken already
		// (or is a replay by someone else).
		h.logger.Debug("providerhook: refused mailgun webhook: token replayed")
		return http.StatusNotAcceptable, resultReplayed
	}

	reports, err := mailgunReports(hook.EventData, h.cfg.Token)
	if err != nil {
		h.logger.Info("providerhook: verified mailgun webhook without a readable event", "err", err)
		return http.StatusOK, resultIgnored
	}
	if len(reports) == 0 {
		return http.StatusOK, resultIgnored
	}
	if err := h.reports.ApplySigned(r.Context(), reports); err != nil {
		// Mailgun retries; forget the token so a retry that carries it is
		// taken.
		h.seen.Remove(sig.Token)
		h.logger.Warn("providerhook: apply mailgun reports", "reports", len(reports), "err", err)
		return http.StatusServiceUnavailable, resultApplyError
	}
	h.metrics.applied(reports)
	return http.StatusOK, resultOK
}

// signed reports whether signature is the hex HMAC-SHA256 of timestamp and
// token under the signing key, compared in constant time.
func (h *Mailgun) signed(timestamp, token, signature string) bool {
	got, err := hex.DecodeString(signature)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, h.key)
	mac.Write([]byte(timestamp))
	mac.Write([]byte(token))
	return hmac.Equal(got, mac.Sum(nil))
}

// fresh reports whether the signed Unix timestamp is within MaxAge of now.
func (h *Mailgun) fresh(timestamp string) bool {
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return false
	}
	d := h.cfg.NowFunc().Sub(time.Unix(sec, 0))
	return d <= h.cfg.MaxAge && d >= -h.cfg.MaxAge
}

// mailgunEvent is the part of Mailgun's event-data that reports are made of.
type mailgunEvent struct {
	Event     string  `json:"event"`
	Timestamp float64 `json:"timestamp"`
	Severity  string  `json:"severity"`
	Reason    string  `json:"reason"`
	Recipient string  `json:"recipient"`
	Envelope  struct {
		Sender string `json:"sender"`
	} `json:"envelope"`
	DeliveryStatus struct {
		Code         int    `json:"code"`
		EnhancedCode string `json:"enhanced-code"`
		BounceCode   string `json:"bounce-code"`
		Message      string `json:"message"`
		Description  string `json:"description"`
		MXHost       string `json:"mx-host"`
	} `json:"delivery-status"`
	Message struct {
		Headers map[string]json.RawMessage `json:"headers"`
	} `json:"message"`
}

// mailgunReports turns the event-data of a verified webhook into its
// report: none for events other than delivered, failed and complained
// (unsubscribed, opened, clicked, accepted, ...).
//
// A failure is read by its severity and reason:
//
//   - temporary: Mailgun goes on retrying, and its final verdict comes as
//     a delivery or a permanent failure, so it resolves nothing (Delayed).
//   - permanent with reason bounce (the server refused the address) or
//     suppress-bounce (Mailgun dropped the mail: the address bounced
//     before): a hard bounce that suppresses the address (Hard).
//   - permanent with any other reason: a bounce the rules classify from the
//     reply Mailgun quotes. Among them old (Mailgun gave up retrying
//     temporary failures), espblock, generic (a delayed bounce's reply says
//     what it is), and suppress-unsubscribe and suppress-complaint (Mailgun
//     dropped the mail because the address unsubscribed or complained
//     before: that says nothing about the address existing, and a
//     suppression on every stream would stop password resets too).
//
// A complaint is the complained event; Mailgun's own unsubscribe event is
// not a report.
func mailgunReports(data []byte, token TokenFunc) ([]report.Report, error) {
	var e mailgunEvent
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("decode mailgun event: %w", err)
	}
	r := report.Report{
		Source:    report.SourceMailgun,
		Recipient: address(e.Recipient),
		Token:     envelopeToken(token, e.Envelope.Sender),
		MessageID: e.messageID(),
		At:        unixSeconds(e.Timestamp),
	}
	switch e.Event {
	case "delivered":
		r.Kind = report.Delivered
	case "failed":
		r.Kind = report.Bounced
		switch strings.ToLower(e.Severity) {
		case "permanent":
			r.Permanent = boolPtr(true)
			switch strings.ToLower(e.Reason) {
			case "bounce", "suppress-bounce":
				r.Hard = true
			}
		case "temporary":
			// Mailgun keeps retrying a temporary failure: it resolves
			// nothing yet, and a final one comes as permanent.
			r.Kind, r.Permanent = report.Delayed, boolPtr(false)
		}
	case "complained":
		r.Kind = report.Complained
	case "":
		return nil, errors.New("decode mailgun event: no event name")
	default:
		return nil, nil
	}
	if r.Recipient == "" {
		return nil, fmt.Errorf("decode mailgun event: %s without a recipient", e.Event)
	}
	if r.Kind != report.Complained {
		ds := e.DeliveryStatus
		code, enhanced, text := smtpReply(cmp.Or(strings.TrimSpace(ds.Message), ds.Description))
		r.Code = cmp.Or(validCode(ds.Code), code)
		r.Status = cmp.Or(validStatus(ds.EnhancedCode), validStatus(ds.BounceCode), enhanced)
		r.Diagnostic = text
		r.RemoteMTA = oneLine(ds.MXHost)
	}
	return []report.Report{r}, nil
}

// messageID returns the event's Message-ID header (Mailgun lowercases the
// header names), "" when absent.
func (e *mailgunEvent) messageID() string {
	name := ""
	if _, ok := e.Message.Headers["message-id"]; ok {
		name = "message-id"
	} else {
		// Another spelling; the least one, so duplicates decide the same
		// way every time.
		for n := range e.Message.Headers {
			if strings.EqualFold(n, "message-id") && (name == "" || n < name) {
				name = n
			}
		}
	}
	var v string
	if name == "" || json.Unmarshal(e.Message.Headers[name], &v) != nil {
		return ""
	}
	return messageID(v)
}

// unixSeconds converts Mailgun's fractional Unix time, to the microsecond
// it is given in; zero when absent or out of range.
func unixSeconds(f float64) time.Time {
	if !(f > 0 && f < 1<<40) {
		return time.Time{}
	}
	return time.UnixMicro(int64(math.Round(f * 1e6))).UTC()
}
