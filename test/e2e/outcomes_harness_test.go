package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/testenv"
)

// outcomeKeys returns fresh return path keys (the POSTLINE_RETURN_PATH_KEYS
// value) and a signer with them, for tests that forge or predict tokens.
func outcomeKeys(t *testing.T, domain string) (string, *returnpath.Signer) {
	t.Helper()
	var b [24]byte
	_, _ = rand.Read(b[:])
	key := hex.EncodeToString(b[:])
	signer, err := returnpath.New(domain, [][]byte{[]byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	return key, signer
}

// startReceiver runs the bounce-receiver on this stack, its SMTP server
// on smtpAddr, and waits until it is ready.
func (s *stack) startReceiver(t *testing.T, domain, keys, smtpAddr string, overrides map[string]string) *workerProc {
	t.Helper()
	env := map[string]string{
		"POSTLINE_KAFKA_BROKERS":      strings.Join(testenv.KafkaBrokers(), ","),
		"POSTLINE_EVENTS_TOPIC":       s.events,
		"POSTLINE_DATABASE_URL":       s.dbURL,
		"POSTLINE_BOUNCE_DOMAIN":      domain,
		"POSTLINE_RETURN_PATH_KEYS":   keys,
		"POSTLINE_BOUNCE_SMTP_ADDR":   smtpAddr,
		"POSTLINE_RECEIVER_HTTP_ADDR": "127.0.0.1:0",
		"POSTLINE_SHUTDOWN_TIMEOUT":   "5s",
	}
	for k, v := range overrides {
		env[k] = v
	}
	r := startProcess(t, receiverBin, "bounce-receiver", env)
	r.WaitReady(readyTimeout)
	return r
}

// webhookSink is an endpoint of the webhook dispatcher that verifies every
// request's signature with the Standard Webhooks library and records what
// it got.
type webhookSink struct {
	srv    *httptest.Server
	secret string

	mu       sync.Mutex
	received map[string]event.Event // by webhook-id
	requests int
	bad      []string // requests whose signature or body did not verify
}

func newWebhookSink(t *testing.T) *webhookSink {
	t.Helper()
	var b [32]byte
	_, _ = rand.Read(b[:])
	w := &webhookSink{secret: "whsec_" + base64.StdEncoding.EncodeToString(b[:]), received: map[string]event.Event{}}
	verifier, err := standardwebhooks.NewWebhook(w.secret)
	if err != nil {
		t.Fatal(err)
	}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.requests++
		if err == nil {
			err = verifier.Verify(body, r.Header)
		}
		var e event.Event
		if err == nil {
			e, err = event.Decode(body)
		}
		if err == nil && e.ID != r.Header.Get("webhook-id") {
			err = fmt.Errorf("webhook-id %q is not the event's id %q", r.Header.Get("webhook-id"), e.ID)
		}
		if err != nil {
			w.bad = append(w.bad, err.Error())
			rw.WriteHeader(http.StatusBadRequest)
			return
		}
		w.received[e.ID] = e
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// byType counts the verified receipts by event type.
func (w *webhookSink) byType() map[event.Type]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[event.Type]int{}
	for _, e := range w.received {
		out[e.Type]++
	}
	return out
}

func (w *webhookSink) has(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.received[id]
	return ok
}

func (w *webhookSink) problems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bad...)
}

// startDispatcher runs the webhook dispatcher on this stack's events topic
// with sink as its one endpoint (every type, every tenant).
func (s *stack) startDispatcher(t *testing.T, sink *webhookSink) *workerProc {
	t.Helper()
	spec := fmt.Sprintf("endpoints:\n  - id: app\n    url: %s/hooks\n    secret_env: E2E_WEBHOOK_SECRET\n", sink.srv.URL)
	env := s.dispatcherEnv(t, spec, testenv.UniqueName("e2e-webhooks"))
	env["E2E_WEBHOOK_SECRET"] = sink.secret
	d := startProcess(t, dispatcherBin, "webhook-dispatcher", env)
	d.WaitReady(readyTimeout)
	return d
}

// dispatcherEnv is the environment of a webhook dispatcher on this stack's
// events topic and schema, with the endpoints file spec and the consumer
// group prefix group; the caller adds the endpoints' secrets.
func (s *stack) dispatcherEnv(t *testing.T, spec, group string) map[string]string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "webhooks.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"POSTLINE_KAFKA_BROKERS":      strings.Join(testenv.KafkaBrokers(), ","),
		"POSTLINE_DATABASE_URL":       s.dbURL,
		"POSTLINE_EVENTS_TOPIC":       s.events,
		"POSTLINE_WEBHOOKS_FILE":      file,
		"POSTLINE_WEBHOOKS_GROUP":     group,
		"POSTLINE_WEBHOOKS_DLQ_TOPIC": s.events + ".webhooks.dlq",
		"POSTLINE_WEBHOOKS_HTTP_ADDR": "127.0.0.1:0",
		"POSTLINE_SESSION_TIMEOUT":    "6s",
		"POSTLINE_HEARTBEAT_INTERVAL": "500ms",
	}
}

// eventLog reads the stack's events topic from the start, through the
// consumer helper applications use, and keeps the events by ID.
type eventLog struct {
	mu     sync.Mutex
	byID   map[string]event.Event
	copies int // records dropped as copies of an event already read
	bad    []string
}

func (s *stack) readEvents(t *testing.T) *eventLog {
	t.Helper()
	r, err := event.NewReader(testenv.Kafka().Config(), event.ReaderConfig{
		GroupID: testenv.UniqueName("e2e-events"), Topic: s.events, MaxWait: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	l := &eventLog{byID: map[string]event.Event{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := r.Next(ctx)
			if ctx.Err() != nil {
				return
			}
			l.mu.Lock()
			switch {
			case err != nil:
				l.bad = append(l.bad, err.Error())
			default:
				if _, dup := l.byID[m.Event.ID]; dup {
					l.copies++
				}
				l.byID[m.Event.ID] = m.Event
			}
			l.mu.Unlock()
			if err == nil {
				_ = r.Commit(ctx, m.Position)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; _ = r.Close() })
	return l
}

// key names one recipient of one mail.
type rcptKey struct {
	id  string
	idx int
}

// transitions returns the event types read per recipient, in the order
// they were published, for the given mails.
func (l *eventLog) transitions(ids map[string]bool) map[rcptKey][]event.Type {
	l.mu.Lock()
	defer l.mu.Unlock()
	var list []event.Event
	for _, e := range l.byID {
		if ids == nil || ids[e.MessageID] {
			list = append(list, e)
		}
	}
	out := map[rcptKey][]event.Type{}
	// Order by time, then by the life order of types, so the comparison
	// reads naturally.
	order := map[event.Type]int{}
	for i, tp := range event.Types {
		order[tp] = i
	}
	sortEvents(list, order)
	for _, e := range list {
		k := rcptKey{e.MessageID, e.RecipientIndex}
		out[k] = append(out[k], e.Type)
	}
	return out
}

func sortEvents(list []event.Event, order map[event.Type]int) {
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && eventBefore(list[j], list[j-1], order); j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
}

func eventBefore(a, b event.Event, order map[event.Type]int) bool {
	if !a.At.Equal(b.At) {
		return a.At.Before(b.At)
	}
	return order[a.Type] < order[b.Type]
}

// find returns the event of type tp of recipient idx of mail id (a type
// happens to a recipient once in a mail's life, and these tests give each
// mail one).
func (l *eventLog) find(id string, idx int, tp event.Type) (event.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.byID {
		if e.MessageID == id && e.RecipientIndex == idx && e.Type == tp {
			return e, true
		}
	}
	return event.Event{}, false
}

// lives reads the life of each of ids' rows: what their event IDs hash in
// (event.NewLifeID).
func (s *stack) lives(ctx context.Context, ids []string) (map[string]int64, error) {
	rows, err := s.db.Query(ctx, `SELECT message_id, COALESCE(life, 0) FROM postline_messages WHERE message_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var life int64
		if err := rows.Scan(&id, &life); err != nil {
			return nil, err
		}
		out[id] = life
	}
	return out, rows.Err()
}

// recipientRow is one row of postline_recipients.
type recipientRow struct {
	state, bounceType, status, source string
}

// recipients reads the recipient rows of ids.
func (s *stack) recipients(ctx context.Context, ids []string) (map[rcptKey]recipientRow, error) {
	rows, err := s.db.Query(ctx, `SELECT message_id, idx, state, COALESCE(bounce_type, ''), COALESCE(status, ''), COALESCE(source, '')
		FROM postline_recipients WHERE message_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[rcptKey]recipientRow{}
	for rows.Next() {
		var (
			k rcptKey
			r recipientRow
		)
		if err := rows.Scan(&k.id, &k.idx, &r.state, &r.bounceType, &r.status, &r.source); err != nil {
			return nil, err
		}
		out[k] = r
	}
	return out, rows.Err()
}

// confirmations reads the confirmation column of ids ("" for NULL).
func (s *stack) confirmations(ctx context.Context, ids []string) (map[string]string, error) {
	rows, err := s.db.Query(ctx, `SELECT message_id, COALESCE(confirmation, '') FROM postline_messages WHERE message_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, c string
		if err := rows.Scan(&id, &c); err != nil {
			return nil, err
		}
		out[id] = c
	}
	return out, rows.Err()
}

// suppressed reports whether address is on a suppression list of tenant
// "" for stream (or every stream), with the entry's reason.
func (s *stack) suppressed(ctx context.Context, address, stream string) (string, bool, error) {
	var reason string
	err := s.db.QueryRow(ctx, `SELECT reason FROM postline_suppressions
		WHERE tenant = '' AND address = lower($1) AND stream IN ($2, '*') LIMIT 1`, address, stream).Scan(&reason)
	if err != nil {
		if strings.Contains(err.Error(), "no rows") {
			return "", false, nil
		}
		return "", false, err
	}
	return reason, true, nil
}

// sendReport delivers a report to the receiver's SMTP server as an MTA
// would: from the null sender, to rcpt.
func sendReport(addr, rcpt string, raw []byte) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Mail(""); err != nil {
		return fmt.Errorf("MAIL: %w", err)
	}
	if err := c.Rcpt(rcpt); err != nil {
		return fmt.Errorf("RCPT %s: %w", rcpt, err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if _, err := w.Write(raw); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("end of DATA: %w", err)
	}
	return c.Quit()
}
