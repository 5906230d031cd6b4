package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/topic"
)

// seedRows migrates a fresh schema and writes rows through the real claim
// and record paths: sent@x (sent by relay-a), live@x (sending under an hour
// lease) and, with stuck, stuck@x (sending under a lease that expired at
// once). It returns the schema's URL.
func seedRows(t *testing.T, stuck bool) string {
	t.Helper()
	url, pool := testenv.NewSchema(t)
	ctx := t.Context()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	claim := func(s *idempotency.Store, id string) idempotency.Claim {
		sum := sha256.Sum256([]byte(id))
		cs, err := s.Claim(ctx, []idempotency.ClaimRequest{{MessageID: id, PayloadHash: sum[:], Attempt: 1,
			Payload: []byte(`{}`), FirstSeen: time.Now().Add(-time.Minute)}})
		if err != nil || cs[0].Result != idempotency.Claimed {
			t.Fatalf("claim %s: %+v, %v", id, cs, err)
		}
		return cs[0]
	}
	long := newTestStore(t, pool, "worker-long", time.Hour)
	sent := claim(long, "sent@x")
	if _, err := long.Record(ctx, []idempotency.Fate{{MessageID: "sent@x", Version: sent.Version,
		Status: idempotency.StatusSent, Provider: "relay-a"}}); err != nil {
		t.Fatal(err)
	}
	claim(long, "live@x")
	if stuck {
		claim(newTestStore(t, pool, "worker-gone", time.Millisecond), "stuck@x")
	}
	return url
}

func newTestStore(t *testing.T, pool *pgxpool.Pool, owner string, lease time.Duration) *idempotency.Store {
	t.Helper()
	s, err := idempotency.New(idempotency.Config{Owner: owner, Lease: lease}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStatusPostgres(t *testing.T) {
	url := seedRows(t, false)
	out, _, err := postctl(t, nil, "", "--database-url", url, "-o", "json", "status", "<sent@x>", "live@x")
	if err != nil {
		t.Fatal(err)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if len(rep.Messages) != 2 || len(rep.NotFound) != 0 || rep.At.IsZero() {
		t.Fatalf("report %+v", rep)
	}
	sent, live := rep.Messages[0], rep.Messages[1]
	if sent.MessageID != "sent@x" || sent.Status != "sent" || !sent.Terminal || sent.Provider != "relay-a" ||
		sent.SentAt == nil || sent.LeaseOwner != "" || sent.AgeSeconds < 59 {
		t.Errorf("sent: %+v", sent)
	}
	if live.Status != "sending" || live.Terminal || live.LeaseOwner != "worker-long" || live.LeaseRemainingSeconds == nil ||
		*live.LeaseRemainingSeconds < 3000 || live.Attempt != 1 {
		t.Errorf("live: %+v", live)
	}

	// An unknown ID: the rows found are printed, the error names the ID,
	// and the exit code is 1.
	out, _, err = postctl(t, nil, "", "--database-url", url, "status", "live@x", "nope@x")
	if err == nil || !strings.Contains(err.Error(), "no row for Message-ID nope@x") || exitCode(err) != exitFailure {
		t.Fatalf("got %v, want a not-found error naming nope@x", err)
	}
	if !strings.HasPrefix(out, "MESSAGE_ID") || !strings.Contains(out, "live@x") || !strings.Contains(out, "worker-long, ") {
		t.Fatalf("text output %q", out)
	}
}

func TestAuditPostgres(t *testing.T) {
	url := seedRows(t, true)
	published := filepath.Join(t.TempDir(), "published.jsonl")
	lines := "\"sent@x\"\n{\"message_ids\":[\"live@x\",\"<lost@x>\"]}\n{\"message_id\":\"stuck@x\"}\n"
	if err := os.WriteFile(published, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name        string
		args        []string
		wantOK      bool
		wantStuck   []string
		wantMissing []string
	}{
		// The default grace (1m) has not passed for stuck@x yet.
		{"defaults", nil, true, []string{}, nil},
		{"stuck past a zero grace", []string{"--lease-grace", "0"}, false, []string{"stuck@x"}, nil},
		{"missing published ID", []string{"--published", published}, false, []string{}, []string{"lost@x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := postctl(t, nil, "", append([]string{"--database-url", url, "--output", "json", "audit"}, tt.args...)...)
			if tt.wantOK != (err == nil) {
				t.Fatalf("error %v, want ok %v", err, tt.wantOK)
			}
			if err != nil && (exitCode(err) != exitFailure || !strings.HasPrefix(err.Error(), "audit failed: ")) {
				t.Fatalf("error %v (exit %d)", err, exitCode(err))
			}
			var rep auditReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("output %q: %v", out, err)
			}
			if rep.OK != tt.wantOK || rep.Total != 3 || rep.Counts["sent"] != 1 || rep.Counts["sending"] != 2 ||
				rep.InFlight != 2 || rep.OldestInFlight == nil || rep.OldestInFlight.AgeSeconds < 59 {
				t.Errorf("report %+v", rep)
			}
			var stuck []string
			for _, s := range rep.Stuck {
				stuck = append(stuck, s.MessageID)
				if s.LeaseOwner != "worker-gone" || s.PastLeaseSeconds <= 0 {
					t.Errorf("stuck row %+v", s)
				}
			}
			if !slices.Equal(stuck, tt.wantStuck) || rep.StuckCount != int64(len(tt.wantStuck)) {
				t.Errorf("stuck %v (count %d), want %v", stuck, rep.StuckCount, tt.wantStuck)
			}
			if !slices.Equal(rep.Missing, tt.wantMissing) {
				t.Errorf("missing %v, want %v", rep.Missing, tt.wantMissing)
			}
			if tt.wantMissing != nil && (rep.Published == nil || *rep.Published != 4 || *rep.MissingCount != 1) {
				t.Errorf("published %v, missing count %v", rep.Published, rep.MissingCount)
			}
		})
	}

	// Text, and the published IDs from stdin; --max-age finds every row in
	// flight too old.
	out, _, err := postctl(t, nil, "\"lost@x\"\n", "--database-url", url, "audit", "--published", "-", "--max-age", "1s")
	if err == nil || !strings.Contains(err.Error(), "1 published Message-ID has no row") ||
		!strings.Contains(err.Error(), "2 rows in flight for longer than 1s (--max-age)") {
		t.Fatalf("got %v", err)
	}
	for _, want := range []string{"STATUS", "sending     in flight  2", "published: 1, without a row: 1", "TOO OLD", "MISSING (published, no row)\nlost@x"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}

func TestLagKafka(t *testing.T) {
	testenv.Integration(t, "Kafka")
	brokers := testenv.KafkaBrokers()
	jobs, dlq, prefix := testenv.UniqueName("postctl_jobs"), testenv.UniqueName("postctl_dlq"), testenv.UniqueName("postctl_retry")
	group := testenv.UniqueName("postctl_group")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.KafkaCluster(brokers...), jobs, dlq, prefix+".5s"); err != nil {
			t.Error(err)
		}
	})
	args := []string{"--brokers", strings.Join(brokers, ","), "--topic", jobs, "--dlq-topic", dlq,
		"--retry-topic-prefix", prefix, "--retry-tiers", "5s"}
	if _, _, err := postctl(t, nil, "", append(args, "topics", "create", "--partitions", "2")...); err != nil {
		t.Fatal(err)
	}
	if _, _, err := postctl(t, nil, "", append(args, "publish", "--count", "10")...); err != nil {
		t.Fatal(err)
	}

	// A group member that consumed and committed 4 records stays in the
	// group while lag is read.
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: jobs, GroupID: group, MaxWait: 100 * time.Millisecond,
		StartOffset: kafka.FirstOffset, HeartbeatInterval: 500 * time.Millisecond})
	t.Cleanup(func() { _ = r.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for range 4 {
		if _, err := r.ReadMessage(ctx); err != nil {
			t.Fatal(err)
		}
	}

	out, _, err := postctl(t, nil, "", append(args, "-o", "json", "lag", "--group", group, "--scheduler-group", group+"_sched")...)
	if err != nil {
		t.Fatal(err)
	}
	var rep fleet.Queues
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	w := rep.Workers
	if w.Group != group || w.Total != 6 || len(w.Topics) != 1 || w.Topics[0].Topic != jobs || len(w.Topics[0].Partitions) != 2 {
		t.Fatalf("workers %+v", w)
	}
	if w.State != "Stable" || len(w.Members) != 1 || len(w.Members[0].Assigned[jobs]) != 2 || w.Topics[0].Partitions[0].Member == "" {
		t.Errorf("membership: state %q members %+v partitions %+v", w.State, w.Members, w.Topics[0].Partitions)
	}
	s := rep.Scheduler
	if s == nil || s.Total != 0 || len(s.Topics) != 1 || s.Topics[0].Topic != prefix+".5s" || len(s.Members) != 0 {
		t.Errorf("scheduler %+v", s)
	}

	out, _, err = postctl(t, nil, "", append(args, "lag", "--group", group, "--scheduler=false")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "group "+group+" (Stable): total lag 6, 1 member\n") || !strings.Contains(out, jobs+"  total      6") ||
		strings.Contains(out, prefix) {
		t.Fatalf("text output:\n%s", out)
	}

	// A delay topic that does not exist is an error naming the settings.
	_, _, err = postctl(t, nil, "", append(args, "--retry-tiers", "5s,1m", "lag", "--group", group)...)
	if err == nil || !strings.Contains(err.Error(), "--scheduler=false skips them") {
		t.Fatalf("got %v", err)
	}
}
