package console

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/relaystate"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
)

// toPartition routes each record to the partition its Partition field
// names.
type toPartition struct{}

func (toPartition) Balance(m kafka.Message, _ ...int) int { return m.Partition }

// produceTo writes n records to each partition of topic as counts gives.
func produceTo(t *testing.T, topic string, counts map[int]int) {
	t.Helper()
	var msgs []kafka.Message
	for p, n := range counts {
		for i := range n {
			msgs = append(msgs, kafka.Message{Partition: p, Key: fmt.Appendf(nil, "k-%d-%d", p, i), Value: []byte("{}")})
		}
	}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(testenv.KafkaBrokers()...), Transport: tr, Topic: topic, Balancer: toPartition{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := w.WriteMessages(ctx, msgs...)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// commitFor commits offsets (partition: next offset) of topic for group,
// as a consumer outside any generation: the group has no member.
func commitFor(t *testing.T, group, topic string, offsets map[int]int64) {
	t.Helper()
	client, closeConn := testenv.Kafka().Client("test", 10*time.Second)
	defer closeConn()
	var commits []kafka.OffsetCommit
	for p, o := range offsets {
		commits = append(commits, kafka.OffsetCommit{Partition: p, Offset: o})
	}
	res, err := client.OffsetCommit(t.Context(), &kafka.OffsetCommitRequest{GroupID: group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topic: commits}})
	if err != nil {
		t.Fatalf("commit %s for %s: %v", topic, group, err)
	}
	for _, ps := range res.Topics {
		for _, p := range ps {
			if p.Error != nil {
				t.Fatalf("commit %s/%d for %s: %v", topic, p.Partition, group, p.Error)
			}
		}
	}
}

// TestQueuesAndRelaysPagesOverHTTP runs the console on the real Kafka and
// PostgreSQL with the real fleet reader: records on an isolated jobs
// topic, some committed by an isolated workers' group, dead letters on an
// isolated dead-letter topic, and relay state and breaker rows in an
// isolated schema. A viewer logs in and reads /queues and /relays, and
// their API twins.
func TestQueuesAndRelaysPagesOverHTTP(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	jobs, dlq := testenv.NewTopic(t, 3), testenv.NewTopic(t, 1)
	group := testenv.UniqueName("console_workers")
	var pool *pgxpool.Pool
	st := newStackWith(t, func(p *pgxpool.Pool, _ *suppression.Store, cfg *Config) {
		pool = p
		r, err := fleet.New(fleet.Config{Kafka: testenv.Kafka(), Queues: fleet.QueueNames{JobsTopic: jobs, WorkerGroup: group},
			DeadLetterTopic: dlq, Database: p})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Fleet = r
	})

	// Jobs: 5, 3 and 0 records; the workers committed 2 of partition 0's
	// and all of partition 1's: lag 3, 0 and 0.
	produceTo(t, jobs, map[int]int{0: 5, 1: 3})
	commitFor(t, group, jobs, map[int]int64{0: 2, 1: 3})
	deadLetters(t, dlq, "smtp_permanent", "smtp_permanent", "max_attempts")
	seedRelays(t, pool)

	b := st.browser(t)
	b.mustLogin("vic", vicPassword)
	status, body := b.get("/queues")
	if status != http.StatusOK {
		t.Fatalf("GET /queues as a viewer = %d:\n%s", status, body)
	}
	for _, want := range []string{
		"<code>" + group + "</code> (Empty): <strong>3</strong> records not yet taken; 0 members",
		`<td>0</td><td class="n">3</td><td>-</td>`, `<td>1</td><td class="n">0</td><td>-</td>`, `<td>2</td><td class="n">0</td><td>-</td>`,
		`<th scope="row">Total</th><td class="n">3</td>`,
		"<strong>3</strong> dead letters from", ">smtp_permanent</a>: 2", ">max_attempts</a>: 1",
		`href="/deadletters?list=1&amp;reason=smtp_permanent&amp;since=`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /queues lacks %q:\n%s", want, body)
		}
	}
	if rows := strings.Count(body, `<tr class="bucket">`); rows < 24 || rows > 25 {
		t.Errorf("the last 24 h by hour has %d bucket rows, want 24 or 25", rows)
	}

	// A window that is not text is refused, and audited without it.
	if status, body = b.get("/queues?since=%00&bucket=%FF"); status != http.StatusBadRequest || !strings.Contains(body, "not text") {
		t.Errorf("GET /queues with a NUL window = %d, want 400 saying it is not text:\n%s", status, body)
	}

	status, body = b.get("/relays")
	if status != http.StatusOK {
		t.Fatalf("GET /relays as a viewer = %d:\n%s", status, body)
	}
	for _, want := range []string{"Relay mx-main", `<span class="state">open</span>`, "Opened on</dt><dd>connection_refused",
		"<dt>Next probe</dt><dd><time datetime=", "30.0/s learned (1 of 1 live worker paced)",
		`<td>worker-a</td><td><span class="state">paced</span></td>`, `<td>worker-gone</td><td><span class="state">stale</span></td>`,
		"Relay mx-spare", `<span class="state">closed</span>`, `<td>worker-a</td><td><span class="state">unpaced</span></td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /relays lacks %q:\n%s", want, body)
		}
	}

	var q fleet.Queues
	if status, body = b.get("/api/v1/queues"); status != http.StatusOK || json.Unmarshal([]byte(body), &q) != nil {
		t.Fatalf("GET /api/v1/queues = %d: %s", status, body)
	}
	if q.Workers.Group != group || q.Workers.Total != 3 || len(q.Workers.Topics) != 1 || len(q.Workers.Topics[0].Partitions) != 3 {
		t.Errorf("API queues %+v; want %s with lag 3 over 3 partitions", q, group)
	}
	var rep fleet.Relays
	if status, body = b.get("/api/v1/relays"); status != http.StatusOK || json.Unmarshal([]byte(body), &rep) != nil {
		t.Fatalf("GET /api/v1/relays = %d: %s", status, body)
	}
	if len(rep.Relays) != 2 || rep.Relays[0].Name != "mx-main" || rep.Relays[0].FleetRate != 30 {
		t.Errorf("API relays %+v; want mx-main at 30/s, then mx-spare", rep.Relays)
	}
	want := []string{"login:ok", "queues.view:ok", "queues.view:ok", "relays.view:ok", "api.queues:ok", "api.relays:ok"}
	if got := st.auditResults(t, "vic"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("audit log of vic = %v, want %v", got, want)
	}
}

// deadLetters writes a dead letter of each reason to the dead-letter
// topic, dead-lettered now.
func deadLetters(t *testing.T, topic string, reasons ...string) {
	t.Helper()
	w, err := deadletter.New(deadletter.Config{Kafka: testenv.Kafka(), Topic: topic}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var dls []deadletter.Letter
	for i, reason := range reasons {
		dls = append(dls, deadletter.Letter{Key: fmt.Appendf(nil, "m%d@x", i), Value: []byte("{}"), Topic: "mail.jobs", Reason: reason,
			Class: "permanent", Error: "550 5.1.1", Attempt: 1})
	}
	if err := w.Publish(t.Context(), dls...); err != nil {
		t.Fatal(err)
	}
}

// seedRelays publishes two workers' relay state (worker-gone's an hour
// old) and two breakers, as the workers would.
func seedRelays(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	store := relaystate.New(pool)
	now, inf := time.Now(), math.Inf(1)
	for _, p := range []struct {
		worker string
		at     time.Time
		states []relaystate.Snapshot
	}{
		{"worker-a", now, []relaystate.Snapshot{{Relay: "mx-main", Priority: 1, Limit: 5, InFlight: 2, Rate: 30, FleetShare: inf},
			{Relay: "mx-spare", Priority: 2, Limit: 16, Rate: inf, FleetShare: inf}}},
		{"worker-gone", now.Add(-time.Hour), []relaystate.Snapshot{{Relay: "mx-main", Priority: 1, Limit: 1, Rate: 900, FleetShare: inf}}},
	} {
		if err := store.Publish(ctx, p.worker, p.at, p.states); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO postline_circuits (provider, state, failures, cooldown, opened_at, open_until, last_class)
		VALUES ('mx-main', 'open', 5, '30s', now() - interval '3 seconds', now() + interval '27 seconds', 'connection_refused'),
		       ('mx-spare', 'closed', 0, '30s', NULL, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
}

// TestQueuesPageWhileKafkaIsAway: a Kafka that does not answer is an error
// state on the page, saying what to check, not a failed request.
func TestQueuesPageWhileKafkaIsAway(t *testing.T) {
	testenv.Integration(t, "PostgreSQL")
	away := testenv.KafkaCluster(freeLoopbackAddr(t))
	st := newStackWith(t, func(p *pgxpool.Pool, _ *suppression.Store, cfg *Config) {
		r, err := fleet.New(fleet.Config{Kafka: away, Queues: fleet.QueueNames{JobsTopic: "mail.jobs", WorkerGroup: "postline-worker"},
			DeadLetterTopic: "mail.dlq", Database: p})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Fleet = r
	})
	b := st.browser(t)
	b.client.Timeout = 2 * fleetReadTimeout
	b.mustLogin("vic", vicPassword)
	status, body := b.get("/queues")
	if status != http.StatusServiceUnavailable {
		t.Fatalf("GET /queues with Kafka away = %d, want 503:\n%s", status, body)
	}
	for _, want := range []string{"could not read the lag of the workers&#39; group postline-worker", "Check that Kafka answers (postctl status)",
		"could not read the dead-letter topic (POSTLINE_DLQ_TOPIC)", `<label for="bucket">Bucket</label>`} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /queues with Kafka away lacks %q:\n%s", want, body)
		}
	}
}

// freeLoopbackAddr is a loopback address nothing listens on.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
