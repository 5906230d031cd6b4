package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/internal/webhook"
	"github.com/postline/postline/job"
)

// opsStack is a console on an isolated schema and isolated dead-letter,
// jobs and events topics, with the real re-drive and webhook queue.
type opsStack struct {
	*stack
	dlq, jobs string
	store     *idempotency.Store
	queue     *webhook.Queue
}

func newOpsStack(t *testing.T) *opsStack {
	t.Helper()
	testenv.Integration(t, "Kafka and PostgreSQL")
	o := &opsStack{dlq: testenv.NewTopic(t, 2), jobs: testenv.NewTopic(t, 2)}
	events := testenv.NewTopic(t, 1)
	o.stack = newStackWith(t, func(pool *pgxpool.Pool, sup *suppression.Store, cfg *Config) {
		var err error
		if o.store, err = idempotency.New(idempotency.Config{Owner: "console-test"}, pool, nil, nil); err != nil {
			t.Fatal(err)
		}
		pub, err := testenv.Kafka().TopicWriter(kafkaclient.WriterConfig{Topic: o.jobs, Name: "redrive", Limits: map[string]int{o.jobs: topic.MaxMessageBytes}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pub.Close() })
		ev, err := eventstream.New(eventstream.Config{Kafka: testenv.Kafka(), Topic: events}, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ev.Close() })
		rd, err := redrive.New(redrive.Config{Source: redrive.TopicSource{Kafka: testenv.Kafka(), Topic: o.dlq},
			Store: o.store, Lists: sup, Publisher: pub, Events: ev})
		if err != nil {
			t.Fatal(err)
		}
		o.queue = webhook.NewQueue(pool)
		cfg.Redrive, cfg.Webhooks = rd, o.queue
	})
	return o
}

// seed dead-letters jobs of tenant whose rows are failed, as the workers
// would have left them.
func (o *opsStack) seed(t *testing.T, tenant, reason string, ids ...string) {
	t.Helper()
	ctx := t.Context()
	var dls []deadletter.Letter
	for _, id := range ids {
		j := job.Job{Version: 1, MessageID: id, From: "shop@example.com", To: []string{"r-" + id}, Subject: "s", Text: "t", Tenant: tenant}
		cs, err := o.store.Claim(ctx, []idempotency.ClaimRequest{{MessageID: id, PayloadHash: j.Hash(), Attempt: 1}})
		if err != nil || cs[0].Result != idempotency.Claimed {
			t.Fatalf("claim %s: %+v, %v", id, cs, err)
		}
		if _, err := o.store.Record(ctx, []idempotency.Fate{{MessageID: id, Version: cs[0].Version, Status: idempotency.StatusFailed,
			Attempt: 1, ErrorClass: "permanent", Error: "550 5.1.1"}}); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		dls = append(dls, deadletter.Letter{Key: []byte(id), Value: b, Topic: "mail.jobs", Reason: reason, Class: "permanent",
			Error: "550 5.1.1 no such user", Attempt: 1})
	}
	w, err := deadletter.New(deadletter.Config{Kafka: testenv.Kafka(), Topic: o.dlq}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Publish(ctx, dls...); err != nil {
		t.Fatal(err)
	}
}

// jobKeys are the keys of every record of the jobs topic, sorted.
func (o *opsStack) jobKeys(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out []string
	err := redrive.TopicSource{Kafka: testenv.Kafka(), Topic: o.jobs}.Scan(ctx, func(m kafka.Message) error {
		out = append(out, string(m.Key))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

var (
	planRedrive = regexp.MustCompile(`<dd id="plan-redrive">(\d+)</dd>`)
	confirmForm = regexp.MustCompile(`(?s)<form method="post" action="/redrive/run">.*?</form>`)
)

// TestOperatorRedrivesThroughThePages seeds failed mail of two tenants on
// an isolated dead-letter topic; an operator logged in over HTTP counts
// one tenant's, re-drives it, waits for the run's page to say done: the
// jobs topic holds exactly that tenant's mail and the audit log the run
// with its note and result. The same re-drive again would take nothing.
func TestOperatorRedrivesThroughThePages(t *testing.T) {
	o := newOpsStack(t)
	o.seed(t, "acme", "smtp_permanent", "acme-1@x", "acme-2@x", "acme-3@x")
	o.seed(t, "globex", "smtp_permanent", "globex-1@x")
	b := o.browser(t)
	b.mustLogin("olga", olgaPassword)
	count := url.Values{"csrf": {b.csrfOf("/redrive")}, "since": {"1h"}, "tenant": {"acme"}, "rate": {"500"}, "note": {"relay fixed, INC-7"}}
	status, body := b.post("/redrive/count", count)
	if m := planRedrive.FindStringSubmatch(body); status != http.StatusOK || m == nil || m[1] != "3" || !strings.Contains(body, `<dd id="plan-matched">3</dd>`) {
		t.Fatalf("count = %d:\n%s", status, body)
	}
	if got := o.jobKeys(t); len(got) != 0 {
		t.Fatalf("the count published %v", got)
	}
	confirm := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(confirmForm.FindString(body), -1) {
		confirm.Set(m[1], m[2])
	}
	req, _ := http.NewRequest(http.MethodPost, b.base+"/redrive/run", strings.NewReader(confirm.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	run := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(run, "/redrive/runs/") {
		t.Fatalf("re-drive = %d to %q", resp.StatusCode, run)
	}
	testkit.Eventually(t, 30*time.Second, "the run's page to say done", func(context.Context) (bool, string) {
		_, page := b.get(run)
		return strings.Contains(page, "Done."), page
	})
	if _, page := b.get(run); !strings.Contains(page, `<dd id="run-redriven">3</dd>`) {
		t.Errorf("run page:\n%s", page)
	}
	if got, want := o.jobKeys(t), []string{"acme-1@x", "acme-2@x", "acme-3@x"}; !slices.Equal(got, want) {
		t.Errorf("jobs topic = %v, want %v", got, want)
	}
	entries, err := o.audit.Read(t.Context(), operator.AuditFilter{Actor: "olga", Action: "redrive.run.done"})
	if err != nil || len(entries) != 1 || entries[0].Result != operator.ResultOK {
		t.Fatalf("audit of the run's end: %+v, %v", entries, err)
	}
	var done auditedRedrive
	if err := json.Unmarshal(entries[0].Target, &done); err != nil || done.Filter.Note != "relay fixed, INC-7" || done.Filter.Tenant != "acme" ||
		done.Result == nil || done.Result.Redriven != 3 || "/redrive/runs/"+done.RunID != run {
		t.Errorf("audit of the run's end: %s, %v", entries[0].Target, err)
	}
	if got := o.auditResults(t, "olga"); !slices.Contains(got, "redrive.count:ok") || !slices.Contains(got, "redrive.run:ok") {
		t.Errorf("audit = %v", got)
	}
	count.Set("csrf", b.csrfOf("/redrive"))
	if _, body := b.post("/redrive/count", count); !strings.Contains(body, `<dd id="plan-redrive">0</dd>`) || !strings.Contains(body, "Nothing to re-drive") {
		t.Errorf("the same count again:\n%s", body)
	}
	// The dead letters page lists them, newest first.
	if _, page := b.get("/deadletters?list=1&since=1h"); !strings.Contains(page, "4 dead letters match") || !strings.Contains(page, "globex-1@x") {
		t.Errorf("dead letters page:\n%s", page)
	}
}

// TestWebhookEndpointStateChangesThroughThePage disables and enables an
// endpoint with the page's forms: its state in PostgreSQL follows.
func TestWebhookEndpointStateChangesThroughThePage(t *testing.T) {
	o := newOpsStack(t)
	ctx := t.Context()
	if err := o.queue.RecordHealth(ctx, "crm", webhook.Health{LastFailure: time.Now(), FirstFailure: time.Now(), LastStatus: 503, LastError: "HTTP 503"}); err != nil {
		t.Fatal(err)
	}
	b := o.browser(t)
	b.mustLogin("olga", olgaPassword)
	if _, page := b.get("/webhooks"); !strings.Contains(page, "crm") || !strings.Contains(page, "failing") || !strings.Contains(page, "HTTP 503") {
		t.Fatalf("webhooks page:\n%s", page)
	}
	csrf := b.csrfOf("/webhooks")
	if status, body := b.post("/webhooks/disable", url.Values{"csrf": {csrf}, "endpoint": {"crm"}, "reason": {"their outage"}}); status != http.StatusSeeOther {
		t.Fatalf("disable = %d:\n%s", status, body)
	}
	st, err := o.queue.State(ctx, "crm")
	if err != nil || !st.Disabled() || st.DisabledReason != "their outage" {
		t.Fatalf("after disable: %+v, %v", st, err)
	}
	if _, page := b.get("/webhooks"); !strings.Contains(page, "disabled") || !strings.Contains(page, `action="/webhooks/enable"`) {
		t.Errorf("webhooks page after disable:\n%s", page)
	}
	if status, _ := b.post("/webhooks/enable", url.Values{"csrf": {csrf}, "endpoint": {"crm"}}); status != http.StatusSeeOther {
		t.Fatalf("enable = %d", status)
	}
	if st, err := o.queue.State(ctx, "crm"); err != nil || st.Disabled() {
		t.Errorf("after enable: %+v, %v", st, err)
	}
	if _, page := b.get("/webhooks/replay?endpoint=crm"); !strings.Contains(page, "their outage") || !strings.Contains(page, "console:olga") {
		t.Errorf("the endpoint's log lacks the change:\n%s", page)
	}
	if got := o.auditResults(t, "olga"); !slices.Contains(got, "webhook.disable:ok") || !slices.Contains(got, "webhook.enable:ok") {
		t.Errorf("audit = %v", got)
	}
}

// TestSuppressionImportPreviewThenImport uploads a file over HTTP: the
// preview counts it and writes nothing; the confirmation imports it.
func TestSuppressionImportPreviewThenImport(t *testing.T) {
	o := newOpsStack(t)
	o.addSuppression(t, "bob@example.com")
	b := o.browser(t)
	b.mustLogin("olga", olgaPassword)
	file := "address,reason\nada@example.com,manual\nbob@example.com,manual\ncy@example.com,unsubscribe\nnot-an-address,manual\n"
	status, body := b.upload(b.csrfOf("/suppressions/import"), file)
	if status != http.StatusOK || !strings.Contains(body, `<dd id="preview-parsed">3</dd>`) || !strings.Contains(body, `<dd id="preview-listed">1</dd>`) ||
		!strings.Contains(body, `<dd id="preview-invalid">1</dd>`) || !strings.Contains(body, "line 5:") {
		t.Fatalf("preview of a file with a bad line = %d:\n%s", status, body)
	}
	if o.suppressed(t, "ada@example.com") {
		t.Fatal("the preview imported")
	}
	file = strings.Replace(file, "not-an-address,manual\n", "", 1)
	status, body = b.upload(b.csrfOf("/suppressions/import"), file)
	if status != http.StatusOK || !strings.Contains(body, `<dd id="preview-new">2</dd>`) || !strings.Contains(body, `<dd id="preview-listed">1</dd>`) {
		t.Fatalf("preview = %d:\n%s", status, body)
	}
	id := regexp.MustCompile(`name="import" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if id == nil {
		t.Fatalf("no confirmation form:\n%s", body)
	}
	if status, body := b.post("/suppressions/import", url.Values{"csrf": {b.csrfOf("/suppressions/import")}, "import": {id[1]}}); status != http.StatusSeeOther {
		t.Fatalf("confirm = %d:\n%s", status, body)
	}
	if !o.suppressed(t, "ada@example.com") || !o.suppressed(t, "cy@example.com") {
		t.Error("the confirmed import is not in the lists")
	}
	if got := o.auditResults(t, "olga"); !slices.Contains(got, "suppression.import.preview:ok") || !slices.Contains(got, "suppression.import:ok") {
		t.Errorf("audit = %v", got)
	}
}

// TestWebhookReplayOfDeadLettersThroughThePage counts an endpoint's dead
// letters of one type, replays them: they are pending again, the other
// stays dead.
func TestWebhookReplayOfDeadLettersThroughThePage(t *testing.T) {
	o := newOpsStack(t)
	ctx := t.Context()
	now := time.Now().UTC()
	for i, typ := range []event.Type{event.Bounced, event.Bounced, event.Delivered} {
		p := webhook.Pending{Endpoint: "crm", EventID: fmt.Sprintf("e%d", i), Type: typ, Tenant: "acme", EventAt: now.Add(-time.Hour),
			Payload: []byte(`{}`), Topic: "mail.events", Offset: int64(i), Attempts: 5, FirstAt: now.Add(-time.Hour), NextAt: now}
		if err := o.queue.Bury(ctx, p, "horizon", now); err != nil {
			t.Fatal(err)
		}
	}
	b := o.browser(t)
	b.mustLogin("olga", olgaPassword)
	form := url.Values{"csrf": {b.csrfOf("/webhooks/replay?endpoint=crm")}, "endpoint": {"crm"}, "types": {"bounced"}, "from": {"2h"}, "rate": {"100"}}
	status, body := b.post("/webhooks/replay/count", form)
	if status != http.StatusOK || !strings.Contains(body, `<p id="replay-selected">2 dead letters of crm`) {
		t.Fatalf("count = %d:\n%s", status, body)
	}
	if bl, err := o.queue.Backlog(ctx, "crm"); err != nil || bl.Dead != 3 || bl.Pending != 0 {
		t.Fatalf("the count changed the queue: %+v, %v", bl, err)
	}
	confirm := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(body[strings.Index(body, `action="/webhooks/replay"`):], -1) {
		confirm.Set(m[1], m[2])
	}
	if status, body := b.post("/webhooks/replay", confirm); status != http.StatusSeeOther {
		t.Fatalf("replay = %d:\n%s", status, body)
	}
	if bl, err := o.queue.Backlog(ctx, "crm"); err != nil || bl.Dead != 1 || bl.Pending != 2 {
		t.Errorf("after the replay: %+v, %v; want 2 pending, 1 dead", bl, err)
	}
	if got := o.auditResults(t, "olga"); !slices.Contains(got, "webhook.replay.count:ok") || !slices.Contains(got, "webhook.replay:ok") {
		t.Errorf("audit = %v", got)
	}
}
