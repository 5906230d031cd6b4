package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/job"
)

// These tests drive the pipeline with in-memory stand-ins for Kafka,
// Postgres and SMTP to pin down its routing and ordering rules quickly. The
// real services are exercised in test/e2e.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPipelineRoutesEveryRecordToOneOutcome(t *testing.T) {
	valid := func(id string) []byte { return mustJSON(t, testJob(id, "hello")) }
	tests := []struct {
		name        string
		records     [][]byte
		sendErr     func(j *job.Job, n int) error // n counts sends of this Message-ID
		wantSent    []string                      // Message-IDs accepted by SMTP, in any order
		wantReasons []string                      // dead-letter reasons, in any order
		wantStatus  map[string]idempotency.Status
		wantSends   int
	}{
		{
			name:       "valid jobs are sent once",
			records:    [][]byte{valid("a@x"), valid("b@x")},
			wantSent:   []string{"a@x", "b@x"},
			wantStatus: map[string]idempotency.Status{"a@x": idempotency.StatusSent, "b@x": idempotency.StatusSent},
			wantSends:  2,
		},
		{
			name:       "a republished job is a duplicate",
			records:    [][]byte{valid("a@x"), valid("a@x"), valid("a@x")},
			wantSent:   []string{"a@x"},
			wantStatus: map[string]idempotency.Status{"a@x": idempotency.StatusSent},
			wantSends:  1,
		},
		{
			name:        "same Message-ID with another payload is a conflict",
			records:     [][]byte{valid("a@x"), mustJSON(t, testJob("a@x", "other body"))},
			wantSent:    []string{"a@x"},
			wantReasons: []string{deadletter.ReasonMessageIDConflict},
			wantStatus:  map[string]idempotency.Status{"a@x": idempotency.StatusSent},
			wantSends:   1,
		},
		{
			name:        "bad input is dead-lettered with its reason",
			records:     [][]byte{[]byte("{not json"), mustJSON(t, withVersion(testJob("v@x", "b"), 2)), valid("ok@x")},
			wantSent:    []string{"ok@x"},
			wantReasons: []string{string(job.ReasonMalformedJSON), string(job.ReasonUnsupportedVersion)},
			wantStatus:  map[string]idempotency.Status{"ok@x": idempotency.StatusSent, "v@x": idempotency.StatusDead},
			wantSends:   1,
		},
		{
			name:    "a permanent failure is failed and dead-lettered",
			records: [][]byte{valid("p@x")},
			sendErr: func(*job.Job, int) error {
				return permanentErr{}
			},
			wantReasons: []string{deadletter.ReasonSMTPPermanent},
			wantStatus:  map[string]idempotency.Status{"p@x": idempotency.StatusFailed},
			wantSends:   1,
		},
		{
			name:    "a retryable failure is retried until it succeeds",
			records: [][]byte{valid("r@x")},
			sendErr: func(_ *job.Job, n int) error {
				if n < 3 {
					return errors.New("421 try later")
				}
				return nil
			},
			wantSent:   []string{"r@x"},
			wantStatus: map[string]idempotency.Status{"r@x": idempotency.StatusSent},
			wantSends:  3,
		},
		{
			name:        "an expired job is dead without a send",
			records:     [][]byte{mustJSON(t, expired(testJob("e@x", "late")))},
			wantReasons: []string{string(job.ReasonExpired)},
			wantStatus:  map[string]idempotency.Status{"e@x": idempotency.StatusDead},
			wantSends:   0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.sendErr)
			h.run(t, tt.records)

			if got := h.src.doneCount(); got != len(tt.records) {
				t.Fatalf("records marked done = %d, want %d", got, len(tt.records))
			}
			if got := h.smtp.sendCount(); got != tt.wantSends {
				t.Errorf("SMTP sends = %d, want %d", got, tt.wantSends)
			}
			if got, want := sorted(h.smtp.accepted()), sorted(tt.wantSent); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("accepted = %v, want %v", got, want)
			}
			if got, want := sorted(h.dlq.reasons()), sorted(tt.wantReasons); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("dead-letter reasons = %v, want %v", got, want)
			}
			for id, want := range tt.wantStatus {
				if got := h.store.status(id); got != want {
					t.Errorf("status of %s = %q, want %q", id, got, want)
				}
			}
		})
	}
}

func TestPipelineMarksDoneOnlyAfterTheOutcomeIsRecorded(t *testing.T) {
	h := newHarness(t, nil)
	h.store.failRecords(3) // Postgres "down" for the first three Record calls
	h.run(t, [][]byte{mustJSON(t, testJob("a@x", "hi"))})

	if got := h.store.recordCalls(); got != 4 {
		t.Fatalf("Record calls = %d, want 4 (3 failures, then success)", got)
	}
	if h.src.doneBeforeRecorded() {
		t.Fatal("a record was marked done before its outcome was recorded")
	}
	if got := h.smtp.sendCount(); got != 1 {
		t.Fatalf("SMTP sends = %d, want 1: a failed Record must not resend", got)
	}
}

func TestPipelineRechecksMessageIDsLeasedElsewhere(t *testing.T) {
	h := newHarness(t, nil)
	h.store.leaseElsewhere("l@x", 2) // busy for the first two claims
	h.run(t, [][]byte{mustJSON(t, testJob("l@x", "hi"))})

	if got := h.store.claimCalls("l@x"); got != 3 {
		t.Fatalf("claims of l@x = %d, want 3", got)
	}
	if got := h.store.status("l@x"); got != idempotency.StatusSent {
		t.Fatalf("status = %q, want sent", got)
	}
}

func TestPipelineHardStopLeavesUnfinishedRecordsUndone(t *testing.T) {
	block := make(chan struct{})
	h := newHarness(t, nil)
	h.smtp.block = block
	src := newFakeSource([][]byte{mustJSON(t, testJob("a@x", "hi"))}, false)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- h.pipeline.Run(ctx, src) }()
	<-h.smtp.started
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run after hard stop = %v, want nil", err)
	}
	close(block)
	if got := src.doneCount(); got != 0 {
		t.Fatalf("records marked done after a hard stop mid-send = %d, want 0", got)
	}
}

// --- harness ---------------------------------------------------------------

type harness struct {
	pipeline *Pipeline
	src      *fakeSource
	store    *fakeStore
	smtp     *fakeSMTP
	dlq      *fakeDLQ
}

func newHarness(t *testing.T, sendErr func(*job.Job, int) error) *harness {
	t.Helper()
	h := &harness{store: newFakeStore(), smtp: newFakeSMTP(sendErr), dlq: &fakeDLQ{}}
	p, err := New(Config{
		Senders:           3,
		BatchSize:         4,
		BatchLinger:       time.Millisecond,
		RecheckInterval:   5 * time.Millisecond,
		RetryBackoff:      time.Millisecond,
		MaxRetryBackoff:   2 * time.Millisecond,
		StoreRetryBackoff: time.Millisecond,
		MaxStoreBackoff:   2 * time.Millisecond,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(),
		h.store, func() Session { return h.smtp }, h.dlq)
	if err != nil {
		t.Fatal(err)
	}
	h.pipeline = p
	return h
}

// run feeds records and waits until every one is done, then closes the
// source and waits for Run to return.
func (h *harness) run(t *testing.T, records [][]byte) {
	t.Helper()
	h.src = newFakeSource(records, true)
	h.src.store = h.store
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := h.pipeline.Run(ctx, h.src); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

type fakeSource struct {
	ch    chan consumer.Message
	mu    sync.Mutex
	done  map[int64]bool
	total int
	early bool // a record was marked done while the store had not recorded it
	store *fakeStore
}

// newFakeSource queues records; with closeWhenDone it closes the channel
// once all of them are marked done, as the consumer does after draining.
func newFakeSource(records [][]byte, closeWhenDone bool) *fakeSource {
	s := &fakeSource{ch: make(chan consumer.Message, len(records)), done: map[int64]bool{}, total: len(records)}
	for i, r := range records {
		var key []byte
		var probe struct {
			MessageID string `json:"message_id"`
		}
		if json.Unmarshal(r, &probe) == nil {
			key = []byte(probe.MessageID)
		}
		s.ch <- consumer.Message{Topic: "mail.jobs", Offset: int64(i), Key: key, Value: r, Time: time.Now(),
			Headers: []kafka.Header{{Key: job.HeaderAttempt, Value: []byte("1")}}}
	}
	if !closeWhenDone {
		close(s.ch)
		s.total = -1
	}
	return s
}

func (s *fakeSource) Messages() <-chan consumer.Message { return s.ch }

func (s *fakeSource) MarkDone(m consumer.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.store != nil && !s.store.settled(string(m.Key)) {
		s.early = true
	}
	s.done[m.Offset] = true
	if len(s.done) == s.total {
		close(s.ch)
	}
}

func (s *fakeSource) doneCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.done)
}

func (s *fakeSource) doneBeforeRecorded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.early
}

type fakeRow struct {
	status  idempotency.Status
	hash    []byte
	version int64
	attempt int
}

type fakeStore struct {
	mu          sync.Mutex
	rows        map[string]*fakeRow
	claims      map[string]int
	busy        map[string]int
	recordFails int
	records     int
}

func newFakeStore() *fakeStore {
	return &fakeStore{rows: map[string]*fakeRow{}, claims: map[string]int{}, busy: map[string]int{}}
}

func (s *fakeStore) failRecords(n int) { s.mu.Lock(); s.recordFails = n; s.mu.Unlock() }
func (s *fakeStore) leaseElsewhere(id string, n int) {
	s.mu.Lock()
	s.busy[id] = n
	s.mu.Unlock()
}

func (s *fakeStore) Claim(_ context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]idempotency.Claim, len(reqs))
	for i, r := range reqs {
		s.claims[r.MessageID]++
		c := idempotency.Claim{MessageID: r.MessageID}
		row := s.rows[r.MessageID]
		switch {
		case s.busy[r.MessageID] > 0:
			s.busy[r.MessageID]--
			c.Result, c.RetryAt = idempotency.Busy, time.Now().Add(time.Millisecond)
		case row == nil:
			s.rows[r.MessageID] = &fakeRow{status: idempotency.StatusSending, hash: r.PayloadHash, version: 1, attempt: r.Attempt}
			c.Result, c.Version = idempotency.Claimed, 1
		case !bytes.Equal(row.hash, r.PayloadHash):
			c.Result = idempotency.Conflict
		case row.status.Terminal():
			c.Result = idempotency.Duplicate
		case row.status == idempotency.StatusSending:
			c.Result, c.RetryAt = idempotency.Busy, time.Now().Add(time.Millisecond)
		default:
			row.status, row.version = idempotency.StatusSending, row.version+1
			c.Result, c.Version = idempotency.Claimed, row.version
		}
		if row != nil {
			c.Status = row.status
		}
		out[i] = c
	}
	return out, nil
}

func (s *fakeStore) Record(_ context.Context, outs []idempotency.Outcome) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records++
	if s.recordFails > 0 {
		s.recordFails--
		return nil, errors.New("connection refused")
	}
	var lost []string
	for _, o := range outs {
		row := s.rows[o.MessageID]
		if row == nil || row.version != o.Version {
			lost = append(lost, o.MessageID)
			continue
		}
		row.status, row.version, row.attempt = o.Status, row.version+1, o.Attempt
	}
	return lost, nil
}

func (s *fakeStore) RecordRejected(_ context.Context, rejs []idempotency.Rejection) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rejs {
		if s.rows[r.MessageID] == nil {
			s.rows[r.MessageID] = &fakeRow{status: idempotency.StatusDead, hash: r.PayloadHash, version: 1}
		}
	}
	return nil
}

func (s *fakeStore) NoteConflicts(context.Context, []string) error { return nil }

func (s *fakeStore) status(id string) idempotency.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rows[id]; r != nil {
		return r.status
	}
	return ""
}

// settled reports whether id's row is not under a claim (or there is none).
func (s *fakeStore) settled(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[id]
	return r == nil || r.status != idempotency.StatusSending
}

func (s *fakeStore) recordCalls() int { s.mu.Lock(); defer s.mu.Unlock(); return s.records }
func (s *fakeStore) claimCalls(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims[id]
}

type fakeSMTP struct {
	mu      sync.Mutex
	sendErr func(*job.Job, int) error
	sends   map[string]int
	ok      []string
	block   chan struct{}
	started chan struct{}
}

func newFakeSMTP(sendErr func(*job.Job, int) error) *fakeSMTP {
	return &fakeSMTP{sendErr: sendErr, sends: map[string]int{}, started: make(chan struct{}, 100)}
}

func (f *fakeSMTP) Send(ctx context.Context, j *job.Job) error {
	f.mu.Lock()
	f.sends[j.MessageID]++
	n := f.sends[j.MessageID]
	f.mu.Unlock()
	f.started <- struct{}{}
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.sendErr != nil {
		if err := f.sendErr(j, n); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.ok = append(f.ok, j.MessageID)
	f.mu.Unlock()
	return nil
}

func (f *fakeSMTP) Close() error { return nil }

func (f *fakeSMTP) sendCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.sends {
		n += c
	}
	return n
}

func (f *fakeSMTP) accepted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ok...)
}

type fakeDLQ struct {
	mu      sync.Mutex
	letters []deadletter.Letter
}

func (d *fakeDLQ) Publish(_ context.Context, letters ...deadletter.Letter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.letters = append(d.letters, letters...)
	return nil
}

func (d *fakeDLQ) reasons() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, l := range d.letters {
		out = append(out, l.Reason)
	}
	return out
}

type permanentErr struct{}

func (permanentErr) Error() string   { return "550 5.1.1 no such user" }
func (permanentErr) Permanent() bool { return true }

func testJob(id, body string) job.Job {
	return job.Job{Version: 1, MessageID: id, From: "a@example.com", To: []string{"b@example.com"}, Subject: "s", Text: body}
}

func withVersion(j job.Job, v int) job.Job { j.Version = v; return j }

func expired(j job.Job) job.Job {
	past := time.Now().Add(-time.Hour)
	j.NotAfter = &past
	return j
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.outcomes.WithLabelValues("sent").Inc()
	m.reentries.WithLabelValues("busy").Inc()
	m.dependencyErrors.WithLabelValues("claim").Inc()
	m.sendSeconds.WithLabelValues("sent").Observe(0.01)
	m.publishToAccept.Observe(0.1)
	m.inFlight.Set(1)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
