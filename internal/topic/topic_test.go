package topic_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		spec topic.Spec
		want string // substring of the error; empty: valid
	}{
		{topic.Spec{Name: "mail.jobs", Partitions: 8}, ""},
		{topic.Spec{Name: "a_b-C.9", Partitions: 1, ReplicationFactor: 3}, ""},
		{topic.Spec{Name: "x", Partitions: 1, ReplicationFactor: -1}, ""},
		{topic.Spec{Name: "", Partitions: 1}, "topic name"},
		{topic.Spec{Name: "..", Partitions: 1}, "topic name"},
		{topic.Spec{Name: "mail jobs", Partitions: 1}, `' '`},
		{topic.Spec{Name: strings.Repeat("a", 250), Partitions: 1}, "249"},
		{topic.Spec{Name: "x", Partitions: 0}, "Partitions"},
		{topic.Spec{Name: "x", Partitions: 1, ReplicationFactor: -2}, "ReplicationFactor"},
	}
	for _, tt := range tests {
		err := tt.spec.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: got %v, want %q", tt.spec, err, tt.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	specs := topic.Defaults("jobs", "dlq", 0)
	if len(specs) != 2 {
		t.Fatalf("got %d specs", len(specs))
	}
	jobs, dlq := specs[0], specs[1]
	if jobs.Name != "jobs" || jobs.Partitions != 8 || jobs.Configs["max.message.bytes"] != "4194304" {
		t.Errorf("jobs spec %+v", jobs)
	}
	if dlq.Name != "dlq" || dlq.Partitions != 4 || dlq.Configs["retention.ms"] != "1209600000" || dlq.Configs["max.message.bytes"] != "4210765" {
		t.Errorf("dlq spec %+v", dlq)
	}
	if got := topic.Defaults("j", "d", 3)[0].Partitions; got != 3 {
		t.Errorf("partitions override: got %d", got)
	}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
	}
}

// exercise runs Ensure, Describe and Delete against brokers.
func exercise(t *testing.T, brokers []string, jobs, dlq string) {
	ctx := testCtx(t)
	specs := topic.Defaults(jobs, dlq, 3)
	if err := topic.Ensure(ctx, testenv.KafkaCluster(brokers...), specs...); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if specs[0].ReplicationFactor != 0 {
		t.Fatal("Ensure modified the caller's specs")
	}
	// Again: already existing topics are fine.
	if err := topic.Ensure(ctx, testenv.KafkaCluster(brokers...), specs...); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	// More partitions than exist is an error, not a silent no-op.
	err := topic.Ensure(ctx, testenv.KafkaCluster(brokers...), topic.Spec{Name: jobs, Partitions: 5})
	if err == nil || !strings.Contains(err.Error(), "exists with 3 partitions") {
		t.Fatalf("Ensure with more partitions: got %v", err)
	}

	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: jobs, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Balancer: &kafka.RoundRobin{}, Transport: transport}
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("a")}, kafka.Message{Value: []byte("b")}, kafka.Message{Value: []byte("c")}, kafka.Message{Value: []byte("d")}); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	infos, err := topic.Describe(ctx, testenv.KafkaCluster(brokers...), dlq, jobs)
	if err != nil {
		t.Fatalf("Describe: %v", err)
	}
	if len(infos) != 2 || infos[0].Name != dlq || infos[1].Name != jobs {
		t.Fatalf("Describe returned %+v", infos)
	}
	if n := len(infos[0].Partitions); n != topic.DefaultDLQPartitions {
		t.Errorf("dlq has %d partitions", n)
	}
	if got := infos[1].Messages(); got != 4 {
		t.Errorf("jobs holds %d messages, want 4: %+v", got, infos[1].Partitions)
	}
	for i, p := range infos[1].Partitions {
		if p.ID != i || p.Leader < 0 || len(p.Replicas) == 0 {
			t.Errorf("partition %+v", p)
		}
	}

	if _, err := topic.Describe(ctx, testenv.KafkaCluster(brokers...), "no.such.topic"); !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Errorf("Describe of a missing topic: got %v, want UnknownTopicOrPartition", err)
	}

	if err := topic.Delete(ctx, testenv.KafkaCluster(brokers...), jobs, dlq, "no.such.topic"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

func TestEnsureDescribeDeleteFake(t *testing.T) {
	// Registered first, so it runs after the cluster is closed: every admin
	// call must close its transport.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	exercise(t, testkit.FakeKafka(t), "mail.jobs", "mail.dlq")
}

func TestEnsureInvalidSpec(t *testing.T) {
	err := topic.Ensure(testCtx(t), testenv.KafkaCluster("127.0.0.1:1"), topic.Spec{Name: "bad name", Partitions: 1})
	if err == nil || !strings.Contains(err.Error(), "bad name") {
		t.Fatalf("got %v", err)
	}
}

func TestEnsureGivesUpAtDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	// Nothing listens on port 1.
	err := topic.Ensure(ctx, testenv.KafkaCluster("127.0.0.1:1"), topic.Spec{Name: "x", Partitions: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
}

func TestEnsureDescribeDeleteKafka(t *testing.T) {
	testenv.Integration(t, "Kafka")
	exercise(t, testenv.KafkaBrokers(), testenv.UniqueName("topic_jobs"), testenv.UniqueName("topic_dlq"))
}

func TestNewTopic(t *testing.T) {
	name := testenv.NewTopic(t, 2)
	infos, err := topic.Describe(testCtx(t), testenv.Kafka(), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos[0].Partitions) != 2 {
		t.Fatalf("got %d partitions, want 2", len(infos[0].Partitions))
	}
}

// The standard copy topics take a copy of the largest record the standard
// jobs topic takes, so the worker's start check passes on them; the jobs
// topic itself cannot take such a copy (it is not a copy topic).
func TestCopyTopicsFitTheJobsTopic(t *testing.T) {
	limits := map[string]int{"jobs": topic.MaxMessageBytes, "copy": topic.CopyMaxMessageBytes}
	if err := kafkaclient.CheckCopyFits(limits, "jobs", "copy"); err != nil {
		t.Errorf("copy topic: %v", err)
	}
	if err := kafkaclient.CheckCopyFits(limits, "jobs", "jobs"); err == nil {
		t.Error("a topic as large as the jobs topic passed as a copy topic")
	}
}

// A dead-letter topic made with the jobs topic's size (as Postline once
// made it) is raised to the copy size by Ensure, and never lowered.
func TestEnsureRaisesMaxMessageBytesKafka(t *testing.T) {
	testenv.Integration(t, "Kafka")
	ctx := testCtx(t)
	k := testenv.Kafka()
	name := testenv.UniqueName("topic_old_dlq")
	old := topic.Spec{Name: name, Partitions: 1, Configs: map[string]string{"max.message.bytes": strconv.Itoa(topic.MaxMessageBytes)}}
	if err := topic.Ensure(ctx, k, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topic.Delete(context.Background(), k, name) })
	spec := topic.Defaults("unused-jobs", name, 1)[1]
	spec.Partitions = 1
	if err := topic.Ensure(ctx, k, spec); err != nil {
		t.Fatal(err)
	}
	got, err := k.MaxMessageBytes(ctx, name)
	if err != nil || got[name] != topic.CopyMaxMessageBytes {
		t.Fatalf("max.message.bytes after Ensure = %v, %v; want %d", got, err, topic.CopyMaxMessageBytes)
	}
	if err := topic.Ensure(ctx, k, old); err != nil {
		t.Fatal(err)
	}
	if got, _ := k.MaxMessageBytes(ctx, name); got[name] != topic.CopyMaxMessageBytes {
		t.Errorf("Ensure with a smaller spec lowered max.message.bytes to %d", got[name])
	}
}
