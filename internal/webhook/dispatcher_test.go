package webhook

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/event"
)

// Each event goes to the endpoints whose filters match, body as published;
// a record is done only once every matching endpoint has it.
func TestDispatchFiltersAndMarksDoneWhenEveryEndpointFinished(t *testing.T) {
	release := make(chan struct{})
	all := newReceiver(t, nil)
	slow := newReceiver(t, func(r *http.Request, _ string, _ int) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	acme := newReceiver(t, nil)
	epAll := all.endpoint(t, "all")
	epAll.Types = []event.Type{event.Accepted, event.Bounced, event.Delivered}
	epSlow := slow.endpoint(t, "bounces")
	epSlow.Types = []event.Type{event.Bounced}
	epAcme := acme.endpoint(t, "acme")
	epAcme.Tenants = []string{"acme"}
	h := startHarness(t, Config{Endpoints: []Endpoint{epAll, epSlow, epAcme}})
	defer close(release)

	e1 := newEvent("<1@x>", 0, event.Accepted, "acme")
	e2 := newEvent("<2@x>", 0, event.Bounced, "globex")
	e3 := newEvent("<3@x>", 0, event.Delivered, "")
	e4 := newEvent("<4@x>", 0, event.Deferred, "initech") // matches no endpoint
	var offs []int64
	for _, e := range []event.Event{e1, e2, e3, e4} {
		offs = append(offs, h.send(mustEncode(t, e)))
	}
	waitFor(t, 5*time.Second, "the unblocked deliveries", func() bool {
		return all.delivered(e1.ID) == 1 && all.delivered(e2.ID) == 1 && all.delivered(e3.ID) == 1 && acme.delivered(e1.ID) == 1 &&
			h.src.doneCount(offs[0]) == 1 && h.src.doneCount(offs[2]) == 1 && h.src.doneCount(offs[3]) == 1
	})
	waitFor(t, 5*time.Second, "the bounce at the slow endpoint", func() bool { return slow.tries(e2.ID) == 1 })
	if n := h.src.doneCount(offs[1]); n != 0 {
		t.Fatalf("the bounce was marked done %d times while an endpoint still had it", n)
	}
	if n, _ := h.d.endpoints[1].backlog(); n != 1 {
		t.Errorf("slow endpoint backlog %d, want 1", n)
	}
	release <- struct{}{}
	waitFor(t, 5*time.Second, "the bounce to be done", func() bool { return h.src.doneCount(offs[1]) == 1 })

	if n, _ := all.total(); n != 3 {
		t.Errorf("endpoint all got %d requests, want 3", n)
	}
	if n, _ := acme.total(); n != 1 {
		t.Errorf("endpoint acme got %d requests, want 1 (tenant filter)", n)
	}
	if n, _ := slow.total(); n != 1 {
		t.Errorf("endpoint bounces got %d requests, want 1 (type filter)", n)
	}
	if !bytes.Equal(all.bodies[e2.ID], mustEncode(t, e2)) {
		t.Errorf("body %s, want the event as published", all.bodies[e2.ID])
	}
	for _, rc := range []*receiver{all, slow, acme} {
		rc.check(t)
	}
	if got := testutil.ToFloat64(h.d.metrics.deliveries.WithLabelValues("all", resultDelivered)); got != 3 {
		t.Errorf("deliveries_total{endpoint=all,result=delivered} = %v, want 3", got)
	}
}

func TestRetryThenDelivered(t *testing.T) {
	rc := newReceiver(t, func(_ *http.Request, _ string, n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "flaky")}})
	e := newEvent("<r@x>", 0, event.Delivered, "")
	off := h.send(mustEncode(t, e))
	waitFor(t, 5*time.Second, "delivery after two failures", func() bool { return h.src.doneCount(off) == 1 })
	if rc.tries(e.ID) != 3 || rc.delivered(e.ID) != 1 {
		t.Errorf("attempts %d, delivered %d; want 3 and 1", rc.tries(e.ID), rc.delivered(e.ID))
	}
	if got := testutil.ToFloat64(h.d.metrics.attempts.WithLabelValues("flaky", attempt5xx)); got != 2 {
		t.Errorf("attempts_total{result=5xx} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(h.d.metrics.attempts.WithLabelValues("flaky", attempt2xx)); got != 1 {
		t.Errorf("attempts_total{result=2xx} = %v, want 1", got)
	}
	if len(h.dlq.all()) != 0 {
		t.Errorf("dead letters %v, want none", h.dlq.all())
	}
	rc.check(t)
}

// Dead letters: 410 at once, a 500 after MaxAttempts, no reply after
// MaxAttempts, and an event whose retry would pass MaxAge.
func TestDeadLetters(t *testing.T) {
	tests := []struct {
		name       string
		status     int // 0: nothing listens
		cfg        Config
		wantReason string
		wantTries  int
	}{
		{"gone", http.StatusGone, Config{MaxAttempts: 5}, ReasonGone, 1},
		{"attempts", http.StatusInternalServerError, Config{MaxAttempts: 3}, ReasonMaxAttempts, 3},
		{"redirect is a failure", http.StatusFound, Config{MaxAttempts: 2}, ReasonMaxAttempts, 2},
		{"no reply", 0, Config{MaxAttempts: 2}, ReasonMaxAttempts, 2},
		{"max age", http.StatusBadGateway, Config{MaxAttempts: 8, RetryBase: 50 * time.Millisecond, RetryMaxDelay: time.Second, MaxAge: time.Millisecond}, ReasonMaxAge, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, func(_ *http.Request, _ string, _ int) int { return tt.status })
			ep := rc.endpoint(t, "ep")
			if tt.status == 0 {
				rc.srv.Close() // connection refused
			}
			cfg := tt.cfg
			cfg.Endpoints = []Endpoint{ep}
			h := startHarness(t, cfg)
			e := newEvent("<d@x>", 2, event.Bounced, "acme")
			off := h.send(mustEncode(t, e))
			waitFor(t, 5*time.Second, "the record to be done", func() bool { return h.src.doneCount(off) == 1 })
			letters := h.dlq.all()
			if len(letters) != 1 {
				t.Fatalf("%d dead letters, want 1", len(letters))
			}
			l := letters[0]
			if !bytes.Equal(l.Value, mustEncode(t, e)) || string(l.Key) != "k" || l.Reason != tt.wantReason || l.Attempt != tt.wantTries ||
				l.Topic != "events" || l.Offset != off {
				t.Errorf("letter = reason %q attempt %d topic %s offset %d; want %q, %d, events, %d", l.Reason, l.Attempt, l.Topic, l.Offset,
					tt.wantReason, tt.wantTries, off)
			}
			want := map[string]string{HeaderDLQEndpoint: "ep", HeaderDLQLastStatus: strconv.Itoa(tt.status), HeaderDLQEventID: e.ID,
				"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
			for k, v := range want {
				if got, _ := header(l.Headers, k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if tt.status != 0 {
				if got := rc.tries(e.ID); got != tt.wantTries {
					t.Errorf("%d attempts, want %d", got, tt.wantTries)
				}
			}
			if got := testutil.ToFloat64(h.d.metrics.deadLetters.WithLabelValues("ep")); got != 1 {
				t.Errorf("dead_letters_total = %v, want 1", got)
			}
			if got := testutil.ToFloat64(h.d.metrics.deliveries.WithLabelValues("ep", resultDeadLettered)); got != 1 {
				t.Errorf("deliveries_total{result=dead_lettered} = %v, want 1", got)
			}
			if strings.Contains(h.logs.String(), "t0k3n") || strings.Contains(l.Error, "t0k3n") || strings.Contains(h.logs.String(), testSecret[6:]) {
				t.Errorf("the URL's query or the secret reached a log or a letter:\n%s\n%s", h.logs.String(), l.Error)
			}
			if !strings.Contains(h.logs.String(), "webhook dead-lettered") {
				t.Error("no log of the dead letter")
			}
		})
	}
}

// A down endpoint holds its own backlog only: the healthy endpoint gets
// every event while the down one has not answered any.
func TestDownEndpointDoesNotDelayTheOthers(t *testing.T) {
	up := make(chan struct{})
	down := newReceiver(t, func(r *http.Request, _ string, _ int) int {
		select {
		case <-up:
		case <-r.Context().Done():
		}
		return http.StatusServiceUnavailable
	})
	healthy := newReceiver(t, nil)
	h := startHarness(t, Config{Endpoints: []Endpoint{down.endpoint(t, "down"), healthy.endpoint(t, "healthy")},
		MaxAttempts: 1, MaxPending: 50, Concurrency: 2})
	const n = 40
	var ids []string
	for i := range n {
		e := newEvent("<h@x>", i, event.Delivered, "")
		ids = append(ids, e.ID)
		h.send(mustEncode(t, e))
	}
	waitFor(t, 5*time.Second, "every event at the healthy endpoint", func() bool { _, got := healthy.total(); return got == n })
	if len(h.dlq.all()) != 0 {
		t.Fatal("the down endpoint finished an event before it answered")
	}
	if tries, _ := down.total(); tries > 2 {
		t.Errorf("down endpoint has %d requests in flight, want at most Concurrency (2)", tries)
	}
	if backlog, _ := h.d.endpoints[0].backlog(); backlog != n {
		t.Errorf("down endpoint backlog %d, want %d", backlog, n)
	}
	for i := range n {
		if h.src.doneCount(int64(i)) != 0 {
			t.Fatalf("record %d marked done while the down endpoint has it", i)
		}
	}
	close(up)
	waitFor(t, 5*time.Second, "every event dead-lettered for the down endpoint", func() bool { return len(h.dlq.all()) == n })
	waitFor(t, 5*time.Second, "every record done", func() bool {
		for i := range n {
			if h.src.doneCount(int64(i)) != 1 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		if healthy.delivered(id) != 1 {
			t.Errorf("%s delivered %d times to the healthy endpoint", id, healthy.delivered(id))
		}
	}
}

// A full backlog stops consumption until the endpoint frees a slot;
// nothing is dropped.
func TestFullBacklogStopsConsumption(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(r *http.Request, _ string, _ int) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "one")}, MaxPending: 2, Concurrency: 1})
	events := make([][]byte, 5)
	for i := range events {
		events[i] = mustEncode(t, newEvent("<b@x>", i, event.Delivered, ""))
	}
	h.send(events[0])
	h.send(events[1])
	h.send(events[2]) // taken, but its dispatch waits for a slot
	waitFor(t, 5*time.Second, "the first request", func() bool { tries, _ := rc.total(); return tries == 1 })
	if n, _ := h.d.endpoints[0].backlog(); n != 2 {
		t.Fatalf("backlog %d, want MaxPending (2)", n)
	}
	// The dispatch loop is waiting for a slot, so it takes no record.
	select {
	case h.src.ch <- h.msg(events[3]):
		t.Fatal("the dispatcher took a record while its endpoint's backlog was full")
	default:
	}
	close(release)
	h.send(events[3])
	h.send(events[4])
	waitFor(t, 5*time.Second, "every record done", func() bool {
		for i := range 5 {
			if h.src.doneCount(int64(i)) != 1 {
				return false
			}
		}
		return true
	})
	if _, got := rc.total(); got != 5 {
		t.Errorf("%d delivered, want 5", got)
	}
}

func TestUndecodableRecordIsDeadLettered(t *testing.T) {
	rc := newReceiver(t, nil)
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "ep")}})
	h.dlq.failures = 2 // the dead-letter topic is briefly unavailable
	off := h.send([]byte("not an event"))
	waitFor(t, 5*time.Second, "the record to be done", func() bool { return h.src.doneCount(off) == 1 })
	letters := h.dlq.all()
	if len(letters) != 1 || letters[0].Reason != ReasonUndecodable || string(letters[0].Value) != "not an event" {
		t.Fatalf("letters = %+v", letters)
	}
	if _, ok := header(letters[0].Headers, HeaderDLQEndpoint); ok {
		t.Error("an undecodable record's letter names an endpoint")
	}
	if !h.d.Ready() {
		t.Error("not ready after the dead-letter write succeeded")
	}
	if tries, _ := rc.total(); tries != 0 {
		t.Errorf("the endpoint got %d requests for a record that is no event", tries)
	}
	if got := testutil.ToFloat64(h.d.metrics.undecodable); got != 1 {
		t.Errorf("undecodable_total = %v", got)
	}
}

func TestCopyOfFinishedEventIsSkipped(t *testing.T) {
	rc := newReceiver(t, nil)
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "ep")}})
	e := mustEncode(t, newEvent("<c@x>", 0, event.Complained, ""))
	first := h.send(e)
	waitFor(t, 5*time.Second, "the first copy done", func() bool { return h.src.doneCount(first) == 1 })
	second := h.send(e)
	waitFor(t, 5*time.Second, "the second copy done", func() bool { return h.src.doneCount(second) == 1 })
	if tries, _ := rc.total(); tries != 1 {
		t.Errorf("%d requests for two copies of one event, want 1", tries)
	}
	if got := testutil.ToFloat64(h.d.metrics.duplicates); got != 1 {
		t.Errorf("duplicates_total = %v", got)
	}
}

// On shutdown an event waiting for a retry is left unfinished (not done,
// not dead-lettered): the next owner sends it again.
func TestShutdownLeavesRetryingEventsUnfinished(t *testing.T) {
	rc := newReceiver(t, func(*http.Request, string, int) int { return http.StatusServiceUnavailable })
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "ep")}, RetryBase: time.Hour, RetryMaxDelay: time.Hour})
	e := newEvent("<s@x>", 0, event.Accepted, "")
	off := h.send(mustEncode(t, e))
	waitFor(t, 5*time.Second, "the first attempt", func() bool { return rc.tries(e.ID) == 1 })
	waitFor(t, 5*time.Second, "the attempt's metric", func() bool {
		return testutil.ToFloat64(h.d.metrics.attempts.WithLabelValues("ep", attempt5xx)) == 1
	})
	h.stop()
	if h.src.doneCount(off) != 0 || len(h.dlq.all()) != 0 {
		t.Errorf("after shutdown: done %d, letters %d; want neither", h.src.doneCount(off), len(h.dlq.all()))
	}
	if n, _ := h.d.endpoints[0].backlog(); n != 0 {
		t.Errorf("backlog %d after shutdown", n)
	}
}

func TestBacklogMetrics(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(r *http.Request, _ string, _ int) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var elapsed atomic.Int64
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "ep")},
		NowFunc: func() time.Time { return now.Add(time.Duration(elapsed.Load())) }})
	defer close(release)
	h.send(mustEncode(t, newEvent("<m@x>", 0, event.Accepted, "")))
	h.send(mustEncode(t, newEvent("<m@x>", 1, event.Accepted, "")))
	waitFor(t, 5*time.Second, "both queued", func() bool { n, _ := h.d.endpoints[0].backlog(); return n == 2 })
	elapsed.Store(int64(90 * time.Second))
	want := `
# HELP postline_webhook_backlog Events queued for an endpoint and not finished: waiting, being sent or waiting for a retry.
# TYPE postline_webhook_backlog gauge
postline_webhook_backlog{endpoint="ep"} 2
# HELP postline_webhook_oldest_pending_age_seconds Age of the oldest unfinished event of an endpoint's backlog, since it was queued; 0 when the backlog is empty.
# TYPE postline_webhook_oldest_pending_age_seconds gauge
postline_webhook_oldest_pending_age_seconds{endpoint="ep"} 90
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want), "postline_webhook_backlog", "postline_webhook_oldest_pending_age_seconds"); err != nil {
		t.Error(err)
	}
}

// A copy that comes while its event is being sent is done when the first
// is, without a request of its own.
func TestCopyOfEventInFlightIsDoneWithIt(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(r *http.Request, _ string, _ int) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "ep")}})
	e := mustEncode(t, newEvent("<f@x>", 0, event.Delivered, ""))
	first := h.send(e)
	waitFor(t, 5*time.Second, "the first request", func() bool { tries, _ := rc.total(); return tries == 1 })
	second := h.send(e)
	waitFor(t, 5*time.Second, "the copy to be counted", func() bool { return testutil.ToFloat64(h.d.metrics.duplicates) == 1 })
	if h.src.doneCount(second) != 0 {
		t.Fatal("the copy was done before the first")
	}
	close(release)
	waitFor(t, 5*time.Second, "both done", func() bool { return h.src.doneCount(first) == 1 && h.src.doneCount(second) == 1 })
	if tries, _ := rc.total(); tries != 1 {
		t.Errorf("%d requests for two copies, want 1", tries)
	}
}
