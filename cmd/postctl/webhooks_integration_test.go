package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit/writertest"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/internal/webhook"
)

const replaySecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// buryEvent buries an event of type typ at time at for endpoint in q.
func buryEvent(t *testing.T, q *webhook.Queue, endpoint, mid string, typ event.Type, at time.Time) string {
	t.Helper()
	e := event.Event{Schema: event.Schema, ID: event.NewID(mid, 0, typ, 1), Type: typ, At: at, MessageID: mid,
		Stream: event.StreamTransactional, Recipient: "r@example.com", Attempt: 1}
	if typ == event.Bounced {
		e.Bounce = &event.Bounce{Type: event.BounceHard, Source: "dsn"}
	}
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	p := webhook.Pending{Endpoint: endpoint, EventID: e.ID, Type: typ, EventAt: at, Payload: b, Offset: -1,
		Attempts: 13, FirstAt: at, NextAt: at, LastStatus: 503, LastError: "HTTP 503"}
	if err := q.Bury(t.Context(), p, webhook.ReasonHorizon, at.Add(77*time.Hour)); err != nil {
		t.Fatal(err)
	}
	return e.ID
}

// postctl webhooks replay, on the real queue, re-sends exactly the dead
// letters it selects: a real dispatcher (real Kafka, PostgreSQL) sends
// them to the endpoint, signed, and no other; --dry-run counts them first
// and changes nothing; ls and status show the endpoint and the replay.
func TestWebhooksReplayResendsExactlyTheSelectedDeadLetters(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	url, pool := testenv.NewSchema(t)
	ctx := t.Context()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	q := webhook.NewQueue(pool)
	base := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var want, other []string
	for i := range 12 {
		at := base.Add(time.Duration(i) * time.Hour)
		typ := []event.Type{event.Bounced, event.Delivered, event.Complained}[i%3]
		id := buryEvent(t, q, "crm", fmt.Sprintf("<m%d@x>", i), typ, at)
		// Selected: bounced and complained events from 02:00 to before 10:00.
		if i >= 2 && i < 10 && typ != event.Delivered {
			want = append(want, id)
		} else {
			other = append(other, id)
		}
		buryEvent(t, q, "billing", fmt.Sprintf("<m%d@x>", i), typ, at) // another endpoint's: never selected
	}
	args := []string{"--database-url", url, "webhooks", "replay", "crm", "--from", "2026-11-20T02:00:00Z",
		"--to", "2026-11-20T10:00:00Z", "--type", "bounced,complained", "--rate", "200"}

	out, _, err := postctl(t, nil, "", append(args, "--dry-run")...)
	if err != nil || !strings.Contains(out, fmt.Sprintf("%d dead letters of crm would be queued again", len(want))) {
		t.Fatalf("dry run: %q, %v", out, err)
	}
	if n := countStatus(t, pool, "crm", "pending"); n != 0 {
		t.Fatalf("the dry run queued %d events", n)
	}

	// The endpoint, verifying every signature with the library.
	var mu sync.Mutex
	got := map[string]int{}
	var problems []string
	wh, err := standardwebhooks.NewWebhook(replaySecret)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := wh.Verify(body, r.Header); err != nil {
			problems = append(problems, err.Error())
		}
		got[r.Header.Get("webhook-id")]++
	}))
	defer srv.Close()
	startDispatcher(t, pool, srv.URL)

	out, _, err = postctl(t, nil, "", append(args, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Selected int }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Selected != len(want) {
		t.Fatalf("replay: %q (%v), want %d selected", out, err, len(want))
	}
	deadline := time.Now().Add(30 * time.Second)
	for countStatus(t, pool, "crm", "pending") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the replayed events were not delivered within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var ids []string
	for id, n := range got {
		ids = append(ids, id)
		if n != 1 {
			t.Errorf("%s sent %d times", id, n)
		}
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("the endpoint got %v, want exactly the selected %v", ids, want)
	}
	if len(problems) > 0 {
		t.Errorf("signatures: %v", problems)
	}
	if n := countStatus(t, pool, "crm", "dead"); n != len(other) {
		t.Errorf("crm keeps %d dead letters, want the %d not selected", n, len(other))
	}
	if n := countStatus(t, pool, "billing", "dead"); n != 12 {
		t.Errorf("billing keeps %d dead letters, want all 12", n)
	}

	out, _, err = postctl(t, nil, "", "--database-url", url, "webhooks", "status", "crm")
	if err != nil || !strings.Contains(out, "replayed") || !strings.Contains(out, fmt.Sprintf("%d dead letters", len(want))) {
		t.Errorf("status: %q, %v; want the replay in the log", out, err)
	}
	out, _, err = postctl(t, nil, "", "--database-url", url, "webhooks", "ls")
	if err != nil || !strings.Contains(out, "billing") || !strings.Contains(out, "crm") {
		t.Errorf("ls: %q, %v", out, err)
	}
}

func countStatus(t *testing.T, pool *pgxpool.Pool, endpoint, status string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM postline_webhook_queue WHERE endpoint = $1 AND status = $2`,
		endpoint, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// startDispatcher runs a dispatcher with endpoint crm at url over pool's
// queue, on an empty events topic of its own.
func startDispatcher(t *testing.T, pool *pgxpool.Pool, url string) {
	t.Helper()
	ep := webhook.Endpoint{ID: "crm", SecretEnv: "CRM_SECRET", Secret: webhook.Secret(replaySecret)}
	var err error
	if ep.URL, err = neturl.Parse(url + "/hook"); err != nil {
		t.Fatal(err)
	}
	d, err := webhook.New(webhook.Config{
		Kafka: testenv.Kafka(), Topic: testenv.NewTopic(t, 1), GroupID: testenv.UniqueName("replay"),
		Endpoints: []webhook.Endpoint{ep}, Queue: webhook.NewQueue(pool), DeadLetters: writertest.DeadLetters(),
		PollInterval: 10 * time.Millisecond, SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond,
		DrainTimeout: time.Second, MaxWait: 50 * time.Millisecond,
	}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	})
}

// postctl webhooks replay --source events reads the events topic from
// --from by the broker's time index and queues exactly the events of the
// time range, types and tenants selected, delivered or not before, for a
// real dispatcher to send.
func TestWebhooksReplayFromTheEventsTopic(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	url, pool := testenv.NewSchema(t)
	ctx := t.Context()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	events := testenv.NewTopic(t, 2)
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	var msgs []kafka.Message
	var want []string
	for i := range 20 {
		at := base.Add(time.Duration(i) * time.Minute)
		typ := []event.Type{event.Bounced, event.Delivered}[i%2]
		tenant := []string{"acme", "globex"}[i/10]
		e := event.Event{Schema: event.Schema, ID: event.NewID(fmt.Sprintf("<t%d@x>", i), 0, typ, 1), Type: typ, At: at,
			MessageID: fmt.Sprintf("<t%d@x>", i), Tenant: tenant, Stream: event.StreamTransactional, Recipient: "r@example.com"}
		if typ == event.Bounced {
			e.Bounce = &event.Bounce{Type: event.BounceHard, Source: "dsn"}
		}
		b, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		// The record's time is the event's: the broker's time index finds
		// where --from starts.
		msgs = append(msgs, kafka.Message{Key: []byte(e.MessageID), Value: b, Time: at})
		if i >= 4 && i < 16 && typ == event.Bounced && tenant == "acme" {
			want = append(want, e.ID)
		}
	}
	w, closeConn, err := testenv.Kafka().Writer(kafkaclient.WriterConfig{Topic: events, Name: "test", Limits: map[string]int{events: topic.MaxMessageBytes}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got[r.Header.Get("webhook-id")]++
	}))
	defer srv.Close()
	startDispatcher(t, pool, srv.URL)

	args := []string{"--database-url", url, "--brokers", strings.Join(testenv.KafkaBrokers(), ","), "--events-topic", events,
		"webhooks", "replay", "crm", "--source", "events", "--from", base.Add(4 * time.Minute).Format(time.RFC3339),
		"--to", base.Add(16 * time.Minute).Format(time.RFC3339), "--type", "bounced", "--tenant", "acme", "--rate", "500"}
	out, _, err := postctl(t, nil, "", append(args, "--dry-run")...)
	if err != nil || !strings.Contains(out, fmt.Sprintf("%d events of crm would be queued again", len(want))) {
		t.Fatalf("dry run: %q, %v (want %d)", out, err, len(want))
	}
	if _, _, err := postctl(t, nil, "", args...); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for countStatus(t, pool, "crm", "pending") > 0 || len(got) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d replayed events within 30s", len(got), len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	ids := slices.Sorted(maps.Keys(got))
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("the endpoint got %v, want exactly %v", ids, want)
	}
}
