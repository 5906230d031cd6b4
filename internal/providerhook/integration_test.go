package providerhook

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/outcome"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit/writertest"
)

// The tests below post signed provider events to the handlers, which hand
// their reports to the outcome applier on the real PostgreSQL stores, as
// the bounce-receiver wires them; what the recipient rows and the
// suppression lists hold afterwards is the end result.

// events is the events writer's stand-in, which passes the writers' suite
// (writertest): it refuses a batch with an event that does not validate.
type events struct {
	*writertest.Recorder[event.Event]
}

func (e *events) published() []event.Event { return e.All() }

// applierEnv is an applier on a schema of its own.
type applierEnv struct {
	ids     *idempotency.Store
	lists   *suppression.Store
	events  *events
	signer  *returnpath.Signer
	applier *outcome.Applier
}

func newApplierEnv(t *testing.T) *applierEnv {
	t.Helper()
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	reg := prometheus.NewRegistry()
	e := &applierEnv{events: &events{writertest.Events()}}
	var err error
	if e.signer, err = returnpath.New("bounces.postline.test", [][]byte{[]byte("providerhook-integration-key-0123456789")}); err != nil {
		t.Fatal(err)
	}
	if e.ids, err = idempotency.New(idempotency.Config{Owner: "providerhook-test"}, pool, discard(), reg); err != nil {
		t.Fatalf("idempotency.New: %v", err)
	}
	if e.lists, err = suppression.New(suppression.Config{}, pool, discard(), reg); err != nil {
		t.Fatalf("suppression.New: %v", err)
	}
	if e.applier, err = outcome.New(outcome.Config{}, discard(), reg, e.ids, e.events, e.lists, e.signer); err != nil {
		t.Fatalf("outcome.New: %v", err)
	}
	return e
}

// send claims a mail for tenant acme and records that a relay took it for
// each address, as the worker does.
func (e *applierEnv) send(t *testing.T, id string, addrs ...string) {
	t.Helper()
	h := sha256.Sum256([]byte(id))
	cs, err := e.ids.Claim(t.Context(), []idempotency.ClaimRequest{{MessageID: id, PayloadHash: h[:], Attempt: 1, Tenant: "acme"}})
	if err != nil || len(cs) != 1 {
		t.Fatalf("Claim(%s) = %+v, %v", id, cs, err)
	}
	var rcpts []idempotency.RecipientFate
	for i, a := range addrs {
		rcpts = append(rcpts, idempotency.RecipientFate{Index: i, Address: a, State: idempotency.RecipientAccepted,
			Attempt: 1, Provider: "ses", Source: "smtp"})
	}
	if _, err := e.ids.Record(t.Context(), []idempotency.Fate{{MessageID: id, Version: cs[0].Version,
		Status: idempotency.StatusSent, Attempt: 1, Provider: "ses", Stream: event.StreamTransactional,
		ConfirmBy: time.Now().Add(time.Hour), Recipients: rcpts}}); err != nil {
		t.Fatalf("Record(%s): %v", id, err)
	}
}

func (e *applierEnv) row(t *testing.T, id string, idx int) idempotency.Recipient {
	t.Helper()
	got, err := e.ids.Recipients(t.Context(), []string{id})
	if err != nil {
		t.Fatalf("Recipients(%s): %v", id, err)
	}
	for _, r := range got[id] {
		if r.Index == idx {
			return r
		}
	}
	t.Fatalf("%s has no recipient %d", id, idx)
	return idempotency.Recipient{}
}

// suppressed returns the entries for address on each stream of acme.
func (e *applierEnv) suppressed(t *testing.T, address string) map[suppression.Key]suppression.Entry {
	t.Helper()
	keys := []suppression.Key{
		{Tenant: "acme", Stream: suppression.StreamTransactional, Address: address},
		{Tenant: "acme", Stream: suppression.StreamBulk, Address: address},
	}
	hits, err := e.lists.Check(t.Context(), keys)
	if err != nil {
		t.Fatalf("Check(%s): %v", address, err)
	}
	return hits
}

// outcomeCase is one provider event about one recipient and the end result
// it must leave.
type outcomeCase struct {
	name       string
	state      idempotency.RecipientState
	bounceType string // when bounced
	suppressed bool   // on every stream of the tenant
}

// check asserts the recipient's row and suppressions after c's event.
func (e *applierEnv) check(t *testing.T, c outcomeCase, id string, idx int, address string) {
	t.Helper()
	r := e.row(t, id, idx)
	if r.State != c.state || (c.state == idempotency.RecipientBounced && r.BounceType != c.bounceType) {
		t.Errorf("%s: recipient %s, bounce type %q (rule %q); want %s %s", c.name, r.State, r.BounceType, r.Rule, c.state, c.bounceType)
	}
	if c.state == idempotency.RecipientAccepted && !r.ResolvedAt.IsZero() {
		t.Errorf("%s: recipient resolved at %v; want unresolved", c.name, r.ResolvedAt)
	}
	hits := e.suppressed(t, address)
	if got := len(hits) == 2; got != c.suppressed {
		t.Errorf("%s: suppression entries %+v; want suppressed on every stream %t", c.name, hits, c.suppressed)
	}
	for _, h := range hits {
		if h.Reason != suppression.ReasonHardBounce {
			t.Errorf("%s: suppressed for %s, want %s", c.name, h.Reason, suppression.ReasonHardBounce)
		}
	}
}

// TestIntegrationSESBounces: SES's bounce type decides the recipient's end
// state: Permanent is a hard bounce that suppresses the address, even
// without a DSN's status, unless the reply is a policy refusal, Transient leaves the recipient unresolved, and
// Undetermined is classified by the rules from what SES passed on.
func TestIntegrationSESBounces(t *testing.T) {
	t.Parallel()
	e := newApplierEnv(t)
	srv := newSNSServer(t)
	cfg := srv.sesConfig()
	cfg.Token = e.signer.TokenOf
	h := newTestSES(t, cfg, e.applier)

	noDSN := func(addr string) map[string]any { return map[string]any{"emailAddress": addr} }
	dsn := func(addr, status, diag string) map[string]any {
		return map[string]any{"emailAddress": addr, "action": "failed", "status": status, "diagnosticCode": diag}
	}
	tests := []struct {
		outcomeCase
		bounceType, subType string
		rcpt                func(addr string) map[string]any
	}{
		{outcomeCase{"permanent general without a DSN", idempotency.RecipientBounced, "hard", true},
			"Permanent", "General", noDSN},
		{outcomeCase{"permanent on the account's suppression list", idempotency.RecipientBounced, "hard", true},
			"Permanent", "OnAccountSuppressionList", noDSN},
		{outcomeCase{"permanent with a DSN", idempotency.RecipientBounced, "hard", true},
			"Permanent", "General", func(a string) map[string]any { return dsn(a, "5.1.1", "smtp; 550 5.1.1 user unknown") }},
		// A policy refusal stays one: it is about the sender.
		{outcomeCase{"permanent refused by policy", idempotency.RecipientBounced, "policy", false},
			"Permanent", "General", func(a string) map[string]any {
				return dsn(a, "5.7.1", "smtp; 550 5.7.1 Service unavailable, client host blocked using Spamhaus")
			}},
		{outcomeCase{"transient general", idempotency.RecipientAccepted, "", false},
			"Transient", "General", noDSN},
		{outcomeCase{"transient mailbox full", idempotency.RecipientAccepted, "", false},
			"Transient", "MailboxFull", func(a string) map[string]any { return dsn(a, "5.2.2", "smtp; 552 5.2.2 Mailbox full") }},
		{outcomeCase{"undetermined", idempotency.RecipientBounced, "soft", false},
			"Undetermined", "Undetermined", noDSN},
		{outcomeCase{"undetermined with a DSN that names no such user", idempotency.RecipientBounced, "hard", true},
			"Undetermined", "Undetermined", func(a string) map[string]any { return dsn(a, "5.1.1", "smtp; 550 5.1.1 user unknown") }},
	}
	const id = "ses-bounces-1@postline.test"
	var addrs []string
	for i := range tests {
		addrs = append(addrs, "rcpt"+string(rune('a'+i))+"@example.com")
	}
	e.send(t, id, addrs...)

	for i, tt := range tests {
		var doc map[string]any
		if err := json.Unmarshal(sesBounceDoc(t, tt.bounceType, tt.subType, tt.rcpt(addrs[i])), &doc); err != nil {
			t.Fatal(err)
		}
		// SES echoes the recipient's own return path as mail.source, and
		// the mail's headers.
		mail := doc["mail"].(map[string]any)
		mail["source"] = e.signer.Address(id, i)
		mail["headers"] = []any{map[string]any{"name": "Message-ID", "value": "<" + id + ">"}}
		mail["commonHeaders"] = map[string]any{"messageId": "<" + id + ">"}
		msg := envelope(t, "notification")
		msg.Subject = nil
		msg.Message = string(marshal(t, doc))
		srv.sign(t, msg, "2", testKey())
		if code := post(t, h, marshal(t, msg)); code != http.StatusOK {
			t.Fatalf("%s: status = %d, want 200", tt.name, code)
		}
	}
	for i, tt := range tests {
		e.check(t, tt.outcomeCase, id, i, addrs[i])
	}
	// Only what resolved has an event, and a bounce without a DSN claims
	// no reply.
	resolved := 0
	for _, ev := range e.events.published() {
		if ev.Type != event.Bounced || ev.Bounce == nil {
			t.Errorf("event %s of type %s, want bounced only", ev.ID, ev.Type)
			continue
		}
		tt := tests[ev.RecipientIndex]
		if tt.state == idempotency.RecipientAccepted {
			t.Errorf("%s: an event %+v for a bounce that resolves nothing", tt.name, ev)
		}
		if _, dsn := tt.rcpt(addrs[ev.RecipientIndex])["status"]; !dsn && (ev.Bounce.Status != "" || ev.Bounce.Code != 0) {
			t.Errorf("%s: the bounce without a DSN claims a reply: %+v", tt.name, ev.Bounce)
		}
		resolved++
	}
	for _, tt := range tests {
		if tt.state != idempotency.RecipientAccepted {
			resolved--
		}
	}
	if resolved != 0 {
		t.Errorf("%d more events than bounces that resolve", resolved)
	}
}

// TestIntegrationMailgunFailures: a permanent failure for a bounce is a hard
// bounce that suppresses; a temporary one resolves nothing; a permanent
// failure for an unsubscribed address ends the mail without suppressing
// the address on every stream.
func TestIntegrationMailgunFailures(t *testing.T) {
	t.Parallel()
	e := newApplierEnv(t)
	h := newTestMailgun(t, e.applier, func(c *MailgunConfig) { c.Token = e.signer.TokenOf })
	status := func(code int, message, description string) map[string]any {
		return map[string]any{"code": code, "message": message, "description": description}
	}
	tests := []struct {
		outcomeCase
		file, severity, reason string
		deliveryStatus         map[string]any
	}{
		{outcomeCase{"previously bounced", idempotency.RecipientBounced, "hard", true},
			"failed-permanent.json", "permanent", "suppress-bounce", nil},
		{outcomeCase{"bounce", idempotency.RecipientBounced, "hard", true},
			"failed-permanent.json", "permanent", "bounce", status(550, "Requested action not taken: mailbox unavailable", "")},
		{outcomeCase{"temporary", idempotency.RecipientAccepted, "", false},
			"failed-temporary.json", "temporary", "generic", nil},
		{outcomeCase{"previously unsubscribed", idempotency.RecipientBounced, "soft", false},
			"failed-permanent.json", "permanent", "suppress-unsubscribe", status(606, "", "Not delivering to previously unsubscribed address")},
	}
	const id = "mailgun-failures-1@postline.test"
	var addrs []string
	for i := range tests {
		addrs = append(addrs, "rcpt"+string(rune('a'+i))+"@example.com")
	}
	e.send(t, id, addrs...)
	var tk tokens
	for i, tt := range tests {
		var doc map[string]any
		if err := json.Unmarshal(sample(t, "mailgun/"+tt.file), &doc); err != nil {
			t.Fatal(err)
		}
		doc["severity"], doc["reason"], doc["recipient"] = tt.severity, tt.reason, addrs[i]
		doc["envelope"] = map[string]any{"sender": e.signer.Address(id, i)}
		doc["message"] = map[string]any{"headers": map[string]any{"message-id": "<" + id + ">"}}
		if tt.deliveryStatus != nil {
			doc["delivery-status"] = tt.deliveryStatus
		}
		if code := post(t, h, mailgunBody(t, testSigningKey, testNow, tk.next(), marshal(t, doc))); code != http.StatusOK {
			t.Fatalf("%s: status = %d, want 200", tt.name, code)
		}
	}
	for i, tt := range tests {
		e.check(t, tt.outcomeCase, id, i, addrs[i])
	}
}
