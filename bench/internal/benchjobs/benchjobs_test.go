package benchjobs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/job"
)

const line = "Postline end-to-end benchmark body text, 64 bytes per line ...\n"

func TestBody(t *testing.T) {
	for _, n := range []int{0, 1, 64, 1024, 1000} {
		b := Body(n, line)
		if len(b) != n {
			t.Errorf("Body(%d) has %d bytes", n, len(b))
		}
		if !strings.HasPrefix(line+line+line+line+line+line+line+line+line+line+line+line+line+line+line+line+line, b) {
			t.Errorf("Body(%d) is not the line over and over: %q", n, b)
		}
	}
}

func TestPlain(t *testing.T) {
	jobs := Plain(3, "hello\n")
	if len(jobs) != 3 {
		t.Fatalf("Plain(3) made %d jobs", len(jobs))
	}
	for i, want := range []string{"rcpt0@sink.postline.test", "rcpt1@sink.postline.test", "rcpt2@sink.postline.test"} {
		j := jobs[i]
		if len(j.To) != 1 || j.To[0] != want || j.Text != "hello\n" || j.Version != job.SchemaVersion || j.From == "" || j.Subject == "" {
			t.Errorf("job %d = %+v, want one recipient %s, the body and a sender and subject", i, j, want)
		}
	}
}

// TestPublish publishes more jobs than one chunk onto a fresh topic and
// finds every one of them there.
func TestPublish(t *testing.T) {
	topic := testenv.NewTopic(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	took, err := Publish(ctx, testenv.KafkaBrokers(), topic, Plain(25, Body(100, line)), 10)
	if err != nil || took <= 0 {
		t.Fatalf("Publish = %s, %v", took, err)
	}
	client := &kafka.Client{Addr: kafka.TCP(testenv.KafkaBrokers()...)}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		topic: {kafka.LastOffsetOf(0), kafka.LastOffsetOf(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	var records int64
	for _, p := range resp.Topics[topic] {
		records += p.LastOffset
	}
	if records != 25 {
		t.Fatalf("%d records on the topic, want 25", records)
	}
}

// TestRowsAndLatency reads the counts and the latency from rows of a
// postline_messages with the columns they use.
func TestRowsAndLatency(t *testing.T) {
	_, pool := testenv.NewSchema(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE postline_messages (status text, enqueued_at timestamptz, sent_at timestamptz);
		INSERT INTO postline_messages VALUES
			('sent', '2026-01-01 00:00:00Z', '2026-01-01 00:00:01Z'),
			('sent', '2026-01-01 00:00:00Z', '2026-01-01 00:00:03Z'),
			('sent', '2026-01-01 00:00:01Z', '2026-01-01 00:00:04Z'),
			('sending', '2026-01-01 00:00:01Z', NULL),
			('dead', '2026-01-01 00:00:01Z', NULL),
			('failed', '2026-01-01 00:00:01Z', NULL)`); err != nil {
		t.Fatal(err)
	}
	sent, failed, err := CountRows(ctx, pool)
	if err != nil || sent != 3 || failed != 2 {
		t.Fatalf("CountRows = %d sent, %d failed, %v; want 3 and 2", sent, failed, err)
	}
	l, err := ReadLatency(ctx, pool)
	want := Latency{Mails: 3, Span: 4 * time.Second, P50: 3 * time.Second, P99: 3 * time.Second, Max: 3 * time.Second}
	if err != nil || l.Mails != want.Mails || l.Span != want.Span || l.P50 != want.P50 || l.P99 < 2900*time.Millisecond || l.P99 > want.P99 || l.Max != want.Max {
		t.Fatalf("ReadLatency = %+v, %v; want about %+v", l, err, want)
	}
}
