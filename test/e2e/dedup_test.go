package e2e

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/postline/postline/job"
)

// TestDuplicatePublishesDeliverOnce publishes 1,000 jobs, 100 of whose
// Message-IDs are published three times (identical copies spread through the
// stream): exactly 1,000 distinct messages reach the SMTP server, each once.
func TestDuplicatePublishesDeliverOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	w := startWorker(t, s.workerEnv("dedup", nil))
	w.WaitReady(readyTimeout)

	const n, tripled = 1000, 100
	jobs := newJobs(n, "dedup")
	records := slices.Clone(jobs)
	for _, j := range jobs[:tripled] {
		records = append(records, j, j)
	}
	rand.Shuffle(len(records), func(a, b int) { records[a], records[b] = records[b], records[a] })
	ids := s.publish(records...)
	want := slices.Compact(slices.Sorted(slices.Values(ids)))
	if len(want) != n {
		t.Fatalf("published %d distinct Message-IDs, want %d", len(want), n)
	}

	start := time.Now()
	s.waitSent(n, 90*time.Second)
	s.waitCommittedToEnd(30 * time.Second)
	t.Logf("%d records (%d jobs) delivered and committed in %s", len(records), n, time.Since(start).Round(time.Millisecond))

	got := s.mailbox(want)
	t.Logf("mailpit: %s", got)
	if got.Total != n || got.Distinct != n || len(got.Missing) != 0 || len(got.Unexpected) != 0 {
		t.Fatalf("want exactly %d distinct messages, each once; got %s", n, got)
	}
	if sent := w.mustMetric("postline_delivery_records_total", "outcome", "sent"); sent != n {
		t.Errorf("postline_delivery_records_total{outcome=sent} = %v, want %d", sent, n)
	}
	if dup := w.mustMetric("postline_delivery_records_total", "outcome", "duplicate"); dup != 2*tripled {
		t.Errorf("postline_delivery_records_total{outcome=duplicate} = %v, want %d", dup, 2*tripled)
	}
}

// TestSameMessageIDDifferentPayloadIsConflict publishes a job, a job with the
// same Message-ID and another subject, and an identical copy of the first:
// the first is sent once, the second is dead-lettered as a conflict and
// counted on the row, the copy is skipped as a duplicate.
func TestSameMessageIDDifferentPayloadIsConflict(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	w := startWorker(t, s.workerEnv("conflict", nil))
	w.WaitReady(readyTimeout)

	first := newJobs(1, "conflict")[0]
	changed := first
	changed.Subject = "a different subject under the same Message-ID"
	s.publish(first, changed, first) // one key: one partition, in this order
	id := first.MessageID

	letters := s.readDLQ(1, 60*time.Second)
	s.waitCommittedToEnd(30 * time.Second)

	l := letters[0]
	if l.Reason != "message_id_conflict" {
		t.Errorf("dead letter reason %q, want message_id_conflict", l.Reason)
	}
	if string(l.Key) != id {
		t.Errorf("dead letter key %q, want %q", l.Key, id)
	}
	var dead job.Job
	if err := json.Unmarshal(l.Value, &dead); err != nil {
		t.Fatalf("dead letter value is not the job: %v", err)
	}
	if dead.Subject != changed.Subject {
		t.Errorf("dead letter is the job with subject %q, want the changed one %q", dead.Subject, changed.Subject)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		status    string
		conflicts int
	)
	if err := s.db.QueryRow(ctx, "SELECT status, conflicts FROM postline_messages WHERE message_id = $1", id).
		Scan(&status, &conflicts); err != nil {
		t.Fatalf("read row %s: %v", id, err)
	}
	if status != "sent" || conflicts != 1 {
		t.Errorf("row %s: status %q, conflicts %d; want sent, 1", id, status, conflicts)
	}

	got := s.mailbox([]string{id})
	if got.Total != 1 || got.Distinct != 1 || len(got.Missing) != 0 {
		t.Fatalf("want the message once; got %s", got)
	}
	for _, c := range []struct {
		outcome string
		want    float64
	}{{"sent", 1}, {"conflict", 1}, {"duplicate", 1}} {
		if v := w.mustMetric("postline_delivery_records_total", "outcome", c.outcome); v != c.want {
			t.Errorf("postline_delivery_records_total{outcome=%s} = %v, want %v", c.outcome, v, c.want)
		}
	}
}

// TestDefaultSettingsDeliver starts a worker configured only with the
// addresses of its services: the default settings must start, join the
// group and deliver.
func TestDefaultSettingsDeliver(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	w := startWorker(t, s.minimalEnv("defaults"))
	w.WaitReady(readyTimeout)
	const n = 20
	ids := s.publish(newJobs(n, "defaults")...)
	s.waitSent(n, 60*time.Second)
	s.waitCommittedToEnd(30 * time.Second)
	if got := s.mailbox(ids); got.Total != n || got.Distinct != n || len(got.Missing) != 0 {
		t.Fatalf("want exactly %d messages, each once; got %s", n, got)
	}
}
