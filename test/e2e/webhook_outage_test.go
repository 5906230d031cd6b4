package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// Sizes and phases of TestWebhookOutageLosesNothing.
const (
	outageJobs = 5000
	// outagePublishSpan spreads the jobs over the outage and a little
	// after it, so events flow to the healthy endpoint throughout.
	outagePublishSpan = 130 * time.Second
	outageRefusing    = 60 * time.Second // then the flaky endpoint accepts connections and never answers
	outageHanging     = 60 * time.Second // then it answers
	// outageBounceEvery: one job in this many is refused at RCPT (a bounce).
	outageBounceEvery = 10
	// outageHealthyP99 is the bound on the healthy endpoint's delay.
	outageHealthyP99 = 2 * time.Second
)

// TestWebhookOutageLosesNothing runs two webhook endpoints behind two
// dispatcher replicas while 5,000 jobs, one in ten bounced at RCPT, go
// through a real worker: "healthy" answers at once; "flaky" refuses
// connections for a minute, then takes them and never answers for a
// minute, then answers. Each replica is killed with SIGKILL once during the
// outage and started again. The healthy endpoint gets every event, each
// within 2 s (p99) of its transition, throughout; after the recovery the
// flaky one gets every event too; nothing is dead-lettered; and every
// request verifies with the Standard Webhooks library.
func TestWebhookOutageLosesNothing(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const domain = "bounces.outage.e2e.postline.test"
	relay := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbRcpt && strings.HasPrefix(c.Arg, "gone-") {
			return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user here"}
		}
		return nil
	}))
	keys, _ := outcomeKeys(t, domain)
	w := startWorker(t, s.outcomeWorkerEnv("w1", relay.Addr(), domain, keys, nil))
	w.WaitReady(readyTimeout)
	events := s.readEvents(t)

	healthy := newTimedSink(t)
	flaky := newTimedSink(t)
	flakyAddr := reserveAddr(t)
	spec := fmt.Sprintf(`endpoints:
  - {id: healthy, url: '%s/hooks', secret_env: HEALTHY_SECRET}
  - {id: flaky, url: 'http://%s/hooks', secret_env: FLAKY_SECRET, timeout: 2s}
`, healthy.url, flakyAddr)
	env := s.dispatcherEnv(t, spec, testenv.UniqueName("e2e-outage"))
	env["HEALTHY_SECRET"], env["FLAKY_SECRET"] = healthy.secret, flaky.secret
	// A killed replica's partitions move after the session timeout: the
	// broker's smallest, so the healthy endpoint hardly notices.
	env["POSTLINE_SESSION_TIMEOUT"], env["POSTLINE_HEARTBEAT_INTERVAL"] = "1s", "200ms"
	replicas := []*workerProc{startProcess(t, dispatcherBin, "dispatcher-1", env), startProcess(t, dispatcherBin, "dispatcher-2", env)}
	for _, d := range replicas {
		d.WaitReady(readyTimeout)
	}

	// The flaky endpoint's phases, on the clock of the first publish.
	start := time.Now()
	var flakyServer atomic.Pointer[http.Server]
	hangingUntil := start.Add(outageRefusing + outageHanging)
	go func() {
		time.Sleep(time.Until(start.Add(outageRefusing)))
		flakyServer.Store(flaky.serveAt(t, flakyAddr, hangingUntil))
	}()
	t.Cleanup(func() {
		if srv := flakyServer.Load(); srv != nil {
			_ = srv.Close()
		}
	})

	// Publish at a steady pace; kill each replica once during the outage.
	jobs := outageJobsList(outageJobs)
	published := make(chan []string, 1)
	go func() {
		var ids []string
		const batches = 130
		per := len(jobs) / batches
		for b := range batches {
			time.Sleep(time.Until(start.Add(time.Duration(b) * outagePublishSpan / batches)))
			end := (b + 1) * per
			if b == batches-1 {
				end = len(jobs)
			}
			ids = append(ids, s.publish(jobs[b*per:end]...)...)
		}
		published <- ids
	}()
	for i, at := range []time.Duration{30 * time.Second, 90 * time.Second} {
		time.Sleep(time.Until(start.Add(at)))
		replicas[i].Kill()
		t.Logf("killed dispatcher %d at %s", i+1, time.Since(start).Round(time.Millisecond))
		replicas[i] = startProcess(t, dispatcherBin, fmt.Sprintf("dispatcher-%d-again", i+1), env)
	}
	ids := <-published

	// Every job's events on the topic, as an application reads them.
	testkit.Eventually(t, 120*time.Second, "every job's event on the events topic", func(context.Context) (bool, string) {
		n := events.mailsWithEvents(ids)
		return n == len(ids), fmt.Sprintf("%d of %d jobs have events", n, len(ids))
	})
	all := events.all()
	testkit.Eventually(t, 60*time.Second, "every event at the healthy endpoint", func(context.Context) (bool, string) {
		missing := healthy.missing(all)
		return missing == 0, fmt.Sprintf("%d of %d missing", missing, len(all))
	})
	testkit.Eventually(t, 180*time.Second, "every event at the flaky endpoint after its recovery", func(context.Context) (bool, string) {
		missing := flaky.missing(all)
		return missing == 0, fmt.Sprintf("%d of %d missing", missing, len(all))
	})

	delays := healthy.delays(all)
	p50, p99 := percentile(delays, 0.50), percentile(delays, 0.99)
	t.Logf("healthy endpoint: %d events, delay p50 %s, p99 %s, max %s; flaky: %d requests for %d events",
		len(delays), p50, p99, slices.Max(delays), flaky.requests.Load(), len(all))
	if p99 > outageHealthyP99 {
		t.Errorf("healthy endpoint's delay p99 %s, want at most %s", p99, outageHealthyP99)
	}
	var dead int
	if err := s.db.QueryRow(t.Context(), `SELECT count(*) FROM postline_webhook_queue WHERE status = 'dead'`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d dead letters, want none", dead)
	}
	if n := topicEnd(t, s.events+".webhooks.dlq"); n != 0 {
		t.Errorf("%d records on the webhook dead-letter topic, want none", n)
	}
	for name, sink := range map[string]*timedSink{"healthy": healthy, "flaky": flaky} {
		if p := sink.problemList(); len(p) > 0 {
			t.Errorf("%s endpoint: %d requests did not verify, first: %s", name, len(p), p[0])
		}
	}
}

// mailsWithEvents counts the mails of ids with at least one event read.
func (l *eventLog) mailsWithEvents(ids []string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(map[string]bool, len(ids))
	for _, e := range l.byID {
		seen[e.MessageID] = true
	}
	n := 0
	for _, id := range ids {
		if seen[id] {
			n++
		}
	}
	return n
}

// all returns every event read.
func (l *eventLog) all() []event.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]event.Event, 0, len(l.byID))
	for _, e := range l.byID {
		out = append(out, e)
	}
	return out
}

// outageJobsList returns n one-recipient jobs; every outageBounceEvery-th
// recipient is refused at RCPT.
func outageJobsList(n int) []job.Job {
	jobs := newJobs(n, "outage")
	for i := range jobs {
		if i%outageBounceEvery == 0 {
			jobs[i].To = []string{fmt.Sprintf("gone-%d@example.test", i)}
		}
	}
	return jobs
}

// timedSink is a webhook endpoint that verifies every request with the
// Standard Webhooks library and keeps when each event first arrived.
type timedSink struct {
	url, secret string
	verifier    *standardwebhooks.Webhook
	requests    atomic.Int64
	hangUntil   time.Time // set by serveAt: until then requests get no answer

	mu       sync.Mutex
	first    map[string]time.Time // event ID -> first verified arrival
	problems []string
}

func newTimedSink(t *testing.T) *timedSink {
	t.Helper()
	var b [32]byte
	_, _ = rand.Read(b[:])
	ts := &timedSink{secret: "whsec_" + base64.StdEncoding.EncodeToString(b[:]), first: map[string]time.Time{}}
	var err error
	if ts.verifier, err = standardwebhooks.NewWebhook(ts.secret); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ts, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	ts.url = "http://" + l.Addr().String()
	return ts
}

// serveAt serves the sink on addr from now on, leaving every request
// unanswered until hangUntil.
func (ts *timedSink) serveAt(t *testing.T, addr string, hangUntil time.Time) *http.Server {
	ts.mu.Lock()
	ts.hangUntil = hangUntil
	ts.mu.Unlock()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("listen on the flaky endpoint's address: %v", err)
		return nil
	}
	srv := &http.Server{Handler: ts, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv
}

func (ts *timedSink) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	ts.requests.Add(1)
	ts.mu.Lock()
	hang := time.Until(ts.hangUntil)
	ts.mu.Unlock()
	if hang > 0 {
		select {
		case <-time.After(hang):
		case <-r.Context().Done():
			return
		}
	}
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = ts.verifier.Verify(body, r.Header)
	}
	var e event.Event
	if err == nil {
		e, err = event.Decode(body)
	}
	if err == nil && e.ID != r.Header.Get("webhook-id") {
		err = errors.New("webhook-id is not the event's id")
	}
	now := time.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err != nil {
		ts.problems = append(ts.problems, err.Error())
		rw.WriteHeader(http.StatusBadRequest)
		return
	}
	if _, ok := ts.first[e.ID]; !ok {
		ts.first[e.ID] = now
	}
	rw.WriteHeader(http.StatusNoContent)
}

// missing counts the events of all the sink has not received.
func (ts *timedSink) missing(all []event.Event) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for _, e := range all {
		if _, ok := ts.first[e.ID]; !ok {
			n++
		}
	}
	return n
}

// delays returns, for each of all, the time from its transition to its
// first arrival.
func (ts *timedSink) delays(all []event.Event) []time.Duration {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]time.Duration, 0, len(all))
	for _, e := range all {
		if at, ok := ts.first[e.ID]; ok {
			out = append(out, at.Sub(e.At))
		}
	}
	return out
}

func (ts *timedSink) problemList() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Clone(ts.problems)
}

// reserveAddr returns a loopback address nothing listens on (yet).
func reserveAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// percentile returns the q-quantile of ds (nearest rank).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// topicEnd returns the number of records name holds (the sum of its
// partitions' end offsets), 0 when it does not exist.
func topicEnd(t *testing.T, name string) int64 {
	t.Helper()
	conn, err := testenv.Kafka().Dialer("e2e").DialContext(t.Context(), "tcp", testenv.KafkaBrokers()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(name)
	if err != nil {
		return 0
	}
	var n int64
	for _, p := range parts {
		pc, err := testenv.Kafka().Dialer("e2e").DialLeader(t.Context(), "tcp", testenv.KafkaBrokers()[0], name, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		end, err := pc.ReadLastOffset()
		pc.Close()
		if err != nil {
			t.Fatal(err)
		}
		n += end
	}
	return n
}
