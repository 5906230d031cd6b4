package redrive

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/job"
)

// sliceSource is a dead-letter topic in memory.
type sliceSource []kafka.Message

func (s sliceSource) Scan(_ context.Context, fn func(kafka.Message) error) error {
	for _, m := range s {
		if err := fn(m); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

// fakeStore keeps rows' statuses and lives as ResetForReplay treats them.
type fakeStore struct {
	mu       sync.Mutex
	status   map[string]idempotency.Status
	lives    map[string]int64
	nextLife int64
	reads    int // Statuses calls
	reopens  int // Reopen calls
}

func newFakeStore(rows map[string]idempotency.Status) *fakeStore {
	s := &fakeStore{status: map[string]idempotency.Status{}, lives: map[string]int64{}, nextLife: 100}
	for id, st := range rows {
		s.status[id], s.lives[id] = st, 1
	}
	return s
}

func (s *fakeStore) Statuses(_ context.Context, ids []string) (map[string]idempotency.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	out := map[string]idempotency.Status{}
	for _, id := range ids {
		if st, ok := s.status[id]; ok {
			out[id] = st
		}
	}
	return out, nil
}

func (s *fakeStore) Reopen(_ context.Context, resets []idempotency.Reset) ([]idempotency.Reopened, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reopens++
	var out []idempotency.Reopened
	for _, r := range resets {
		st, ok := s.status[r.MessageID]
		switch {
		case !ok:
			out = append(out, idempotency.Reopened{MessageID: r.MessageID})
		case st.Replayable():
			s.nextLife++
			s.status[r.MessageID], s.lives[r.MessageID] = idempotency.StatusPending, s.nextLife
			out = append(out, idempotency.Reopened{MessageID: r.MessageID, Life: s.nextLife})
		}
	}
	return out, nil
}

func (s *fakeStore) get(id string) idempotency.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status[id]
}

type fakeLists struct{ lifted []string }

func (l *fakeLists) LiftFromMessages(_ context.Context, ids []string, source string) (int, error) {
	if source != "smtp" {
		return 0, errors.New("lifting entries of another origin")
	}
	l.lifted = append(l.lifted, ids...)
	return len(ids), nil
}

// fakePublisher records what it publishes, and when on the clock.
type fakePublisher struct {
	clock   *fakeClock
	batches [][]kafka.Message
	at      []time.Time
	fail    error
}

func (p *fakePublisher) PublishRaw(_ context.Context, msgs []kafka.Message) error {
	if p.fail != nil {
		return p.fail
	}
	p.batches = append(p.batches, slices.Clone(msgs))
	if p.clock != nil {
		p.at = append(p.at, p.clock.Now())
	}
	return nil
}

func (p *fakePublisher) keys() []string {
	var out []string
	for _, b := range p.batches {
		for _, m := range b {
			out = append(out, string(m.Key))
		}
	}
	return out
}

type fakeEvents struct{ events []event.Event }

func (e *fakeEvents) Publish(_ context.Context, events ...event.Event) error {
	for i := range events {
		if err := events[i].Validate(); err != nil {
			return err
		}
	}
	e.events = append(e.events, events...)
	return nil
}

// fakeClock advances only when slept on.
type fakeClock struct {
	now   time.Time
	slept time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.now = c.now.Add(d)
	c.slept += d
	return nil
}

var dlqTime = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// letterOf is the dead letter of j, dead-lettered for reason and class.
func letterOf(t testing.TB, j job.Job, reason, class string) kafka.Message {
	t.Helper()
	h := deadletter.Headers(deadletter.Letter{Topic: "mail.jobs", Reason: reason, Class: class, Error: "550", Attempt: 3}, jobheader.FormatTime(dlqTime))
	return kafka.Message{Key: []byte(j.MessageID), Value: mustJSON(t, j), Headers: h, Time: dlqTime}
}

func newJob(id, tenant string, rcpts ...string) job.Job {
	return job.Job{Version: 1, MessageID: id, From: "shop@example.com", To: rcpts, Subject: "s", Text: "t", Tenant: tenant}
}
