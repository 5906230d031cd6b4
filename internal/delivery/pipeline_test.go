package delivery

import (
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

	"github.com/postline/postline/internal/circuit"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/idempotency/idempotencytest"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/testkit/writertest"
	"github.com/postline/postline/job"
)

// These tests drive the pipeline with in-memory stand-ins for Kafka,
// Postgres and SMTP to pin down its routing and ordering rules quickly. The
// real services are exercised in test/e2e.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPipelineRoutesEveryRecordToOneFate(t *testing.T) {
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
				return smtpErr(550, "5.1.1", "no such user")
			},
			wantReasons: []string{deadletter.ReasonSMTPPermanent},
			wantStatus:  map[string]idempotency.Status{"p@x": idempotency.StatusFailed},
			wantSends:   1,
		},
		{
			name:    "a transient failure gets resends",
			records: [][]byte{valid("r@x")},
			sendErr: func(_ *job.Job, n int) error {
				if n < 3 {
					return smtpErr(421, "", "service not available, closing channel")
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

func TestPipelineMarksDoneOnlyAfterTheFateIsRecorded(t *testing.T) {
	h := newHarness(t, nil)
	h.store.failRecords(3) // Postgres "down" for the first three Record calls
	h.run(t, [][]byte{mustJSON(t, testJob("a@x", "hi"))})

	if got := h.store.recordCalls(); got != 4 {
		t.Fatalf("Record calls = %d, want 4 (3 failures, then success)", got)
	}
	if h.src.doneBeforeRecorded() {
		t.Fatal("a record was marked done before its fate was recorded")
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
	select {
	case <-h.smtp.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the send never started")
	}
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
	smtp     *fakeSMTP // the first relay, "p1"
	backup   *fakeSMTP // the second relay, "p2"
	dlq      *fakeDLQ
	retries  *fakeRetries
	breakers *fakeBreakers
}

func newHarness(t *testing.T, sendErr func(*job.Job, int) error) *harness {
	t.Helper()
	return newHarnessWith(t, sendErr, nil, nil)
}

// newHarnessWith builds a pipeline with two relays (p1 fails with
// sendErr, p2 with backupErr) and, when breakers is not nil, circuit
// breakers.
func newHarnessWith(t *testing.T, sendErr, backupErr func(*job.Job, int) error, breakers *fakeBreakers) *harness {
	t.Helper()
	h := &harness{store: newFakeStore(), smtp: newFakeSMTP(sendErr), backup: newFakeSMTP(backupErr),
		dlq: newFakeDLQ(), retries: newFakeRetries(), breakers: breakers}
	deps := Deps{
		Store: h.store,
		Relays: []Relay{
			{Name: "p1", NewSession: func() Session { return h.smtp }},
			{Name: "p2", Priority: 1, NewSession: func() Session { return h.backup }},
		},
		DeadLetters: h.dlq,
		Retries:     h.retries,
	}
	if breakers != nil {
		deps.Breakers = breakers
	}
	p, err := New(Config{
		Senders:         3,
		BatchSize:       4,
		BatchLinger:     time.Millisecond,
		RecheckInterval: 5 * time.Millisecond,
		ResendBase:      time.Millisecond,
		StoreBackoff:    time.Millisecond,
		MaxStoreBackoff: 2 * time.Millisecond,
		MaxHandBackWait: 20 * time.Millisecond,
		PauseCheck:      5 * time.Millisecond,
		RetryLimits: map[job.Priority]RetryLimit{
			job.PriorityUrgent: {MaxAttempts: 3, MaxAge: time.Hour},
			job.PriorityNormal: {MaxAttempts: 3, MaxAge: time.Hour},
			job.PriorityBulk:   {MaxAttempts: 3, MaxAge: time.Hour},
		},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), deps)
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
	ch     chan consumer.Message
	mu     sync.Mutex
	done   map[int64]bool
	total  int
	early  bool // a record was marked done while the store had not recorded it
	store  *fakeStore
	paused bool
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
			Headers: []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("1")}}}
	}
	if !closeWhenDone {
		close(s.ch)
		s.total = -1
	}
	return s
}

func (s *fakeSource) Messages() <-chan consumer.Message { return s.ch }

func (s *fakeSource) Pause()  { s.mu.Lock(); s.paused = true; s.mu.Unlock() }
func (s *fakeSource) Resume() { s.mu.Lock(); s.paused = false; s.mu.Unlock() }
func (s *fakeSource) isPaused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

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

// fakeRow is the part of a claim row the tests read.
type fakeRow struct {
	status  idempotency.Status
	hash    []byte
	version int64
	attempt int
	fates   []idempotency.Fate // recorded, in order
}

// fakeStore is the claim store's in-memory stand-in (idempotencytest.Memory,
// which follows the PostgreSQL store's rules) with the harness's knobs:
// Record calls that fail, claims that find the row leased elsewhere, and
// call counts.
type fakeStore struct {
	*idempotencytest.Memory
	mu          sync.Mutex
	claims      map[string]int
	busy        map[string]int
	recordFails int
	records     int
}

func newFakeStore() *fakeStore {
	return &fakeStore{Memory: idempotencytest.NewMemory(), claims: map[string]int{}, busy: map[string]int{}}
}

func (s *fakeStore) failRecords(n int) { s.mu.Lock(); s.recordFails = n; s.mu.Unlock() }
func (s *fakeStore) leaseElsewhere(id string, n int) {
	s.mu.Lock()
	s.busy[id] = n
	s.mu.Unlock()
}

// Claim counts the claims of each ID and answers busy for an ID leased
// elsewhere; the rest go to the table.
func (s *fakeStore) Claim(ctx context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.Claim, error) {
	out := make([]idempotency.Claim, len(reqs))
	var pass []idempotency.ClaimRequest
	var at []int
	s.mu.Lock()
	for i, r := range reqs {
		s.claims[r.MessageID]++
		if s.busy[r.MessageID] > 0 {
			s.busy[r.MessageID]--
			out[i] = idempotency.Claim{MessageID: r.MessageID, Result: idempotency.Busy, RetryAt: time.Now().Add(time.Millisecond)}
			continue
		}
		pass, at = append(pass, r), append(at, i)
	}
	s.mu.Unlock()
	cs, err := s.Memory.Claim(ctx, pass)
	if err != nil {
		return nil, err
	}
	for k, c := range cs {
		out[at[k]] = c
	}
	return out, nil
}

func (s *fakeStore) Record(ctx context.Context, outs []idempotency.Fate) ([]string, error) {
	s.mu.Lock()
	s.records++
	if s.recordFails > 0 {
		s.recordFails--
		s.mu.Unlock()
		return nil, errors.New("connection refused")
	}
	s.mu.Unlock()
	return s.Memory.Record(ctx, outs)
}

// seed leaves the row a retry copy of attempt expects: retrying, same hash.
func (s *fakeStore) seed(id string, value []byte, attempt int) {
	if attempt <= 1 {
		return
	}
	j, err := job.Decode(value, job.Limits{})
	if err != nil {
		panic(err)
	}
	s.Put(idempotencytest.MemoryRow{MessageID: id, Status: idempotency.StatusRetrying, PayloadHash: j.Hash(), Version: 3, Attempt: attempt})
}

// seedLives leaves each record's mail a row not yet claimed whose life is
// lives[id], as the real store draws one per row (0: a row from before
// lives were recorded), so that the test knows its events' IDs.
func (s *fakeStore) seedLives(lives map[string]int64, records ...[]byte) {
	for _, value := range records {
		j, err := job.Decode(value, job.Limits{})
		if err != nil {
			panic(err)
		}
		s.Put(idempotencytest.MemoryRow{MessageID: j.MessageID, Status: idempotency.StatusPending, PayloadHash: j.Hash(),
			Attempt: 1, Life: lives[j.MessageID]})
	}
}

func (s *fakeStore) row(id string) fakeRow {
	r, _ := s.Row(id)
	return fakeRow{status: r.Status, hash: r.PayloadHash, version: r.Version, attempt: r.Attempt, fates: r.Fates}
}

func (s *fakeStore) status(id string) idempotency.Status { return s.row(id).status }

// settled reports whether id's row is not under a claim (or there is none).
func (s *fakeStore) settled(id string) bool { return s.row(id).status != idempotency.StatusSending }

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
	select {
	case f.started <- struct{}{}:
	default:
	}
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

func (f *fakeSMTP) SendTo(ctx context.Context, j *job.Job, rcpts []sender.Recipient) (sender.Result, error) {
	return allOrNothing(f.Send(ctx, j), rcpts)
}

// allOrNothing is the result of a fake send that either takes every
// recipient or fails as a whole.
func allOrNothing(err error, rcpts []sender.Recipient) (sender.Result, error) {
	if err != nil {
		return sender.Result{}, err
	}
	return acceptAll(rcpts), nil
}

func acceptAll(rcpts []sender.Recipient) sender.Result {
	var res sender.Result
	for i := range rcpts {
		res.Accepted = append(res.Accepted, i)
	}
	return res
}

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

// fakeDLQ is the dead-letter writer's stand-in, which passes the writers'
// suite (writertest).
type fakeDLQ struct {
	*writertest.Recorder[deadletter.Letter]
}

func newFakeDLQ() *fakeDLQ { return &fakeDLQ{writertest.DeadLetters()} }

func (d *fakeDLQ) reasons() []string {
	var out []string
	for _, l := range d.All() {
		out = append(out, l.Reason)
	}
	return out
}

// replyErr is an SMTP reply error as package failure reads it.
type replyErr struct {
	code           int
	enhanced, text string
}

func smtpErr(code int, enhanced, text string) error { return replyErr{code, enhanced, text} }

func (e replyErr) Error() string { return fmt.Sprintf("%d %s %s", e.code, e.enhanced, e.text) }
func (e replyErr) SMTPReply() (int, string, string) {
	return e.code, e.enhanced, e.text
}

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
	m.records.WithLabelValues("sent").Inc()
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

// --- failure routing -------------------------------------------------------

func TestPipelineRoutesFailuresByClass(t *testing.T) {
	old := time.Now().Add(-2 * time.Hour)
	tests := []struct {
		name        string
		headers     []kafka.Header
		p1, p2      func(*job.Job, int) error
		wantStatus  idempotency.Status
		wantAttempt int // the row's attempt after the fate
		wantTier    time.Duration
		wantReason  string
		wantSends   [2]int // sends on p1, p2
	}{
		{
			name:        "throttled goes to the tier that honours the hint",
			p1:          always(smtpErr(452, "4.4.5", "per second limit, try again in 25 seconds")),
			wantStatus:  idempotency.StatusRetrying,
			wantAttempt: 2,
			wantTier:    30 * time.Second,
			wantSends:   [2]int{1, 0},
		},
		{
			name:        "transient gets resends, then a tier",
			p1:          always(smtpErr(421, "", "closing channel")),
			wantStatus:  idempotency.StatusRetrying,
			wantAttempt: 2,
			wantTier:    5 * time.Second,
			wantSends:   [2]int{1 + DefaultResends, 0},
		},
		{
			name:        "auth fails over to the next relay without charging an attempt",
			p1:          always(smtpErr(535, "5.7.8", "authentication failed")),
			wantStatus:  idempotency.StatusSent,
			wantAttempt: 1,
			wantSends:   [2]int{1, 1},
		},
		{
			name:        "permanent is failed without a retry",
			p1:          always(smtpErr(550, "5.1.1", "no such user")),
			wantStatus:  idempotency.StatusFailed,
			wantAttempt: 1,
			wantReason:  deadletter.ReasonSMTPPermanent,
			wantSends:   [2]int{1, 0},
		},
		{
			name:        "the last allowed attempt failing makes the job dead",
			headers:     []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("3")}},
			p1:          always(smtpErr(452, "4.4.5", "per second limit")),
			wantStatus:  idempotency.StatusDead,
			wantAttempt: 3,
			wantReason:  deadletter.ReasonMaxAttempts,
			wantSends:   [2]int{1, 0},
		},
		{
			name: "a job past its max age is dead when it comes back",
			headers: []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("2")},
				{Key: jobheader.KeyFirstSeen, Value: []byte(jobheader.FormatTime(old))},
				{Key: jobheader.KeyLastClass, Value: []byte("throttled")}},
			wantStatus:  idempotency.StatusDead,
			wantAttempt: 2,
			wantReason:  deadletter.ReasonMaxAge,
			wantSends:   [2]int{0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarnessWith(t, tt.p1, tt.p2, nil)
			headers := tt.headers
			if headers == nil {
				headers = []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("1")}}
			}
			attempt := jobheader.Attempt(headers)
			h.store.seed("f@x", mustJSON(t, testJob("f@x", "hi")), attempt)
			h.runMessages(t, []consumer.Message{message(t, "f@x", headers)})

			row := h.store.row("f@x")
			if row.status != tt.wantStatus || row.attempt != tt.wantAttempt {
				t.Errorf("row = %s attempt %d, want %s attempt %d", row.status, row.attempt, tt.wantStatus, tt.wantAttempt)
			}
			if got := [2]int{h.smtp.sendCount(), h.backup.sendCount()}; got != tt.wantSends {
				t.Errorf("sends on p1, p2 = %v, want %v", got, tt.wantSends)
			}
			copies := h.retries.all()
			switch {
			case tt.wantTier == 0 && len(copies) != 0:
				t.Errorf("retry copies = %+v, want none", copies)
			case tt.wantTier != 0:
				if len(copies) != 1 {
					t.Fatalf("retry copies = %d, want 1", len(copies))
				}
				c := copies[0]
				if c.Tier != tt.wantTier || c.Attempt != tt.wantAttempt || c.LastClass == "" || c.NotBefore.Before(time.Now().Add(tt.wantTier-time.Second)) {
					t.Errorf("retry copy = tier %s attempt %d class %q not-before in %s, want tier %s attempt %d",
						c.Tier, c.Attempt, c.LastClass, time.Until(c.NotBefore).Round(time.Second), tt.wantTier, tt.wantAttempt)
				}
			}
			if got := h.dlq.reasons(); tt.wantReason == "" && len(got) > 0 || tt.wantReason != "" && fmt.Sprint(got) != fmt.Sprint([]string{tt.wantReason}) {
				t.Errorf("dead letters = %v, want %q", got, tt.wantReason)
			}
			if h.src.doneCount() != 1 {
				t.Errorf("record not marked done")
			}
		})
	}
}

func TestPipelineAuthFailureOpensTheCircuit(t *testing.T) {
	b := newFakeBreakers()
	h := newHarnessWith(t, always(smtpErr(535, "5.7.8", "authentication failed")), nil, b)
	h.run(t, [][]byte{mustJSON(t, testJob("a@x", "hi"))})
	if got := b.reports("p1"); fmt.Sprint(got) != fmt.Sprint([]circuit.SendResult{circuit.AuthFailure}) {
		t.Errorf("p1 reports = %v, want one auth failure", got)
	}
	if got := b.reports("p2"); fmt.Sprint(got) != fmt.Sprint([]circuit.SendResult{circuit.Success}) {
		t.Errorf("p2 reports = %v, want one success", got)
	}
}

func TestPipelinePausesWhileEveryCircuitIsOpen(t *testing.T) {
	b := newFakeBreakers()
	b.setOpen(true)
	h := newHarnessWith(t, nil, nil, b)
	records := [][]byte{mustJSON(t, testJob("a@x", "hi")), mustJSON(t, testJob("b@x", "hi"))}
	h.src = newFakeSource(records, true)
	h.src.store = h.store
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- h.pipeline.Run(ctx, h.src) }()

	testkit.Eventually(t, 5*time.Second, "consumption paused", func() bool { return h.src.isPaused() })
	testkit.Eventually(t, 5*time.Second, "both jobs handed back at least once", func() bool { return h.store.claimCalls("a@x") >= 2 && h.store.claimCalls("b@x") >= 2 })
	if n := h.smtp.sendCount() + h.backup.sendCount(); n != 0 {
		t.Fatalf("%d sends while every circuit was open", n)
	}
	b.setOpen(false)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if h.src.isPaused() {
		t.Error("consumption still paused after a circuit closed")
	}
	for _, id := range []string{"a@x", "b@x"} {
		if r := h.store.row(id); r.status != idempotency.StatusSent || r.attempt != 1 {
			t.Errorf("%s: %s attempt %d, want sent attempt 1 (hand-backs charge no attempt)", id, r.status, r.attempt)
		}
	}
}

func always(err error) func(*job.Job, int) error { return func(*job.Job, int) error { return err } }

func message(t *testing.T, id string, headers []kafka.Header) consumer.Message {
	return consumer.Message{Topic: "mail.jobs", Key: []byte(id), Value: mustJSON(t, testJob(id, "hi")), Time: time.Now(), Headers: headers}
}

// runMessages is run for records with their own headers.
func (h *harness) runMessages(t *testing.T, msgs []consumer.Message) {
	t.Helper()
	h.src = &fakeSource{ch: make(chan consumer.Message, len(msgs)), done: map[int64]bool{}, total: len(msgs)}
	for i, m := range msgs {
		m.Offset = int64(i)
		h.src.ch <- m
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := h.pipeline.Run(ctx, h.src); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// fakeRetries is the retry writer's stand-in for the default tiers, which
// passes the writers' suite (writertest).
type fakeRetries struct {
	*writertest.Recorder[retry.Copy]
}

func newFakeRetries() *fakeRetries { return &fakeRetries{writertest.Retries(retry.DefaultTiers)} }

func (r *fakeRetries) all() []retry.Copy { return r.All() }

// fakeBreakers either lets everything through or nothing (setOpen), and
// records the results reported per relay.
type fakeBreakers struct {
	mu      sync.Mutex
	open    bool
	got     map[string][]circuit.SendResult
	changed chan struct{}
}

func newFakeBreakers() *fakeBreakers {
	return &fakeBreakers{got: map[string][]circuit.SendResult{}, changed: make(chan struct{}, 1)}
}

func (b *fakeBreakers) setOpen(open bool) {
	b.mu.Lock()
	b.open = open
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

func (b *fakeBreakers) Allow(context.Context, string) (circuit.Decision, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return circuit.Decision{Allowed: !b.open}, nil
}

func (b *fakeBreakers) Report(_ context.Context, relay string, o circuit.SendResult, _ string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got[relay] = append(b.got[relay], o)
	return nil
}

func (b *fakeBreakers) AnyAllowed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.open
}

func (b *fakeBreakers) NextProbeAt() (time.Time, bool) {
	return time.Now().Add(5 * time.Millisecond), true
}
func (b *fakeBreakers) Changed() <-chan struct{} { return b.changed }

func (b *fakeBreakers) reports(relay string) []circuit.SendResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got[relay])
}

// A relay's MaxConns caps its concurrent sessions even with more senders.
func TestPipelineCapsConnectionsPerRelay(t *testing.T) {
	slow := &countingSMTP{delay: 2 * time.Millisecond}
	p, err := New(Config{Senders: 6, BatchSize: 8, BatchLinger: time.Millisecond}, slog.New(slog.NewTextHandler(io.Discard, nil)),
		prometheus.NewRegistry(), Deps{
			Store:       newFakeStore(),
			Relays:      []Relay{{Name: "p1", MaxConns: 2, NewSession: func() Session { return slow.newSession() }}},
			DeadLetters: newFakeDLQ(),
			Retries:     newFakeRetries(),
		})
	if err != nil {
		t.Fatal(err)
	}
	var records [][]byte
	for i := range 40 {
		records = append(records, mustJSON(t, testJob(fmt.Sprintf("m%d@x", i), "hi")))
	}
	src := newFakeSource(records, true)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Run(ctx, src); err != nil {
		t.Fatal(err)
	}
	if got := src.doneCount(); got != 40 {
		t.Fatalf("done = %d, want 40", got)
	}
	if slow.peak() > 2 || slow.opened() > 2 {
		t.Errorf("peak concurrent sends = %d, sessions opened = %d, want at most 2 each", slow.peak(), slow.opened())
	}
	if slow.closed() != slow.opened() {
		t.Errorf("sessions closed = %d, opened = %d: every session must be closed when Run returns", slow.closed(), slow.opened())
	}
}

// countingSMTP hands out sessions and counts how many exist and how many
// sends run at once.
type countingSMTP struct {
	delay time.Duration
	mu    sync.Mutex
	now   int
	max   int
	open  int
	shut  int
}

func (c *countingSMTP) newSession() Session {
	c.mu.Lock()
	c.open++
	c.mu.Unlock()
	return countingSession{c}
}

func (c *countingSMTP) peak() int   { c.mu.Lock(); defer c.mu.Unlock(); return c.max }
func (c *countingSMTP) opened() int { c.mu.Lock(); defer c.mu.Unlock(); return c.open }
func (c *countingSMTP) closed() int { c.mu.Lock(); defer c.mu.Unlock(); return c.shut }

type countingSession struct{ c *countingSMTP }

func (s countingSession) Send(ctx context.Context, _ *job.Job) error {
	s.c.mu.Lock()
	s.c.now++
	s.c.max = max(s.c.max, s.c.now)
	s.c.mu.Unlock()
	time.Sleep(s.c.delay) // a relay's round trip, to overlap sends
	s.c.mu.Lock()
	s.c.now--
	s.c.mu.Unlock()
	return ctx.Err()
}

func (s countingSession) SendTo(ctx context.Context, j *job.Job, rcpts []sender.Recipient) (sender.Result, error) {
	return allOrNothing(s.Send(ctx, j), rcpts)
}

func (s countingSession) Close() error {
	s.c.mu.Lock()
	s.c.shut++
	s.c.mu.Unlock()
	return nil
}

// TestPipelineReportsWhatTheBreakerCounts: a throttle goes to the breakers as
// circuit.Throttle, which never counts toward opening (the send control
// handles it); a relay that is not available, or refuses the connection, is
// a fault.
func TestPipelineReportsWhatTheBreakerCounts(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want circuit.SendResult
	}{
		{"450 4.7.1 rate limit", smtpErr(450, "4.7.1", "rate limit exceeded, try again in 1 seconds"), circuit.Throttle},
		{"421 4.7.0 too many connections", smtpErr(421, "4.7.0", "too many connections"), circuit.Throttle},
		{"421 service not available", smtpErr(421, "", "service not available, closing transmission channel"), circuit.Failure},
		{"421 4.3.2 not accepting messages", smtpErr(421, "4.3.2", "system not accepting network messages"), circuit.Failure},
		{"550 unknown user", smtpErr(550, "5.1.1", "no such user"), circuit.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newFakeBreakers()
			h := newHarnessWith(t, always(tt.err), nil, b)
			h.run(t, [][]byte{mustJSON(t, testJob("a@x", "hi"))})
			got := b.reports("p1")
			if len(got) == 0 {
				t.Fatalf("p1 reports = none, want %v first", tt.want)
			}
			for _, o := range got {
				if o != tt.want {
					t.Errorf("p1 reports = %v, want only %v", got, tt.want)
					break
				}
			}
		})
	}
}
