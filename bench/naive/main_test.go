package main

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/job"
	"github.com/wneessen/go-mail"
)

func TestTLSPolicy(t *testing.T) {
	tests := []struct {
		host string
		want mail.TLSPolicy
	}{
		{"127.0.0.1", mail.NoTLS},
		{"::1", mail.NoTLS},
		{"localhost", mail.NoTLS},
		{"127.0.0.53", mail.NoTLS},
		{"smtp.example.com", mail.TLSMandatory},
		{"10.0.0.1", mail.TLSMandatory},
	}
	for _, tt := range tests {
		if got := tlsPolicy(tt.host); got != tt.want {
			t.Errorf("tlsPolicy(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}

func TestRunRejectsBadSettings(t *testing.T) {
	tests := []struct {
		env     map[string]string
		wantErr string
	}{
		{map[string]string{"POSTLINE_NAIVE_CONCURRENCY": "0"}, "POSTLINE_NAIVE_CONCURRENCY"},
		{map[string]string{"POSTLINE_LOG_LEVEL": "loud"}, "POSTLINE_LOG_LEVEL"},
		{map[string]string{"POSTLINE_SMTP_PORT": "x"}, "POSTLINE_SMTP_PORT"},
	}
	for _, tt := range tests {
		err := run(context.Background(), nil, func(k string) string { return tt.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("run with %v: error %v, want one naming %s", tt.env, err, tt.wantErr)
		}
	}
}

// TestNaiveDeliversOnceAndRecordsTimes runs the baseline against Kafka,
// PostgreSQL and a private Mailpit: every job is delivered, a redelivered
// record of a sent job is not sent again, and each row carries enqueued_at
// and sent_at for the benchmark's latency.
func TestNaiveDeliversOnceAndRecordsTimes(t *testing.T) {
	testenv.Integration(t, "Kafka, PostgreSQL and mailpit")
	mp := testenv.StartMailpit(t)
	dbURL, pool := testenv.NewSchema(t)
	// One partition: the records are handled in publish order.
	topicName := testenv.NewTopic(t, 1)
	brokers := testenv.KafkaBrokers()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub, err := job.NewPublisher(testenv.KafkaCluster(brokers...).Config(), job.PublisherConfig{Topic: topicName})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	newJob := func(i int) job.Job {
		return job.Job{Version: job.SchemaVersion, MessageID: "naive-" + strconv.Itoa(i) + "@bench.postline.test",
			From: "bench@postline.test", To: []string{"rcpt@postline.test"}, Subject: "naive " + strconv.Itoa(i), Text: "hello"}
	}
	// Jobs 0-2, job 0 again (a redelivery), then job 3 as the marker that
	// everything before it was handled.
	for _, i := range []int{0, 1, 2, 0, 3} {
		if _, err := pub.Publish(ctx, newJob(i)); err != nil {
			t.Fatalf("publish job %d: %v", i, err)
		}
	}

	env := map[string]string{
		"POSTLINE_KAFKA_BROKERS":     strings.Join(brokers, ","),
		"POSTLINE_JOBS_TOPIC":        topicName,
		"POSTLINE_CONSUMER_GROUP":    testenv.UniqueName("naive"),
		"POSTLINE_DATABASE_URL":      dbURL,
		"POSTLINE_SMTP_HOST":         mp.SMTPHost(),
		"POSTLINE_SMTP_PORT":         strconv.Itoa(mp.SMTPPort()),
		"POSTLINE_NAIVE_CONCURRENCY": "1", // sequential, as in the benchmark
		"POSTLINE_LOG_LEVEL":         "warn",
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, nil, func(k string) string { return env[k] }, io.Discard) }()
	stopped := false
	stopRun := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stop()
		return <-done
	}
	defer func() {
		if err := stopRun(); err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var sent int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM postline_messages
			WHERE message_id = 'naive-3@bench.postline.test' AND status = 'sent'`).Scan(&sent)
		if err == nil && sent == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job 3 not sent: %v (last query error %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
	if err := stopRun(); err != nil {
		t.Fatalf("run: %v", err)
	}

	rows, err := pool.Query(ctx, `SELECT message_id, status, version, enqueued_at IS NOT NULL,
		sent_at >= enqueued_at FROM postline_messages ORDER BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var (
			id, status   string
			version      int64
			enq, ordered bool
		)
		if err := rows.Scan(&id, &status, &version, &enq, &ordered); err != nil {
			t.Fatal(err)
		}
		if status != "sent" || version != 2 || !enq || !ordered {
			t.Errorf("row %s: status %s version %d enqueued_at set %v sent_at >= enqueued_at %v; want sent, 2, true, true",
				id, status, version, enq, ordered)
		}
		got = append(got, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Errorf("rows = %v, want 4", got)
	}
	if n, err := mp.Count(ctx); err != nil || n != 4 {
		t.Errorf("mailpit holds %d messages (err %v), want 4: the redelivered job must not be sent again", n, err)
	}
}
