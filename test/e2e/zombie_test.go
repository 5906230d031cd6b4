package e2e

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/topic"
)

// Regression (zombie worker): when the pipeline failed, the consumer kept
// its partitions and heartbeats and /healthz stayed 200. Here the
// dead-letter topic is deleted under a running worker and a bad record
// arrives: the dead letter can never be written. The worker must say so,
// leave the group (so a healthy member can take the partitions) and exit
// non-zero, instead of retrying forever.
func TestWorkerThatFailsForGoodLeavesTheGroup(t *testing.T) {
	s := newStack(t)
	w := startWorker(t, s.workerEnv("zombie", nil))
	w.WaitReady(readyTimeout)

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := topic.Delete(ctx, testenv.Kafka(), s.dlq); err != nil {
		t.Fatal(err)
	}
	if err := s.raw.PublishRaw(ctx, []kafka.Message{{Key: []byte("bad"), Value: []byte("{not json")}}); err != nil {
		t.Fatal(err)
	}

	sawUnhealthy := false
	for w.running() && ctx.Err() == nil {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		if code, _, err := w.get(hctx, "/healthz"); err == nil && code == 503 {
			sawUnhealthy = true
		}
		hcancel()
		time.Sleep(50 * time.Millisecond)
	}
	if w.running() {
		t.Fatal("the worker still runs 90 s after its dead letters became impossible: a zombie")
	}
	if code := w.state.ExitCode(); code == 0 {
		t.Error("exit code 0 after a stage failed for good, want non-zero")
	}
	log, err := os.ReadFile(w.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte("stage failed for good")) || !bytes.Contains(log, []byte("dead_letter")) {
		t.Errorf("the log does not say which stage failed and why:\n%s", tail(w.logPath, 15))
	}
	t.Logf("saw /healthz 503 before the exit: %t", sawUnhealthy)

	// The group has no member left holding the partitions.
	client, closeConn := testenv.Kafka().Client("test", 10*time.Second)
	defer closeConn()
	res, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{s.group}})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range res.Groups {
		if len(g.Members) > 0 {
			t.Errorf("group %s still has %d members (state %s) after the worker exited", g.GroupID, len(g.Members), g.GroupState)
		}
	}
}
