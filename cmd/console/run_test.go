package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
)

func TestLoadSettingsRefusesPlainHTTPOffLoopback(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "defaults: loopback, no TLS"},
		{name: "every interface without TLS", env: map[string]string{"POSTLINE_CONSOLE_ADDR": ":8090"},
			wantErr: "POSTLINE_CONSOLE_ADDR: address \":8090\" listens on every interface without TLS"},
		{name: "a public address without TLS", env: map[string]string{"POSTLINE_CONSOLE_ADDR": "192.0.2.1:8090"},
			wantErr: "without TLS: set the certificate and key files"},
		{name: "a certificate without its key", env: map[string]string{"POSTLINE_CONSOLE_ADDR": ":8443", "POSTLINE_CONSOLE_TLS_CERT_FILE": "cert.pem"},
			wantErr: "POSTLINE_CONSOLE_TLS_CERT_FILE and POSTLINE_CONSOLE_TLS_KEY_FILE: set both"},
		{name: "missing certificate files", env: map[string]string{"POSTLINE_CONSOLE_TLS_CERT_FILE": "/nonexistent/c.pem", "POSTLINE_CONSOLE_TLS_KEY_FILE": "/nonexistent/k.pem"},
			wantErr: "POSTLINE_CONSOLE_TLS_CERT_FILE"},
		{name: "a session of seconds", env: map[string]string{"POSTLINE_CONSOLE_SESSION_LIFETIME": "30s"},
			wantErr: "POSTLINE_CONSOLE_SESSION_LIFETIME"},
		{name: "no retention", env: map[string]string{"POSTLINE_CONSOLE_EVENTS_RETENTION": "0s"},
			wantErr: "POSTLINE_CONSOLE_EVENTS_RETENTION"},
		{name: "no shutdown time", env: map[string]string{"POSTLINE_SHUTDOWN_TIMEOUT": "0s"}, wantErr: "POSTLINE_SHUTDOWN_TIMEOUT"},
		{name: "tiers not ascending", env: map[string]string{"POSTLINE_RETRY_TIERS": "1h,5s"}, wantErr: "setting POSTLINE_RETRY_TIERS"},
		{name: "tiers that are not durations", env: map[string]string{"POSTLINE_RETRY_TIERS": "soon"}, wantErr: "setting POSTLINE_RETRY_TIERS"},
		{name: "a blank workers' group", env: map[string]string{"POSTLINE_CONSUMER_GROUP": " "}, wantErr: "setting POSTLINE_CONSUMER_GROUP: empty"},
		{name: "a blank scheduler's group", env: map[string]string{"POSTLINE_SCHEDULER_GROUP": " "}, wantErr: "setting POSTLINE_SCHEDULER_GROUP: empty"},
		{name: "no relay state interval", env: map[string]string{"POSTLINE_RELAY_STATE_INTERVAL": "0s"}, wantErr: "POSTLINE_RELAY_STATE_INTERVAL"},
	}
	for _, tt := range tests {
		_, _, _, err := loadSettings(nil, func(k string) string { return tt.env[k] }, io.Discard)
		if tt.wantErr == "" && err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestRunIndexesEventsAndShowsALife starts the binary's run on a fresh
// schema and events topic: it migrates and turns ready; an operator logs
// in; an event published to the topic is indexed, and the mail's life (a
// mail known only by its events) comes back from the API; the relays and
// queues are read with the settings' names; the console stops cleanly.
func TestRunIndexesEventsAndShowsALife(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	dbURL, pool := testenv.NewSchema(t)
	eventsTopic, jobsTopic := testenv.NewTopic(t, 1), testenv.NewTopic(t, 1)
	addr, opsAddr := freeAddr(t), freeAddr(t)
	env := map[string]string{"POSTLINE_DATABASE_URL": dbURL, "POSTLINE_CONSOLE_ADDR": addr, "POSTLINE_CONSOLE_HTTP_ADDR": opsAddr,
		"POSTLINE_SHUTDOWN_TIMEOUT": "2s", "POSTLINE_KAFKA_BROKERS": strings.Join(testenv.KafkaBrokers(), ","),
		"POSTLINE_EVENTS_TOPIC": eventsTopic, "POSTLINE_CONSOLE_INDEXER_GROUP": testenv.UniqueName("console"),
		// Delay topics that do not exist: the queues read the jobs topic, then fail on the tiers.
		"POSTLINE_JOBS_TOPIC": jobsTopic, "POSTLINE_RETRY_TOPIC_PREFIX": testenv.UniqueName("console_retry")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, io.Discard) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	testkit.Eventually(t, 30*time.Second, "the console's /readyz to answer 200", func(context.Context) (bool, string) {
		resp, err := client.Get("http://" + opsAddr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	// The migrations are applied: the account can be made.
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	accounts, err := operator.New(operator.Config{Hash: operator.HashParams{MemoryKiB: 1024, Passes: 1, Lanes: 1}}, pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := accounts.Add(t.Context(), "ada", operator.RoleViewer, "ada's long password"); err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	browser := login(t, base, "ada", "ada's long password")

	const mid = "run-test@postline.test"
	e := event.Event{Schema: event.Schema, ID: event.NewID(mid, 0, event.Accepted, 1), Type: event.Accepted, At: time.Now().UTC(),
		MessageID: mid, Stream: event.StreamTransactional, Recipient: "ada@example.com", Attempt: 1, Provider: "primary",
		DKIMDomain: "postline.test"}
	publish(t, eventsTopic, e)
	var life mailquery.Life
	testkit.Eventually(t, 30*time.Second, "the event's mail in the API", func(context.Context) (bool, string) {
		resp, err := browser.Get(base + "/api/v1/mail/life?id=" + url.QueryEscape(mid))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
		return json.Unmarshal(body, &life) == nil, string(body)
	})
	if !life.Mail.Purged || len(life.Entries) == 0 || life.Entries[len(life.Entries)-1].Type != string(event.Accepted) {
		t.Errorf("life = %+v, want the accepted event of a mail known by its events only", life)
	}
	resp, err := browser.Get(base + "/api/v1/mail/life?id=nobody@postline.test")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("life of an unknown mail = %d, want 404", resp.StatusCode)
	}
	checkFleetWiring(t, browser, base)
}

// checkFleetWiring reads the relays (none in a fresh schema) and the
// queues, whose delay topics the run test's settings name but do not
// create: the answer names the scheduler's settings.
func checkFleetWiring(t *testing.T, browser *http.Client, base string) {
	t.Helper()
	for path, want := range map[string]struct {
		status int
		body   string
	}{
		"/api/v1/relays": {http.StatusOK, `"relays":[]`},
		"/relays":        {http.StatusOK, "No relays: no worker has published"},
		"/api/v1/queues": {http.StatusServiceUnavailable, "retry scheduler's group postline-retry-scheduler on the delay topics"},
	} {
		resp, err := browser.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.status || !strings.Contains(string(body), want.body) {
			t.Errorf("GET %s = %d %s; want %d with %q", path, resp.StatusCode, body, want.status, want.body)
		}
	}
}

// login logs name in with the console's form and returns a client holding
// the session cookie.
func login(t *testing.T, base, name, password string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 5 * time.Second}
	resp, err := c.Get(base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("login page without its token:\n%s", body)
	}
	resp, err = c.PostForm(base+"/login", url.Values{"csrf": {string(m[1])}, "name": {name}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/mail" {
		t.Fatalf("login ended at %s with %d", resp.Request.URL, resp.StatusCode)
	}
	return c
}

func publish(t *testing.T, topicName string, events ...event.Event) {
	t.Helper()
	w, closeConn, err := testenv.Kafka().Writer(kafkaclient.WriterConfig{Topic: topicName, Name: "test",
		Limits: map[string]int{topicName: topic.MaxMessageBytes}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	records := make([]kafka.Message, len(events))
	for i, e := range events {
		b, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		records[i] = kafka.Message{Key: []byte(e.MessageID), Value: b}
	}
	if err := w.WriteMessages(t.Context(), records...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
