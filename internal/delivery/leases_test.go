package delivery

import (
	"sync"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/job"
)

var _ Leases = (*idempotency.LeaseKeeper)(nil)

// fakeLeases records the pipeline's holds and drops.
type fakeLeases struct {
	mu     sync.Mutex
	held   map[string]int64
	events []string
}

func (l *fakeLeases) Hold(id string, version int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[id] = version
	l.events = append(l.events, "hold "+id)
}

func (l *fakeLeases) Drop(id string, version int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[id] == version {
		delete(l.held, id)
	}
	l.events = append(l.events, "drop "+id)
}

// TestPipelineHoldsLeasesUntilTheFateIsRecorded checks the wiring of the
// lease keeper: every claimed job's lease is held from the claim and dropped
// once its fate is recorded, whatever the fate, and a job handed back for
// lack of a relay is held again when re-claimed.
func TestPipelineHoldsLeasesUntilTheFateIsRecorded(t *testing.T) {
	h := newHarnessWith(t, func(j *job.Job, _ int) error {
		if j.MessageID == "fail@x" {
			return smtpErr(550, "5.1.1", "no such user")
		}
		return nil
	}, nil, nil)
	leases := &fakeLeases{held: map[string]int64{}}
	h.pipeline.leases = leases
	h.runMessages(t, []consumer.Message{
		message(t, "ok@x", []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("1")}}),
		message(t, "fail@x", []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("1")}}),
	})
	leases.mu.Lock()
	defer leases.mu.Unlock()
	if len(leases.held) != 0 {
		t.Errorf("leases still held after every fate was recorded: %v", leases.held)
	}
	for _, id := range []string{"ok@x", "fail@x"} {
		hold, drop := -1, -1
		for i, e := range leases.events {
			switch e {
			case "hold " + id:
				hold = i
			case "drop " + id:
				drop = i
			}
		}
		if hold < 0 || drop < hold {
			t.Errorf("%s: events %v, want a hold then a drop", id, leases.events)
		}
	}
	for _, id := range []string{"ok@x", "fail@x"} {
		if st := h.store.status(id); !st.Terminal() {
			t.Errorf("%s: status %s, want terminal", id, st)
		}
	}
}
