package writertest_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/testkit/writertest"
)

// The stand-ins pass the suite the real writers pass (their packages run it
// on the local Kafka), with the same items.

func TestDeadLettersStandIn(t *testing.T) {
	writertest.Run(t, writertest.Subject[deadletter.Letter]{
		Open: func(*testing.T) (writertest.Writer[deadletter.Letter], writertest.Log) {
			r := writertest.DeadLetters()
			return r, r.Log()
		},
		Item: writertest.Letter,
	})
}

func TestRetriesStandIn(t *testing.T) {
	writertest.Run(t, writertest.Subject[retry.Copy]{
		Open: func(*testing.T) (writertest.Writer[retry.Copy], writertest.Log) {
			r := writertest.Retries(retry.DefaultTiers)
			return r, r.Log()
		},
		Item:    writertest.Copy(retry.DefaultTiers[0]),
		Invalid: writertest.Copy(time.Duration(7) * time.Second),
	})
}

func TestEventsStandIn(t *testing.T) {
	writertest.Run(t, writertest.Subject[event.Event]{
		Open: func(*testing.T) (writertest.Writer[event.Event], writertest.Log) {
			r := writertest.Events()
			return r, r.Log()
		},
		Item:    writertest.Event,
		Invalid: writertest.InvalidEvent,
	})
}

func TestRecorderFails(t *testing.T) {
	r := writertest.DeadLetters()
	r.Fail(2, errBroker)
	for i := range 3 {
		err := r.Publish(t.Context(), writertest.Letter(strconv.Itoa(i)))
		if (err != nil) != (i < 2) {
			t.Errorf("call %d = %v, want an error for the first two only", i, err)
		}
	}
	if got := r.All(); len(got) != 1 || string(got[0].Key) != "2" {
		t.Errorf("kept %v, want only the third call's letter", got)
	}
	r.Fail(-1, errBroker)
	for i := range 3 {
		if err := r.Publish(t.Context(), writertest.Letter("down")); err == nil {
			t.Errorf("call %d while failing for good succeeded", i)
		}
	}
	r.Fail(0, nil)
	if err := r.Publish(t.Context(), writertest.Letter("up"), writertest.Letter("again")); err != nil {
		t.Errorf("call after Fail(0, nil) = %v", err)
	}
	if err := r.Publish(t.Context()); err != nil {
		t.Errorf("empty call = %v", err)
	}
	if got, calls := len(r.All()), r.Calls(); got != 3 || calls != 8 {
		t.Errorf("kept %d letters in %d calls, want 3 in 8", got, calls)
	}
}

type brokerDown struct{}

func (brokerDown) Error() string { return "broker unavailable" }

var errBroker error = brokerDown{}
