package mailquery_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
)

// runIndexer runs ix until the test ends and checks that it stops cleanly.
func runIndexer(t *testing.T, ix *mailquery.Indexer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan error, 1)
	go func() { exited <- ix.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("Run = %v, want nil after cancel", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

func publish(t *testing.T, topicName string, records ...kafka.Message) {
	t.Helper()
	w, closeConn, err := testenv.Kafka().Writer(kafkaclient.WriterConfig{Topic: topicName, Name: "test",
		Limits: map[string]int{topicName: topic.MaxMessageBytes}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	if err := w.WriteMessages(t.Context(), records...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func record(t *testing.T, e event.Event) kafka.Message {
	t.Helper()
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return kafka.Message{Key: []byte(e.MessageID), Value: b}
}

// TestIndexerIndexesTheEventsTopic publishes events, a copy of one and
// records that are not events on a real topic, and checks that each event
// is in the table once, in the mail's life, and that the skipped records
// were committed with the rest: a new Indexer of the group reads only what
// came after.
func TestIndexerIndexesTheEventsTopic(t *testing.T) {
	pool := migrated(t)
	topicName := testenv.NewTopic(t, 2)
	group := testenv.UniqueName("mailquery")
	now := time.Now().UTC().Truncate(time.Millisecond)

	accepted := ev("kafka@shop", 0, "ada@example.com", event.Accepted, 1, now.Add(-3*time.Minute))
	bounced := ev("kafka@shop", 1, "bob@example.org", event.Bounced, 1, now.Add(-2*time.Minute))
	bounced.Bounce = &event.Bounce{Type: event.BounceHard, Status: "5.1.1", Code: 550, Source: "dsn"}
	delivered := ev("kafka@shop", 0, "ada@example.com", event.Delivered, 0, now.Add(-time.Minute))
	invalid, _ := json.Marshal(map[string]any{"schema": event.Schema, "type": "accepted"}) // no id, no message

	publish(t, topicName,
		record(t, accepted), record(t, bounced),
		kafka.Message{Key: []byte("kafka@shop"), Value: []byte("not an event")},
		record(t, accepted), // a copy: same ID
		kafka.Message{Key: []byte("kafka@shop"), Value: invalid},
		record(t, delivered),
	)

	ix := newIndexer(t, pool, topicName, group)
	stop := runIndexer(t, ix)
	testkit.Eventually(t, 60*time.Second, "3 events indexed and 2 records skipped", func() bool {
		s := ix.Stats()
		return s.Indexed == 3 && s.Skipped == 2
	})

	var rows int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM postline_mail_events WHERE message_id = 'kafka@shop'`).Scan(&rows); err != nil || rows != 3 {
		t.Errorf("%d rows for the mail (%v), want 3", rows, err)
	}
	life, err := newReader(t, pool).Life(t.Context(), "kafka@shop")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range life.Entries {
		types = append(types, e.Type)
	}
	if len(types) != 3 || types[0] != "accepted" || types[1] != "bounced" || types[2] != "delivered" {
		t.Errorf("life entries %v, want accepted, bounced, delivered (the row was never written: only events)", types)
	}
	stop()

	// What the first Indexer read was committed, skipped records too: a
	// second one in the group reads only the new event.
	later := ev("kafka@shop", 1, "bob@example.org", event.Complained, 0, now)
	publish(t, topicName, record(t, later))
	second := newIndexer(t, pool, topicName, group)
	runIndexer(t, second)
	testkit.Eventually(t, 60*time.Second, "the new event indexed", func() bool { return second.Stats().Indexed == 1 })
	// Give a re-read of the old records the time to show.
	time.Sleep(time.Second)
	if s := second.Stats(); s != (mailquery.IndexerStats{Indexed: 1}) {
		t.Errorf("second indexer's stats = %+v, want only the new event (were offsets committed?)", s)
	}
}
