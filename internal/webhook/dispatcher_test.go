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
	"github.com/postline/postline/internal/testkit"
)

// Each event goes to the endpoints whose filters match, body as published;
// each endpoint finishes its records on its own: a blocked endpoint holds
// only its own.
func TestDispatchFiltersAndIsolatesEndpoints(t *testing.T) {
	unblock := make(chan struct{})
	all := newReceiver(t, nil)
	slow := newReceiver(t, func(r *http.Request, _ string, _ int) int {
		select {
		case <-unblock:
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
	defer close(unblock)

	e1 := newEvent("<1@x>", 0, event.Accepted, "acme")
	e2 := newEvent("<2@x>", 0, event.Bounced, "globex")
	e3 := newEvent("<3@x>", 0, event.Delivered, "")
	e4 := newEvent("<4@x>", 0, event.Deferred, "initech") // matches no endpoint
	var offs []int64
	for _, e := range []event.Event{e1, e2, e3, e4} {
		offs = append(offs, h.send(mustEncode(t, e)))
	}
	testkit.Eventually(t, 5*time.Second, "the unblocked endpoints' deliveries", func() bool {
		for _, off := range offs {
			if h.done("all", off) != 1 || h.done("acme", off) != 1 {
				return false
			}
		}
		return all.delivered(e1.ID) == 1 && all.delivered(e2.ID) == 1 && all.delivered(e3.ID) == 1 && acme.delivered(e1.ID) == 1
	})
	testkit.Eventually(t, 5*time.Second, "the bounce at the slow endpoint", func() bool { return slow.tries(e2.ID) == 1 })
	if n := h.done("bounces", offs[1]); n != 0 {
		t.Fatalf("the slow endpoint marked its bounce done %d times while the POST was open", n)
	}
	unblock <- struct{}{}
	testkit.Eventually(t, 5*time.Second, "the bounce to be done", func() bool { return h.done("bounces", offs[1]) == 1 })

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
	if n := h.rows("all", statusPending) + h.rows("bounces", statusPending); n != 0 {
		t.Errorf("%d queue rows for endpoints that took every event at once, want none", n)
	}
}

// A failed first attempt queues the event durably and finishes the record
// at once; the queue then delivers it and forgets it.
func TestRedeliveryFromTheQueueThenDelivered(t *testing.T) {
	rc := newReceiver(t, func(_ *http.Request, _ string, n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "flaky")}})
	e := newEvent("<r@x>", 0, event.Delivered, "")
	off := h.send(mustEncode(t, e))
	testkit.Eventually(t, 5*time.Second, "the record done once the event is queued", func() bool { return h.done("flaky", off) == 1 })
	testkit.Eventually(t, 5*time.Second, "delivery after two failures", func() bool { return rc.delivered(e.ID) == 1 })
	testkit.Eventually(t, 5*time.Second, "the queue row gone", func() bool { return h.rows("flaky", statusPending) == 0 })
	if rc.tries(e.ID) != 3 {
		t.Errorf("attempts %d, want 3", rc.tries(e.ID))
	}
	if got := testutil.ToFloat64(h.d.metrics.attempts.WithLabelValues("flaky", attempt5xx)); got != 2 {
		t.Errorf("attempts_total{result=5xx} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(h.d.metrics.queued.WithLabelValues("flaky")); got != 1 {
		t.Errorf("queued_total = %v, want 1", got)
	}
	if len(h.dlq.all()) != 0 {
		t.Errorf("dead letters %v, want none", h.dlq.all())
	}
	rc.check(t)
}

// 410 Gone dead-letters at once: on the topic with the endpoint, the last
// status and the event ID, and in the queue for replay; the URL's secret
// query and the signing secret appear nowhere.
func TestGoneIsDeadLettered(t *testing.T) {
	rc := newReceiver(t, func(*http.Request, string, int) int { return http.StatusGone })
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "gone")}})
	e := newEvent("<g@x>", 0, event.Bounced, "")
	off := h.send(mustEncode(t, e))
	testkit.Eventually(t, 5*time.Second, "the record done", func() bool { return h.done("gone", off) == 1 })
	letters := h.dlq.all()
	if len(letters) != 1 {
		t.Fatalf("%d dead letters, want 1", len(letters))
	}
	l := letters[0]
	for key, want := range map[string]string{
		HeaderDLQEndpoint: "gone", HeaderDLQLastStatus: "410", HeaderDLQEventID: e.ID, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	} {
		if got := testkit.Header(l.Headers, key); got != want {
			t.Errorf("header %s = %q, want %q", key, got, want)
		}
	}
	if l.Reason != ReasonGone || l.Attempt != 1 || !bytes.Equal(l.Value, mustEncode(t, e)) {
		t.Errorf("letter reason %q attempt %d, want gone 1 and the event as published", l.Reason, l.Attempt)
	}
	if h.rows("gone", statusDead) != 1 {
		t.Errorf("dead rows %d, want 1", h.rows("gone", statusDead))
	}
	if strings.Contains(h.logs.String(), "t0k3n") || strings.Contains(l.Error, "t0k3n") || strings.Contains(h.logs.String(), testSecret[6:]) {
		t.Error("the URL's query or the secret leaked into logs or the dead letter")
	}
}

// A record that is not an event is dead-lettered by each endpoint's lane
// and finished.
func TestUndecodableRecordIsDeadLettered(t *testing.T) {
	rc := newReceiver(t, nil)
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "a")}})
	off := h.send([]byte(`{"not":"an event"`))
	testkit.Eventually(t, 5*time.Second, "the record done", func() bool { return h.done("a", off) == 1 })
	letters := h.dlq.all()
	if len(letters) != 1 || letters[0].Reason != ReasonUndecodable {
		t.Fatalf("letters %+v, want one undecodable", letters)
	}
	if got := testkit.Header(letters[0].Headers, HeaderDLQEndpoint); got != "a" {
		t.Errorf("endpoint header %q", got)
	}
	if n, _ := rc.total(); n != 0 {
		t.Errorf("%d requests for a record that is no event", n)
	}
}

// A copy of an event the endpoint took lately is finished without a POST.
func TestCopyOfDeliveredEventIsSkipped(t *testing.T) {
	rc := newReceiver(t, nil)
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "a")}})
	e := mustEncode(t, newEvent("<c@x>", 0, event.Accepted, ""))
	first := h.send(e)
	testkit.Eventually(t, 5*time.Second, "the first delivered", func() bool { return h.done("a", first) == 1 })
	second := h.send(e)
	testkit.Eventually(t, 5*time.Second, "the copy done", func() bool { return h.done("a", second) == 1 })
	if n, _ := rc.total(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if got := testutil.ToFloat64(h.d.metrics.duplicates.WithLabelValues("a")); got != 1 {
		t.Errorf("duplicates_total = %v, want 1", got)
	}
}

// A failing endpoint's new events go to its queue, which is probed one
// event at a time, each event once; the first success makes every queued
// event due at once, however far its schedule had put it.
func TestRecoveredEndpointCatchesUpAtOnce(t *testing.T) {
	var up atomic.Bool
	var inFlight, most atomic.Int32
	rc := newReceiver(t, func(*http.Request, string, int) int {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	h := startHarness(t, Config{
		Endpoints:    []Endpoint{rc.endpoint(t, "down")},
		Schedule:     Schedule{Delays: []time.Duration{time.Hour}},
		FailingAfter: 3,
	})
	const n = 40
	var ids []string
	for i := range n {
		e := newEvent("<d@x>", i, event.Delivered, "")
		ids = append(ids, e.ID)
		h.send(mustEncode(t, e))
	}
	testkit.Eventually(t, 5*time.Second, "every record done (queued)", func() bool {
		for off := range int64(n) {
			if h.done("down", off) != 1 {
				return false
			}
		}
		return true
	})
	if !h.d.lanes[0].failing() {
		t.Fatal("the endpoint is not counted as failing")
	}
	// Before the recovery each event is tried at most once: its next
	// attempt is an hour away, and the probe takes each queued one in turn.
	for _, id := range ids {
		if n := rc.tries(id); n > 1 {
			t.Errorf("event %s tried %d times before the recovery, want at most once", id, n)
		}
	}
	if most.Load() > 8 {
		t.Errorf("%d requests at once", most.Load())
	}
	most.Store(0)
	up.Store(true)
	// Every row waits an hour now; a probe comes due only when a new
	// event does.
	h.send(mustEncode(t, newEvent("<d@x>", n, event.Delivered, "")))
	testkit.Eventually(t, 10*time.Second, "every queued event delivered after the recovery", func() bool {
		for _, id := range ids {
			if rc.delivered(id) != 1 {
				return false
			}
		}
		return true
	})
	testkit.Eventually(t, 5*time.Second, "the queue empty", func() bool { return h.rows("down", statusPending) == 0 })
	rc.check(t)
}

// Events queued by one dispatcher are delivered by the next: redeliveries live
// in PostgreSQL, not in the process.
func TestQueuedRedeliveriesSurviveARestart(t *testing.T) {
	var up atomic.Bool
	rc := newReceiver(t, func(*http.Request, string, int) int {
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusInternalServerError
	})
	q, pool := newQueue(t)
	cfg := Config{Endpoints: []Endpoint{rc.endpoint(t, "ep")}, Schedule: Schedule{Delays: []time.Duration{50 * time.Millisecond}}}
	first := startHarnessOn(t, cfg, q, pool)
	var ids []string
	for i := range 5 {
		e := newEvent("<s@x>", i, event.Bounced, "")
		ids = append(ids, e.ID)
		first.send(mustEncode(t, e))
	}
	testkit.Eventually(t, 5*time.Second, "five events queued", func() bool { return first.rows("ep", statusPending) == 5 })
	first.stop()
	up.Store(true)
	startHarnessOn(t, cfg, q, pool)
	testkit.Eventually(t, 10*time.Second, "the second dispatcher delivers the first's queue", func() bool {
		for _, id := range ids {
			if rc.delivered(id) != 1 {
				return false
			}
		}
		return true
	})
}

// On shutdown a POST cut off is left unfinished: not done, not queued, not
// dead-lettered; the next owner sends it again.
func TestShutdownLeavesCutOffAttemptsUnfinished(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	rc := newReceiver(t, func(r *http.Request, _ string, _ int) int {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "ep")}, DrainTimeout: 50 * time.Millisecond})
	e := newEvent("<u@x>", 0, event.Accepted, "")
	off := h.send(mustEncode(t, e))
	testkit.Eventually(t, 5*time.Second, "the POST open", func() bool { return rc.tries(e.ID) == 1 })
	h.stop()
	if h.done("ep", off) != 0 || len(h.dlq.all()) != 0 || h.rows("ep", statusPending) != 0 {
		t.Errorf("done %d, letters %d, queued %d; want the event left unfinished", h.done("ep", off), len(h.dlq.all()), h.rows("ep", statusPending))
	}
}

// The lane's metrics: the backlog gauge counts the queue, the failing gauge
// follows the endpoint.
func TestBacklogMetrics(t *testing.T) {
	rc := newReceiver(t, func(*http.Request, string, int) int { return http.StatusServiceUnavailable })
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "m")}, Schedule: Schedule{Delays: []time.Duration{time.Hour}},
		FailingAfter: 2})
	for i := range 3 {
		h.send(mustEncode(t, newEvent("<m@x>", i, event.Delivered, "")))
	}
	testkit.Eventually(t, 5*time.Second, "the backlog gauge at 3", func() bool { return h.gauge("postline_webhook_backlog") == 3 })
	if got := h.gauge("postline_webhook_endpoint_failing"); got != 1 {
		t.Errorf("endpoint_failing = %v, want 1", got)
	}
	if got := h.gauge("postline_webhook_endpoint_disabled"); got != 0 {
		t.Errorf("endpoint_disabled = %v, want 0", got)
	}
	if got := h.gauge("postline_webhook_oldest_pending_age_seconds"); got < 0 {
		t.Errorf("oldest_pending_age_seconds = %v", got)
	}
}

// A redelivered event carries the same webhook-id on every attempt.
func TestEveryCopyHasTheSameWebhookID(t *testing.T) {
	var ids []string
	var mu = make(chan struct{}, 1)
	rc := newReceiver(t, func(r *http.Request, _ string, n int) int {
		mu <- struct{}{}
		ids = append(ids, r.Header.Get(HeaderID))
		<-mu
		if n < 3 {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "id")}})
	e := newEvent("<i@x>", 0, event.Complained, "")
	h.send(mustEncode(t, e))
	testkit.Eventually(t, 5*time.Second, "delivery", func() bool { return rc.delivered(e.ID) == 1 })
	mu <- struct{}{}
	defer func() { <-mu }()
	if len(ids) != 3 {
		t.Fatalf("%d attempts, want 3", len(ids))
	}
	for _, id := range ids {
		if id != e.ID {
			t.Errorf("webhook-id %q, want the event ID %q", id, e.ID)
		}
	}
}

// The dead letter's attempt header counts the attempts made.
func TestDeadLetterHeadersCountAttempts(t *testing.T) {
	rc := newReceiver(t, func(*http.Request, string, int) int { return http.StatusInternalServerError })
	h := startHarness(t, Config{Endpoints: []Endpoint{rc.endpoint(t, "h")},
		Schedule: Schedule{Delays: []time.Duration{5 * time.Millisecond}, Horizon: 60 * time.Millisecond}})
	e := newEvent("<h@x>", 0, event.Bounced, "")
	h.send(mustEncode(t, e))
	testkit.Eventually(t, 10*time.Second, "the horizon's dead letter", func() bool { return len(h.dlq.all()) == 1 })
	l := h.dlq.all()[0]
	if l.Reason != ReasonHorizon || l.Attempt != rc.tries(e.ID) || l.Attempt < 2 {
		t.Errorf("reason %q attempt %d, want horizon and the %d attempts made", l.Reason, l.Attempt, rc.tries(e.ID))
	}
	if got := testkit.Header(l.Headers, HeaderDLQLastStatus); got != strconv.Itoa(http.StatusInternalServerError) {
		t.Errorf("last status header %q", got)
	}
}

// Without endpoints the dispatcher runs, is ready and sends nothing.
func TestNoEndpointsRunsIdle(t *testing.T) {
	h := startHarness(t, Config{})
	if !h.d.Ready() {
		t.Error("an idle dispatcher is not ready")
	}
	testkit.Eventually(t, 5*time.Second, "the warning logged", func() bool { return strings.Contains(h.logs.String(), "no webhook endpoints") })
}
