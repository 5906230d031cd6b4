package providerhook

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// The SNS message types.
const (
	snsNotification             = "Notification"
	snsSubscriptionConfirmation = "SubscriptionConfirmation"
	snsUnsubscribeConfirmation  = "UnsubscribeConfirmation"
)

// maxCertBytes caps a fetched signing certificate.
const maxCertBytes = 64 << 10

// snsMessage is the JSON document SNS posts to an HTTP(S) endpoint.
type snsMessage struct {
	Type             string  `json:"Type"`
	MessageID        string  `json:"MessageId"`
	Token            string  `json:"Token"`
	TopicArn         string  `json:"TopicArn"`
	Subject          *string `json:"Subject"` // signed only when present
	Message          string  `json:"Message"`
	SubscribeURL     string  `json:"SubscribeURL"`
	Timestamp        string  `json:"Timestamp"`
	SignatureVersion string  `json:"SignatureVersion"`
	Signature        string  `json:"Signature"`
	SigningCertURL   string  `json:"SigningCertURL"`
}

// errBadSignature marks a message that does not verify (as opposed to a
// certificate that could not be fetched).
var errBadSignature = errors.New("sns signature does not verify")

// stringToSign returns the canonical text SNS signs for m: the name and
// value of each signed field, each on its own line, in byte order of the
// names. A Notification signs Message, MessageId, Subject (when present),
// Timestamp, TopicArn and Type; the confirmations sign Message, MessageId,
// SubscribeURL, Timestamp, Token, TopicArn and Type.
func (m *snsMessage) stringToSign() (string, error) {
	var b strings.Builder
	field := func(name, value string) {
		b.WriteString(name)
		b.WriteByte('\n')
		b.WriteString(value)
		b.WriteByte('\n')
	}
	switch m.Type {
	case snsNotification:
		field("Message", m.Message)
		field("MessageId", m.MessageID)
		if m.Subject != nil {
			field("Subject", *m.Subject)
		}
		field("Timestamp", m.Timestamp)
		field("TopicArn", m.TopicArn)
		field("Type", m.Type)
	case snsSubscriptionConfirmation, snsUnsubscribeConfirmation:
		field("Message", m.Message)
		field("MessageId", m.MessageID)
		field("SubscribeURL", m.SubscribeURL)
		field("Timestamp", m.Timestamp)
		field("Token", m.Token)
		field("TopicArn", m.TopicArn)
		field("Type", m.Type)
	default:
		return "", fmt.Errorf("%w: unknown message type %q", errBadSignature, m.Type)
	}
	return b.String(), nil
}

// snsVerifier checks SNS signatures against certificates fetched from
// allowed hosts, caching each certificate's key by URL.
type snsVerifier struct {
	host    *regexp.Regexp
	client  *http.Client
	timeout time.Duration
	certs   *lru.Cache[string, *rsa.PublicKey]
	group   singleflight.Group
}

func newSNSVerifier(host *regexp.Regexp, client *http.Client, timeout time.Duration, cacheSize int) (*snsVerifier, error) {
	certs, err := lru.New[string, *rsa.PublicKey](cacheSize)
	if err != nil {
		return nil, fmt.Errorf("providerhook: certificate cache: %w", err)
	}
	return &snsVerifier{host: host, client: client, timeout: timeout, certs: certs}, nil
}

// allowedURL reports whether raw is an https URL, without user info, whose
// host matches the allowed pattern.
func (v *snsVerifier) allowedURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse url: %w", err)
	}
	if u.Scheme != "https" {
		return fmt.Errorf("url scheme %q is not https", u.Scheme)
	}
	if u.User != nil {
		return errors.New("url carries user info")
	}
	if !v.host.MatchString(u.Hostname()) {
		return fmt.Errorf("url host %q is not an allowed SNS host", u.Hostname())
	}
	return nil
}

// verify checks m's signature. It returns an error wrapping errBadSignature
// when the message does not verify, any other error when its certificate
// could not be had (the caller answers so that SNS retries).
func (v *snsVerifier) verify(ctx context.Context, m *snsMessage) error {
	var hash crypto.Hash
	switch m.SignatureVersion {
	case "1":
		hash = crypto.SHA1
	case "2":
		hash = crypto.SHA256
	default:
		return fmt.Errorf("%w: unknown SignatureVersion %q", errBadSignature, m.SignatureVersion)
	}
	canonical, err := m.stringToSign()
	if err != nil {
		return err
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil || len(sig) == 0 {
		return fmt.Errorf("%w: Signature is not base64", errBadSignature)
	}
	if err := v.allowedURL(m.SigningCertURL); err != nil {
		return fmt.Errorf("%w: SigningCertURL: %v", errBadSignature, err)
	}
	key, err := v.key(ctx, m.SigningCertURL)
	if err != nil {
		return err
	}
	var digest []byte
	if hash == crypto.SHA1 {
		d := sha1.Sum([]byte(canonical))
		digest = d[:]
	} else {
		d := sha256.Sum256([]byte(canonical))
		digest = d[:]
	}
	if err := rsa.VerifyPKCS1v15(key, hash, digest, sig); err != nil {
		return fmt.Errorf("%w: %v", errBadSignature, err)
	}
	return nil
}

// key returns the public key of the certificate at certURL, from the cache
// or fetched once however many requests ask at the same time. A certificate
// that is not an RSA certificate wraps errBadSignature.
func (v *snsVerifier) key(ctx context.Context, certURL string) (*rsa.PublicKey, error) {
	if k, ok := v.certs.Get(certURL); ok {
		return k, nil
	}
	// The fetch runs for every waiter, so it must not end with the first
	// caller's request; it has its own deadline.
	ch := v.group.DoChan(certURL, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.timeout)
		defer cancel()
		k, err := v.fetch(fctx, certURL)
		if err == nil {
			v.certs.Add(certURL, k)
		}
		return k, err
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*rsa.PublicKey), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("fetch signing certificate: %w", ctx.Err())
	}
}

func (v *snsVerifier) fetch(ctx context.Context, certURL string) (*rsa.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, certURL, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch signing certificate: %w", err)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch signing certificate: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch signing certificate: status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCertBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch signing certificate: %w", err)
	}
	if len(body) > maxCertBytes {
		return nil, fmt.Errorf("%w: signing certificate over %d bytes", errBadSignature, maxCertBytes)
	}
	block, _ := pem.Decode(body)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: signing certificate is not a PEM certificate", errBadSignature)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: parse signing certificate: %v", errBadSignature, err)
	}
	key, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: signing certificate key is %T, not RSA", errBadSignature, cert.PublicKey)
	}
	return key, nil
}

// decodeSNS decodes an SNS message; it checks the shape, not the signature.
func decodeSNS(body []byte) (*snsMessage, error) {
	var m snsMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("decode sns message: %w", err)
	}
	switch m.Type {
	case snsNotification, snsSubscriptionConfirmation, snsUnsubscribeConfirmation:
	default:
		return nil, fmt.Errorf("decode sns message: unknown Type %q", m.Type)
	}
	if m.Signature == "" || m.SigningCertURL == "" || m.TopicArn == "" {
		return nil, errors.New("decode sns message: Signature, SigningCertURL or TopicArn missing")
	}
	return &m, nil
}
