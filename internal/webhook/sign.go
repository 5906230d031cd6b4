package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The Standard Webhooks headers.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// secretPrefix starts every Standard Webhooks secret.
const secretPrefix = "whsec_"

// Secret sizes the Standard Webhooks specification recommends.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// Signer signs webhook requests with one endpoint's secret.
type Signer struct {
	wh *standardwebhooks.Webhook
}

// NewSigner returns a Signer for secret, "whsec_" and the base64 of 24 to
// 64 random bytes. Its errors say what is wrong with the secret, never
// what it is.
func NewSigner(secret string) (*Signer, error) {
	if secret == "" {
		return nil, errors.New("secret is empty")
	}
	rest, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("secret does not start with %q", secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("secret after %q is not standard base64", secretPrefix)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("secret holds %d bytes, want %d to %d", len(key), MinSecretBytes, MaxSecretBytes)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, errors.New("secret is not accepted by the signing library")
	}
	return &Signer{wh: wh}, nil
}

// Sign sets the webhook-id, webhook-timestamp and webhook-signature
// headers of h for body, sent with id at ts.
func (s *Signer) Sign(h http.Header, id string, ts time.Time, body []byte) error {
	sig, err := s.wh.Sign(id, ts, body)
	if err != nil {
		return fmt.Errorf("sign webhook: %w", err)
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return nil
}
