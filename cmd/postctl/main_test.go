package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// postctl runs the command with env as its environment and returns stdout
// and stderr.
func postctl(t *testing.T, env map[string]string, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string { return env[k] }
	err := execute(ctx, args, getenv, strings.NewReader(stdin), &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// records reads every record of topic.
func records(t *testing.T, brokers, name string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	infos, err := topic.Describe(ctx, testenv.KafkaCluster(strings.Split(brokers, ",")...), name)
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	for _, p := range infos[0].Partitions {
		if p.EndOffset == p.StartOffset {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: strings.Split(brokers, ","), Topic: name, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		for range p.EndOffset - p.StartOffset {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read partition %d: %v", p.ID, err)
			}
			out = append(out, m)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestArgumentErrors(t *testing.T) {
	// Nothing listens on port 1: every case must fail before it matters.
	env := map[string]string{"POSTLINE_KAFKA_BROKERS": "127.0.0.1:1"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"bad output", []string{"--output", "yaml", "publish", "--count", "1"}, `--output "yaml"`},
		{"empty brokers", []string{"--brokers", " , ", "publish", "--count", "1"}, "--brokers is empty"},
		{"unknown flag", []string{"publish", "--count", "1", "--bogus"}, "unknown flag: --bogus"},
		{"no mode", []string{"publish"}, "--from is required"},
		{"no recipient", []string{"publish", "--from", "a@example.com"}, "--to (or --cc or --bcc) is required"},
		{"count zero", []string{"publish", "--count", "0"}, "--count 0"},
		{"count negative", []string{"publish", "--count", "-5"}, "--count -5"},
		{"count not a number", []string{"publish", "--count", "many"}, `invalid argument "many"`},
		{"batch zero", []string{"publish", "--count", "1", "--batch", "0"}, "--batch 0"},
		{"body too large", []string{"publish", "--count", "1", "--body-bytes", "300000"}, "--body-bytes 300000"},
		{"body without count", []string{"publish", "--from", "a@b.c", "--to", "d@e.f", "--body-bytes", "10"}, "--body-bytes only applies to --count"},
		{"count and file", []string{"publish", "--count", "1", "--file", "x.jsonl"}, "mutually exclusive"},
		{"count and from", []string{"publish", "--count", "1", "--from", "a@b.c"}, "cannot be combined with --from"},
		{"file and to", []string{"publish", "--file", "x.jsonl", "--to", "a@b.c", "--subject", "s"}, "cannot be combined with --to, --subject"},
		{"file and priority", []string{"publish", "--file", "x.jsonl", "--priority", "bulk"}, "--priority"},
		{"missing file", []string{"publish", "--file", filepath.Join(t.TempDir(), "none.jsonl")}, "no such file"},
		{"invalid address", []string{"publish", "--from", "a@example.com", "--to", "bob", "--text", "x"}, "job: invalid_address: to[0]"},
		{"invalid priority", []string{"publish", "--from", "a@example.com", "--to", "b@example.test", "--text", "x", "--priority", "high"}, "invalid_priority"},
		{"no body", []string{"publish", "--from", "a@example.com", "--to", "b@example.test"}, "missing_body"},
		{"header injection", []string{"publish", "--from", "a@example.com", "--to", "b@example.test", "--text", "x", "--subject", "a\r\nBcc: c@d.e"}, "header_injection"},
		{"bad message id domain", []string{"publish", "--count", "1", "--message-id-domain", "a b"}, "MessageIDDomain"},
		{"topics create partitions", []string{"topics", "create", "--partitions", "0"}, "--partitions 0"},
		{"topics create replication", []string{"topics", "create", "--replication-factor", "0"}, "--replication-factor 0"},
		{"topics create args", []string{"topics", "create", "extra"}, "unknown command"},
		{"migrate bad url", []string{"migrate", "--database-url", "mysql://x"}, "--database-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := postctl(t, env, "", tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	env := map[string]string{"POSTLINE_DATABASE_URL": "postgres://u:s3cret@db/postline"}
	out, _, err := postctl(t, env, "", "publish", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--count", "--file", "--body-bytes", "POSTLINE_KAFKA_BROKERS"} {
		if !strings.Contains(out, want) {
			t.Errorf("help does not mention %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Error("help prints the database URL from the environment")
	}
}

func TestPublishCount(t *testing.T) {
	brokers := strings.Join(testkit.FakeKafka(t, kfake.SeedTopics(4, "mail.jobs")), ",")
	out, stderr, err := postctl(t, nil, "", "--brokers", brokers, "--output", "json",
		"publish", "--count", "25", "--batch", "10", "--body-bytes", "300", "--priority", "bulk", "--progress")
	if err != nil {
		t.Fatal(err)
	}
	if stderr != "" {
		t.Errorf("progress bar shown with --output json: %q", stderr)
	}
	var s publishSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if s.Published != 25 || s.Seconds <= 0 || s.PerSecond <= 0 || s.MessageIDs != nil {
		t.Fatalf("summary %+v", s)
	}
	msgs := records(t, brokers, "mail.jobs")
	if len(msgs) != 25 {
		t.Fatalf("topic holds %d records, want 25", len(msgs))
	}
	subjects := map[string]bool{}
	for _, m := range msgs {
		j, err := job.Decode(m.Value, job.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if len(j.Text) != 300 || j.Priority != job.PriorityBulk || j.From != "postline@example.com" {
			t.Fatalf("synthetic job %+v", j)
		}
		subjects[j.Subject] = true
	}
	if !subjects["Postline synthetic 1"] || !subjects["Postline synthetic 25"] || len(subjects) != 25 {
		t.Fatalf("subjects %v", subjects)
	}
}

func TestPublishCountTextWithProgress(t *testing.T) {
	brokers := strings.Join(testkit.FakeKafka(t, kfake.SeedTopics(1, "mail.jobs")), ",")
	out, stderr, err := postctl(t, nil, "", "--brokers", brokers, "publish", "--count", "3", "--progress")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "published 3 jobs to mail.jobs in ") || !strings.Contains(out, "jobs/s") {
		t.Fatalf("output %q", out)
	}
	if !strings.Contains(stderr, "publishing") {
		t.Fatalf("no progress bar on stderr: %q", stderr)
	}
}

func TestPublishSingleUsesEnvironment(t *testing.T) {
	brokers := strings.Join(testkit.FakeKafka(t, kfake.SeedTopics(2, "custom.jobs")), ",")
	env := map[string]string{"POSTLINE_KAFKA_BROKERS": brokers, "POSTLINE_JOBS_TOPIC": "custom.jobs"}
	out, _, err := postctl(t, env, "", "publish",
		"--from", "Ada <ada@example.com>", "--to", "b@example.test", "--to", "c@example.test",
		"--subject", "Hi", "--text", "Hello", "--html", "<p>Hello</p>", "--priority", "urgent", "--message-id", "<one@example.com>")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "published 1 job to custom.jobs") || !strings.Contains(out, "message_id: one@example.com") {
		t.Fatalf("output %q", out)
	}
	msgs := records(t, brokers, "custom.jobs")
	if len(msgs) != 1 {
		t.Fatalf("%d records", len(msgs))
	}
	j, err := job.Decode(msgs[0].Value, job.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if string(msgs[0].Key) != "one@example.com" || j.From != "Ada <ada@example.com>" || len(j.To) != 2 || j.HTML != "<p>Hello</p>" || j.Priority != job.PriorityUrgent {
		t.Fatalf("record key %q job %+v", msgs[0].Key, j)
	}
}

func TestPublishFile(t *testing.T) {
	brokers := strings.Join(testkit.FakeKafka(t, kfake.SeedTopics(1, "mail.jobs")), ",")
	lines := `{"from":"a@example.com","to":["b@example.test"],"subject":"one","text":"1"}

{"version":1,"message_id":"<two@example.com>","from":"a@example.com","to":["c@example.test"],"subject":"two","html":"<b>2</b>"}
{"from":"a@example.com","to":["d@example.test"],"subject":"three","text":"3","metadata":{"k":"v"}}
`
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		file  string
		stdin string
	}{{"file", path, ""}, {"stdin", "-", lines}} {
		out, _, err := postctl(t, nil, tt.stdin, "--brokers", brokers, "--output", "json", "publish", "--file", tt.file, "--batch", "2")
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var s publishSummary
		if err := json.Unmarshal([]byte(out), &s); err != nil || s.Published != 3 {
			t.Fatalf("%s: output %q (%v)", tt.name, out, err)
		}
	}
	if n := len(records(t, brokers, "mail.jobs")); n != 6 {
		t.Fatalf("topic holds %d records, want 6", n)
	}
}

func TestPublishFileErrorsNameTheLine(t *testing.T) {
	brokers := strings.Join(testkit.FakeKafka(t, kfake.SeedTopics(1, "mail.jobs")), ",")
	tests := []struct {
		name, stdin, want string
	}{
		{"invalid job", "{\"from\":\"a@example.com\",\"to\":[\"b@example.test\"],\"text\":\"x\"}\n{\"from\":\"a@example.com\",\"to\":[\"nope\"],\"text\":\"x\"}\n", "-: line 2: job: invalid_address: to[0]"},
		{"unknown key", `{"from":"a@example.com","sender":"x"}`, `-: line 1: json: unknown field "sender"`},
		{"not JSON", "\n\nhello\n", "-: line 3"},
		{"two values", `{"from":"a@example.com"} {}`, "more than one JSON value"},
	}
	for _, tt := range tests {
		_, _, err := postctl(t, nil, tt.stdin, "--brokers", brokers, "publish", "--file", "-", "--batch", "1")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
	// The valid first line of "invalid job" was published in its own batch
	// before line 2 failed, and the error says so.
	_, _, err := postctl(t, nil, tests[0].stdin, "--brokers", brokers, "publish", "--file", "-", "--batch", "1")
	if err == nil || !strings.Contains(err.Error(), "published 1 jobs, then") {
		t.Fatalf("got %v", err)
	}
}

func TestTopicsCreate(t *testing.T) {
	brokers := strings.Join(testkit.FakeKafka(t), ",")
	out, _, err := postctl(t, nil, "", "--brokers", brokers, "--output", "json", "--topic", "t.jobs", "--dlq-topic", "t.dlq",
		"--retry-topic-prefix", "t.retry", "--retry-tiers", "1s,1m", "--events-topic", "t.events", "topics", "create", "--partitions", "3")
	if err != nil {
		t.Fatal(err)
	}
	var got []topicSummary
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	want := []struct {
		name       string
		partitions int
	}{{"t.jobs", 3}, {"t.dlq", 4}, {"t.retry.1s", 3}, {"t.retry.1m", 3}, {"t.events", 8}}
	if len(got) != len(want) {
		t.Fatalf("got %d topics, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || g.Partitions != w.partitions || len(g.PartitionDetails) != w.partitions ||
			g.ReplicationFactor != 1 || g.Messages != 0 || g.Configs["retention.ms"] == "" {
			t.Errorf("topic %d = %+v, want %s with %d partitions, replication 1 and its retention", i, g, w.name, w.partitions)
		}
	}
	// Idempotent, and describe agrees.
	if _, _, err := postctl(t, nil, "", "--brokers", brokers, "--topic", "t.jobs", "--dlq-topic", "t.dlq", "topics", "create", "--partitions", "3"); err != nil {
		t.Fatal(err)
	}
	out, _, err = postctl(t, nil, "", "--brokers", brokers, "topics", "describe", "t.jobs")
	if err != nil || !strings.HasPrefix(out, "t.jobs: 3 partitions, replication factor 1, 0 messages\n") ||
		!strings.Contains(out, "PARTITION  LEADER") || !strings.Contains(out, "retention.ms=") {
		t.Fatalf("describe: %q, %v", out, err)
	}
}

func TestTopicsCreateAndPublishKafka(t *testing.T) {
	testenv.Integration(t, "Kafka")
	brokers := strings.Join(testenv.KafkaBrokers(), ",")
	// Every topic topics create makes is named for this test: with the
	// default delay and events topics it would leave mail.retry.* with 2
	// partitions on the stack's broker, which make demo then refuses.
	jobs, dlq := testenv.UniqueName("postctl_jobs"), testenv.UniqueName("postctl_dlq")
	prefix, events := testenv.UniqueName("postctl_retry"), testenv.UniqueName("postctl_events")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.Kafka(), jobs, dlq, prefix+".5s", events); err != nil {
			t.Error(err)
		}
	})
	args := []string{"--brokers", brokers, "--topic", jobs, "--dlq-topic", dlq,
		"--retry-topic-prefix", prefix, "--retry-tiers", "5s", "--events-topic", events}
	if _, _, err := postctl(t, nil, "", append(args, "topics", "create", "--partitions", "2")...); err != nil {
		t.Fatal(err)
	}
	out, _, err := postctl(t, nil, "", append(args, "--output", "json", "publish", "--count", "1000", "--body-bytes", "1024")...)
	if err != nil {
		t.Fatal(err)
	}
	var s publishSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Published != 1000 {
		t.Fatalf("output %q (%v)", out, err)
	}
	out, _, err = postctl(t, nil, "", append(args, "topics", "describe", jobs)...)
	if err != nil || !strings.Contains(out, "2 partitions, replication factor 1, 1000 messages") {
		t.Fatalf("describe: %q, %v", out, err)
	}
}

func TestMigrate(t *testing.T) {
	url, pool := testenv.NewSchema(t)
	for range 2 { // the second run is a no-op
		out, _, err := postctl(t, nil, "", "--database-url", url, "--output", "json", "migrate")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != `{"migrated":true}` {
			t.Fatalf("output %q", out)
		}
	}
	var tables int
	err := pool.QueryRow(t.Context(), "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()").Scan(&tables)
	if err != nil {
		t.Fatal(err)
	}
	if tables == 0 {
		t.Fatal("migrate created no tables in the schema")
	}
}
