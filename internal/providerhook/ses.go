package providerhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for SESConfig.
const (
	// DefaultSNSHostPattern matches the hosts of Amazon SNS in every
	// region, including China.
	DefaultSNSHostPattern = `^sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$`
	DefaultCertCacheSize  = 64
	DefaultFetchTimeout   = 10 * time.Second
)

// SESConfig configures the SES handler. It holds no secrets: SNS signs with
// its own certificates.
type SESConfig struct {
	// TopicARNs, when not empty, are the only SNS topics whose messages are
	// taken (and whose subscriptions are confirmed); others are refused with
	// 403. Set it in production: SNS signs the messages of every topic, so
	// without it the topic of any AWS account that subscribes this endpoint
	// is confirmed and its notifications believed. Defaults to empty: any
	// topic whose message verifies.
	TopicARNs []string
	// SNSHostPattern is the regular expression the host of SigningCertURL
	// and SubscribeURL must match; both must also be https. It must be
	// anchored (^...$), so that it matches whole host names. Defaults to
	// DefaultSNSHostPattern.
	SNSHostPattern string
	// HTTPClient fetches signing certificates and follows SubscribeURL; it
	// is never let follow a redirect. Defaults to a client with
	// FetchTimeout.
	HTTPClient *http.Client
	// FetchTimeout bounds one certificate fetch or confirmation. Defaults to
	// 10s.
	FetchTimeout time.Duration
	// CertCacheSize is how many signing certificates are kept, by URL.
	// Defaults to 64.
	CertCacheSize int
	// NoAutoConfirm stops the handler from confirming subscriptions: a
	// verified SubscriptionConfirmation is then only logged, and the
	// subscription is confirmed by hand. Defaults to false: a confirmation
	// whose SubscribeURL passes the host check is followed.
	NoAutoConfirm bool
	// MaxBodyBytes caps a request body; a larger one is refused with 413.
	// Defaults to 256 KiB.
	MaxBodyBytes int64
	// Token recovers a report's token from the envelope sender
	// (mail.source). Defaults to nil: reports name the mail by Message-ID
	// and recipient only.
	Token TokenFunc
}

// WithDefaults returns c with every zero field set to its default.
func (c SESConfig) WithDefaults() SESConfig {
	c.SNSHostPattern = cmp.Or(c.SNSHostPattern, DefaultSNSHostPattern)
	c.FetchTimeout = cmp.Or(c.FetchTimeout, DefaultFetchTimeout)
	c.CertCacheSize = cmp.Or(c.CertCacheSize, DefaultCertCacheSize)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: c.FetchTimeout}
	}
	return c
}

// Validate reports every invalid field of c, each by name and value. Call it
// on c.WithDefaults().
func (c SESConfig) Validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("providerhook ses config: %s = %v: %s", field, value, why))
	}
	if _, err := regexp.Compile(c.SNSHostPattern); err != nil {
		bad("SNSHostPattern", c.SNSHostPattern, err.Error())
	} else if !strings.HasPrefix(c.SNSHostPattern, "^") || !strings.HasSuffix(c.SNSHostPattern, "$") {
		bad("SNSHostPattern", c.SNSHostPattern, "must be anchored with ^ and $")
	}
	if c.HTTPClient == nil {
		bad("HTTPClient", "nil", "required")
	}
	if c.FetchTimeout <= 0 {
		bad("FetchTimeout", c.FetchTimeout, "must be positive")
	}
	if c.CertCacheSize <= 0 {
		bad("CertCacheSize", c.CertCacheSize, "must be positive")
	}
	if c.MaxBodyBytes <= 0 {
		bad("MaxBodyBytes", c.MaxBodyBytes, "must be positive")
	}
	for i, arn := range c.TopicARNs {
		if arn == "" {
			bad(fmt.Sprintf("TopicARNs[%d]", i), `""`, "must not be empty")
		}
	}
	return errors.Join(errs...)
}

// SES is the http.Handler for Amazon SES notifications delivered by an
// Amazon SNS HTTP(S) subscription.
type SES struct {
	cfg      SESConfig
	topics   map[string]bool
	verifier *snsVerifier
	client   *http.Client // cfg.HTTPClient, never following redirects
	reports  Reports
	logger   *slog.Logger
	metrics  *metrics
}

// NewSES returns the SES handler, which hands the reports of verified
// notifications to reports.
func NewSES(cfg SESConfig, reports Reports, logger *slog.Logger, reg prometheus.Registerer) (*SES, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reports == nil {
		return nil, errors.New("providerhook: NewSES: reports is nil")
	}
	if logger == nil {
		return nil, errors.New("providerhook: NewSES: logger is nil")
	}
	host := regexp.MustCompile(cfg.SNSHostPattern) // Validate compiled it
	client := *cfg.HTTPClient
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	v, err := newSNSVerifier(host, &client, cfg.FetchTimeout, cfg.CertCacheSize)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg, providerSES)
	if err != nil {
		return nil, err
	}
	logger = logger.With("provider", providerSES)
	var topics map[string]bool
	if len(cfg.TopicARNs) == 0 {
		logger.Warn("providerhook: no TopicARNs: the messages of any SNS topic that verify are taken")
	} else {
		topics = make(map[string]bool, len(cfg.TopicARNs))
		for _, arn := range cfg.TopicARNs {
			topics[arn] = true
		}
	}
	return &SES{cfg: cfg, topics: topics, verifier: v, client: &client, reports: reports,
		logger: logger, metrics: m}, nil
}

// ServeHTTP takes one SNS message: it verifies it, then confirms a
// subscription or applies the reports of a notification.
func (h *SES) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	servePost(w, r, h.cfg.MaxBodyBytes, h.metrics, h.handle)
}

func (h *SES) handle(r *http.Request, body []byte) (int, string) {
	msg, err := decodeSNS(body)
	if err != nil {
		h.logger.Debug("providerhook: refused sns message", "err", err)
		return http.StatusBadRequest, resultBadRequest
	}
	if h.topics != nil && !h.topics[msg.TopicArn] {
		h.logger.Debug("providerhook: refused sns message of a topic not allowed", "topic", msg.TopicArn)
		return http.StatusForbidden, resultForbidden
	}
	if err := h.verifier.verify(r.Context(), msg); err != nil {
		if errors.Is(err, errBadSignature) {
			h.logger.Debug("providerhook: refused sns message", "topic", msg.TopicArn, "err", err)
			return http.StatusForbidden, resultBadSignature
		}
		h.logger.Warn("providerhook: sns signing certificate unavailable", "topic", msg.TopicArn, "err", err)
		return http.StatusServiceUnavailable, resultCertError
	}

	switch msg.Type {
	case snsSubscriptionConfirmation:
		return h.confirm(r.Context(), msg)
	case snsUnsubscribeConfirmation:
		h.logger.Info("providerhook: sns subscription ended", "topic", msg.TopicArn)
		return http.StatusOK, resultIgnored
	}
	reports, err := sesReports([]byte(msg.Message), h.cfg.Token)
	if err != nil {
		// Verified, but not an SES notification (a message published to
		// the topic by hand, say); a retry would not change it.
		h.logger.Info("providerhook: sns notification is not an ses notification", "topic", msg.TopicArn, "err", err)
		return http.StatusOK, resultIgnored
	}
	if len(reports) == 0 {
		return http.StatusOK, resultIgnored
	}
	if err := h.reports.ApplySigned(r.Context(), reports); err != nil {
		h.logger.Warn("providerhook: apply ses reports", "reports", len(reports), "err", err)
		return http.StatusServiceUnavailable, resultApplyError
	}
	h.metrics.applied(reports)
	return http.StatusOK, resultOK
}

// confirm follows the SubscribeURL of a verified confirmation when it is an
// SNS URL and auto-confirmation is on.
func (h *SES) confirm(ctx context.Context, msg *snsMessage) (int, string) {
	if h.cfg.NoAutoConfirm {
		h.logger.Info("providerhook: sns subscription awaits confirmation by hand", "topic", msg.TopicArn)
		return http.StatusOK, resultIgnored
	}
	if err := h.verifier.allowedURL(msg.SubscribeURL); err != nil {
		h.logger.Warn("providerhook: sns SubscribeURL refused", "topic", msg.TopicArn, "err", err)
		return http.StatusForbidden, resultForbidden
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, msg.SubscribeURL, nil)
	if err != nil {
		h.logger.Warn("providerhook: sns SubscribeURL refused", "topic", msg.TopicArn)
		return http.StatusForbidden, resultForbidden
	}
	resp, err := h.client.Do(req)
	if err != nil {
		// The URL carries the subscription's token: log the cause only.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		h.logger.Warn("providerhook: confirm sns subscription", "topic", msg.TopicArn, "err", err)
		return http.StatusBadGateway, resultConfirmError
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxCertBytes))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		h.logger.Warn("providerhook: confirm sns subscription", "topic", msg.TopicArn, "status", resp.StatusCode)
		return http.StatusBadGateway, resultConfirmError
	}
	h.logger.Info("providerhook: sns subscription confirmed", "topic", msg.TopicArn)
	return http.StatusOK, resultOK
}
