package webhook

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/testkit"
)

// With the default schedule, horizon and disable period, driven by a
// clock the test sets, on the real queue: an event an endpoint never takes
// is tried at once, after 5 s, 5 min, 30 min, 2 h, 5 h and then every 10 h
// (each wait within its 10 % jitter), is dead-lettered by the first
// attempt that fails past 72 hours, and the endpoint, failing since its
// first attempt, is disabled once five days have passed and not before.
// While disabled its events are dead-lettered without a request; enabled
// again, it gets the next event.
func TestScheduleHorizonAndDisableOnAClock(t *testing.T) {
	var up atomic.Bool
	rc := newReceiver(t, func(*http.Request, string, int) int {
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: t0}
	h := startHarness(t, Config{
		Endpoints: []Endpoint{rc.endpoint(t, "never")},
		Schedule:  Schedule{Delays: DefaultDelays}, // the defaults, not the harness's short ones
		NowFunc:   clock.Now,
	})
	e := newEvent("<never@x>", 0, event.Bounced, "")
	h.send(mustEncode(t, e))

	// Each step moves the clock to the row's next attempt and waits for the
	// attempt to be recorded.
	var attemptsAt []time.Time // when each attempt was made, by the clock
	attemptsAt = append(attemptsAt, t0)
	row := func() (attempts int, next time.Time, status string) {
		if err := h.pool.QueryRow(t.Context(), `SELECT attempts, next_at, status FROM postline_webhook_queue
			WHERE endpoint = 'never' AND event_id = $1`, e.ID).Scan(&attempts, &next, &status); err != nil {
			t.Fatal(err)
		}
		return attempts, next, status
	}
	testkit.Eventually(t, 5*time.Second, "the first attempt queued", func() bool { return h.rows("never", statusPending) == 1 })
	for step := 0; ; step++ {
		if step > 30 {
			t.Fatal("no dead letter after 30 attempts")
		}
		n, next, status := row()
		if status == statusDead {
			break
		}
		wait := next.Sub(attemptsAt[len(attemptsAt)-1])
		want := DefaultDelays[min(n, len(DefaultDelays))-1]
		if d := wait - want; d < -want/10-time.Second || d > want/10+time.Second {
			t.Errorf("after attempt %d: next in %s, want %s ± 10%%", n, wait, want)
		}
		clock.Set(next)
		attemptsAt = append(attemptsAt, next)
		testkit.Eventually(t, 5*time.Second, "attempt "+time.Duration(n+1).String(), func() bool {
			m, _, st := row()
			return m == n+1 || st == statusDead
		})
	}
	made := rc.tries(e.ID)
	last := attemptsAt[len(attemptsAt)-1]
	if made != len(attemptsAt) || made < 12 {
		t.Errorf("%d attempts reached the endpoint, %d made by the clock; want the same, at least 12", made, len(attemptsAt))
	}
	if span := last.Sub(t0); span < 72*time.Hour || span > 90*time.Hour {
		t.Errorf("last attempt %s after the first, want past the 72h horizon by less than one 10h wait", span)
	}
	if span := attemptsAt[len(attemptsAt)-2].Sub(t0); span >= 72*time.Hour {
		t.Errorf("the attempt before the last was %s after the first: it should have ended the event", span)
	}
	letters := h.dlq.all()
	if len(letters) != 1 || letters[0].Reason != ReasonHorizon || letters[0].Attempt != made {
		t.Fatalf("dead letters %+v, want one with reason horizon after %d attempts", letters, made)
	}
	if got := testkit.Header(letters[0].Headers, HeaderDLQLastStatus); got != "503" {
		t.Errorf("last status header %q, want 503", got)
	}

	// Not disabled before five days of failures...
	clock.Set(t0.Add(DefaultDisableAfter - time.Minute))
	time.Sleep(5 * h.d.cfg.StateInterval) // several state passes, so a wrong disable would show
	if h.d.lanes[0].disabled.Load() {
		t.Fatal("disabled before the disable period passed")
	}
	// ...and disabled once they have.
	clock.Set(t0.Add(DefaultDisableAfter + time.Minute))
	testkit.Eventually(t, 5*time.Second, "the endpoint disabled", func() bool { return h.gauge("postline_webhook_endpoint_disabled") == 1 })
	if got := testutil.ToFloat64(h.d.metrics.disabledTotal.WithLabelValues("never")); got != 1 {
		t.Errorf("endpoints_disabled_total = %v, want 1", got)
	}
	log, err := h.queue.Log(t.Context(), "never", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1 || log[0].Action != "disabled" || log[0].Actor != ActorDispatcher {
		t.Errorf("log %+v, want one entry: disabled by the dispatcher", log)
	}

	// Disabled: a new event is a dead letter, no request is made.
	before, _ := rc.total()
	b := newEvent("<never@x>", 1, event.Bounced, "")
	off := h.send(mustEncode(t, b))
	testkit.Eventually(t, 5*time.Second, "the event dead-lettered", func() bool { return h.done("never", off) == 1 })
	if after, _ := rc.total(); after != before {
		t.Errorf("%d requests to a disabled endpoint", after-before)
	}
	if l := h.dlq.all(); len(l) != 2 || l[1].Reason != ReasonDisabled {
		t.Errorf("dead letters %+v, want a second with reason endpoint_disabled", l)
	}

	// Enabled and answering: the next event is delivered.
	up.Store(true)
	if changed, err := h.queue.SetDisabled(t.Context(), "never", false, "", "test", clock.Now()); err != nil || !changed {
		t.Fatalf("enable = %v, %v", changed, err)
	}
	testkit.Eventually(t, 5*time.Second, "the lane to see the endpoint enabled", func() bool { return !h.d.lanes[0].disabled.Load() })
	c := newEvent("<never@x>", 2, event.Delivered, "")
	h.send(mustEncode(t, c))
	testkit.Eventually(t, 5*time.Second, "delivery after enabling", func() bool { return rc.delivered(c.ID) == 1 })
}
