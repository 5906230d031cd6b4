package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/goleak"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunRejectsBadSettings(t *testing.T) {
	good := writeFile(t, "hooks.yaml", "endpoints:\n  - {id: billing, url: 'https://b.example/h', secret_env: BILLING_SECRET}\n")
	bad := writeFile(t, "bad.yaml", "endpoints:\n  - {id: billing, url: 'http://b.example/h?k=v', secret_env: BILLING_SECRET}\n")
	tests := []struct {
		name  string
		env   map[string]string
		want  string
		never string
	}{
		{"no file", nil, "setting POSTLINE_WEBHOOKS_FILE: required", ""},
		{"missing file", map[string]string{"POSTLINE_WEBHOOKS_FILE": "/nonexistent/hooks.yaml"}, "setting POSTLINE_WEBHOOKS_FILE: webhook endpoints: open /nonexistent/hooks.yaml", ""},
		{"bad endpoint", map[string]string{"POSTLINE_WEBHOOKS_FILE": bad}, `setting POSTLINE_WEBHOOKS_FILE: webhook endpoints file ` + bad + `: endpoint "billing": url: http://b.example/h: http is allowed only on loopback`, "k=v"},
		{"secret unset", map[string]string{"POSTLINE_WEBHOOKS_FILE": good}, `setting POSTLINE_WEBHOOKS_FILE: webhook config: Endpoints[0]: endpoint "billing": the secret in $BILLING_SECRET: secret is empty`, ""},
		{"secret bad", map[string]string{"POSTLINE_WEBHOOKS_FILE": good, "BILLING_SECRET": "whsec_c2hvcnQ="}, `the secret in $BILLING_SECRET: secret holds 5 bytes, want 24 to 64`, "c2hvcnQ"},
		{"delays", map[string]string{"POSTLINE_WEBHOOKS_FILE": good, "BILLING_SECRET": testSecret, "POSTLINE_WEBHOOKS_RETRY_DELAYS": "5s,-1m"}, "setting POSTLINE_WEBHOOKS_RETRY_DELAYS: webhook config: Schedule.Delays[1] = -1m0s: must be positive", ""},
		{"delays unparsable", map[string]string{"POSTLINE_WEBHOOKS_FILE": good, "BILLING_SECRET": testSecret, "POSTLINE_WEBHOOKS_RETRY_DELAYS": "5s,soon"}, "setting POSTLINE_WEBHOOKS_RETRY_DELAYS: \"5s,soon\"", ""},
		{"zero horizon", map[string]string{"POSTLINE_WEBHOOKS_FILE": good, "BILLING_SECRET": testSecret, "POSTLINE_WEBHOOKS_RETRY_HORIZON": "0s"}, "setting POSTLINE_WEBHOOKS_RETRY_HORIZON: must not be zero", ""},
		{"negative disable", map[string]string{"POSTLINE_WEBHOOKS_FILE": good, "BILLING_SECRET": testSecret, "POSTLINE_WEBHOOKS_DISABLE_AFTER": "-1h"}, "setting POSTLINE_WEBHOOKS_DISABLE_AFTER: webhook config: DisableAfter = -1h0m0s", ""},
		{"dlq is events", map[string]string{"POSTLINE_WEBHOOKS_FILE": good, "POSTLINE_WEBHOOKS_DLQ_TOPIC": "mail.events"}, "setting POSTLINE_WEBHOOKS_DLQ_TOPIC", ""},
		{"unparsable", map[string]string{"POSTLINE_WEBHOOKS_RETRY_HORIZON": "forever"}, `setting POSTLINE_WEBHOOKS_RETRY_HORIZON (--webhooks-retry-horizon): invalid value "forever"`, ""},
		{"heartbeat", map[string]string{"POSTLINE_WEBHOOKS_FILE": good, "BILLING_SECRET": testSecret, "POSTLINE_HEARTBEAT_INTERVAL": "20s"}, "setting POSTLINE_HEARTBEAT_INTERVAL", ""},
		{"http addr", map[string]string{"POSTLINE_WEBHOOKS_FILE": good, "BILLING_SECRET": testSecret, "POSTLINE_WEBHOOKS_HTTP_ADDR": "256.0.0.1:x"}, "setting POSTLINE_WEBHOOKS_HTTP_ADDR", ""},
		{"log level", map[string]string{"POSTLINE_LOG_LEVEL": "loud"}, `setting POSTLINE_LOG_LEVEL: invalid value "loud"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), nil, env(tt.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run = %v, want an error containing %q", err, tt.want)
			}
			if tt.never != "" && strings.Contains(err.Error(), tt.never) {
				t.Errorf("error %q shows %q", err, tt.never)
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, env(nil), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run -h = %v, want flag.ErrHelp", err)
	}
	for _, s := range []string{"POSTLINE_WEBHOOKS_FILE", "POSTLINE_EVENTS_TOPIC", "mail.events", "POSTLINE_WEBHOOKS_GROUP", "postline-webhooks",
		"POSTLINE_WEBHOOKS_DLQ_TOPIC", "mail.webhooks.dlq", "POSTLINE_WEBHOOKS_RETRY_DELAYS", "POSTLINE_DATABASE_URL", "POSTLINE_KAFKA_BROKERS", "POSTLINE_WEBHOOKS_HTTP_ADDR"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("usage lacks %q", s)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func get(addr, path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The binary's run on the real Kafka: it creates the dead-letter topic,
// becomes ready, delivers signed events to the endpoint of the file,
// serves its metrics and stops cleanly.
func TestIntegrationRun(t *testing.T) {
	testenv.Integration(t, "Kafka")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	events := testenv.NewTopic(t, 2)
	dlq := testenv.UniqueName("webhooks_dlq")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.Kafka(), dlq); err != nil {
			t.Errorf("delete %s: %v", dlq, err)
		}
	})

	wh, err := standardwebhooks.NewWebhook(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := wh.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got[r.Header.Get("webhook-id")] = true
		mu.Unlock()
	}))
	defer srv.Close()
	file := writeFile(t, "hooks.json", `{"endpoints":[{"id":"app","url":"`+srv.URL+`/hook","secret_env":"APP_SECRET","types":["bounced"]}]}`)

	addr := freeAddr(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan error, 1)
	go func() {
		exited <- run(ctx, nil, env(map[string]string{
			"POSTLINE_KAFKA_BROKERS": strings.Join(testenv.KafkaBrokers(), ","), "POSTLINE_EVENTS_TOPIC": events,
			"POSTLINE_WEBHOOKS_DLQ_TOPIC": dlq, "POSTLINE_WEBHOOKS_GROUP": testenv.UniqueName("webhooks"),
			"POSTLINE_WEBHOOKS_FILE": file, "APP_SECRET": testSecret, "POSTLINE_WEBHOOKS_HTTP_ADDR": addr,
			"POSTLINE_SESSION_TIMEOUT": "6s", "POSTLINE_HEARTBEAT_INTERVAL": "500ms", "POSTLINE_SHUTDOWN_TIMEOUT": "6s",
		}), lockedWriter{&logMu, &logs})
	}()
	defer func() {
		if t.Failed() {
			logMu.Lock()
			t.Logf("dispatcher log:\n%s", logs.String())
			logMu.Unlock()
		}
	}()
	testkit.Eventually(t, 60*time.Second, "/readyz", func() bool { code, _ := get(addr, "/readyz"); return code == http.StatusOK })

	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(testenv.KafkaBrokers()...), Transport: tr, Topic: events, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	var want []string
	for i, typ := range []event.Type{event.Bounced, event.Accepted, event.Bounced} {
		e := event.Event{Schema: event.Schema, Type: typ, At: time.Now().UTC(), MessageID: "<run@x>", Stream: event.StreamBulk,
			Recipient: "r@example.com", RecipientIndex: i, Attempt: 1, ID: event.NewID("<run@x>", i, typ, 1)}
		if typ == event.Bounced {
			e.Bounce = &event.Bounce{Type: event.BounceSoft, Source: "dsn"}
			want = append(want, e.ID)
		}
		b, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(e.MessageID), Value: b}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "both bounces delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got[want[0]] && got[want[1]]
	})
	mu.Lock()
	if len(got) != 2 {
		t.Errorf("delivered %v, want only the two bounces", got)
	}
	mu.Unlock()
	code, metrics := get(addr, "/metrics")
	if code != http.StatusOK || !strings.Contains(metrics, `postline_webhook_deliveries_total{endpoint="app",result="delivered"} 2`) ||
		!strings.Contains(metrics, `postline_webhook_backlog{endpoint="app"} 0`) {
		t.Errorf("/metrics: status %d, lacks the delivery metrics", code)
	}
	infos, err := topic.Describe(ctx, testenv.Kafka(), dlq)
	if err != nil || len(infos[0].Partitions) != topic.DefaultDLQPartitions {
		t.Errorf("dead-letter topic: %v, %v", infos, err)
	}
	cancel()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("run after cancel = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return within 20s of cancel")
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), testSecret[6:]) {
		t.Error("the secret is in the log")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
