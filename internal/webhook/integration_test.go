package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
)

// On the real Kafka: events (with copies) on a three-partition topic, three
// endpoints. "all" verifies every signature with the library and takes
// accepted, delivered and bounced events; "acme" takes the acme tenant's
// and fails twice per event before taking it; "down" takes bounces and
// answers nothing until the test lets it answer 503. Every event reaches
// each matching endpoint once (by webhook-id), "all" and "acme" get all of
// theirs while "down" holds its backlog, the bounces then land on the
// dead-letter topic with their headers, and the group commits to the end.
func TestIntegrationDispatch(t *testing.T) {
	testenv.Integration(t, "Kafka")
	events := testenv.NewTopic(t, 3)
	dlqTopic := testenv.UniqueName("webhooks_dlq")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := topic.Ensure(ctx, testenv.Kafka(), topic.Spec{Name: dlqTopic, Partitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.Kafka(), dlqTopic); err != nil {
			t.Errorf("delete %s: %v", dlqTopic, err)
		}
	})
	dlq, err := deadletter.New(deadletter.Config{Kafka: testenv.Kafka(), Topic: dlqTopic}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()

	all := newReceiver(t, nil)
	acme := newReceiver(t, func(_ *http.Request, _ string, n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	up := make(chan struct{})
	var upOnce sync.Once
	letDownAnswer := func() { upOnce.Do(func() { close(up) }) }
	defer letDownAnswer()
	down := newReceiver(t, func(r *http.Request, _ string, _ int) int {
		select {
		case <-up:
		case <-r.Context().Done():
		}
		return http.StatusServiceUnavailable
	})
	epAll := all.endpoint(t, "all")
	epAll.Types = []event.Type{event.Accepted, event.Delivered, event.Bounced}
	epAcme := acme.endpoint(t, "acme")
	epAcme.Tenants = []string{"acme"}
	epDown := down.endpoint(t, "down")
	epDown.Types = []event.Type{event.Bounced}

	// 60 events of 20 mails: four types, three tenants; every fifth
	// event is written twice, as a producer repeating a write leaves it.
	types := []event.Type{event.Accepted, event.Deferred, event.Delivered, event.Bounced}
	tenants := []string{"acme", "globex", ""}
	var msgs []kafka.Message
	want := map[string][]string{} // endpoint -> event IDs
	for i := range 60 {
		e := newEvent(fmt.Sprintf("<int%d@x>", i%20), i/20, types[i%4], tenants[i%3])
		v := mustEncode(t, e)
		msgs = append(msgs, kafka.Message{Key: []byte(e.MessageID), Value: v})
		if i%5 == 0 {
			msgs = append(msgs, kafka.Message{Key: []byte(e.MessageID), Value: v})
		}
		for _, ep := range []Endpoint{epAll, epAcme, epDown} {
			if ep.Matches(&e) {
				want[ep.ID] = append(want[ep.ID], e.ID)
			}
		}
	}
	if len(want["all"]) == 0 || len(want["acme"]) == 0 || len(want["down"]) == 0 {
		t.Fatalf("the events match too little: %v", want)
	}

	group := testenv.UniqueName("webhooks")
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	queue, _ := newQueue(t)
	d, err := New(Config{
		Kafka: testenv.Kafka(), Topic: events, GroupID: group, Endpoints: []Endpoint{epAll, epAcme, epDown}, DeadLetters: dlq,
		Queue: queue, Schedule: Schedule{Delays: []time.Duration{50 * time.Millisecond}, Horizon: 5 * time.Second},
		PollInterval: 5 * time.Millisecond, StateInterval: 50 * time.Millisecond,
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond, DrainTimeout: 2 * time.Second,
		MaxWait: 50 * time.Millisecond, Transport: tr,
	}, logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	exited := make(chan error, 1)
	go func() { exited <- d.Run(runCtx) }()
	defer func() {
		stop()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of cancel")
		}
	}()

	w, closeConn, err := testenv.Kafka().Writer(kafkaWriterConfig(events))
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// While "down" holds every bounce unanswered, the others get all theirs.
	testkit.Eventually(t, 60*time.Second, "every event at all and acme", func() bool {
		return deliveredAll(all, want["all"]) && deliveredAll(acme, want["acme"])
	})
	if tries, _ := down.total(); tries > DefaultConcurrency {
		t.Errorf("down has %d requests, want at most %d in flight", tries, DefaultConcurrency)
	}
	letDownAnswer()

	letters := readTopic(t, ctx, dlqTopic, len(want["down"]))
	var dead []string
	for _, m := range letters {
		e, err := event.Decode(m.Value)
		if err != nil {
			t.Fatalf("dead letter value: %v", err)
		}
		dead = append(dead, e.ID)
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		wantHeaders := map[string]string{HeaderDLQEndpoint: "down", jobheader.KeyDLQReason: ReasonHorizon,
			HeaderDLQLastStatus: "503", HeaderDLQEventID: e.ID, jobheader.KeyDLQOriginalTopic: events}
		for k, v := range wantHeaders {
			if hs[k] != v {
				t.Errorf("dead letter of %s: header %s = %q, want %q", e.ID, k, hs[k], v)
			}
		}
		// The first attempt waits for "down" to answer, perhaps longer than
		// the horizon: one attempt or many, every one of them counted.
		if n, err := strconv.Atoi(hs[jobheader.KeyAttempt]); err != nil || n < 1 || n != down.tries(e.ID) {
			t.Errorf("dead letter of %s: attempts %q, want the %d made", e.ID, hs[jobheader.KeyAttempt], down.tries(e.ID))
		}
		if _, err := strconv.ParseInt(hs[jobheader.KeyDLQOriginalOffset], 10, 64); err != nil {
			t.Errorf("dead letter of %s: original offset %q", e.ID, hs[jobheader.KeyDLQOriginalOffset])
		}
	}
	slices.Sort(dead)
	wantDead := slices.Sorted(slices.Values(want["down"]))
	if !slices.Equal(dead, wantDead) {
		t.Errorf("dead letters for %v, want the bounces %v", dead, wantDead)
	}

	for _, c := range []struct {
		rc   *receiver
		id   string
		want []string
	}{{all, "all", want["all"]}, {acme, "acme", want["acme"]}} {
		c.rc.check(t)
		c.rc.mu.Lock()
		for id, n := range c.rc.got {
			if n != 1 || !slices.Contains(c.want, id) {
				t.Errorf("endpoint %s got %s %d times; want once, and only its filters' events", c.id, id, n)
			}
		}
		if len(c.rc.got) != len(c.want) {
			t.Errorf("endpoint %s got %d events, want %d", c.id, len(c.rc.got), len(c.want))
		}
		c.rc.mu.Unlock()
	}
	for _, id := range want["acme"] {
		if n := acme.tries(id); n != 3 {
			t.Errorf("acme: %s took %d attempts, want 3", id, n)
		}
	}

	client, closeClient := testenv.Kafka().Client("lag", 10*time.Second)
	defer closeClient()
	testkit.Eventually(t, 30*time.Second, "every endpoint's group to commit every record", func() bool {
		for _, ep := range []string{"all", "acme", "down"} {
			lag, err := consumer.Lag(ctx, client, events, group+"."+ep)
			if err != nil || len(lag) != 3 {
				return false
			}
			for _, n := range lag {
				if n != 0 {
					return false
				}
			}
		}
		return true
	})
}

func kafkaWriterConfig(topicName string) kafkaclient.WriterConfig {
	return kafkaclient.WriterConfig{Topic: topicName, Name: "test", Limits: map[string]int{topicName: topic.MaxMessageBytes}}
}

func deliveredAll(rc *receiver, ids []string) bool {
	for _, id := range ids {
		if rc.delivered(id) == 0 {
			return false
		}
	}
	return true
}

// readTopic reads n records of name with a fresh group.
func readTopic(t *testing.T, ctx context.Context, name string, n int) []consumer.Message {
	t.Helper()
	c, err := consumer.New(consumer.Config{
		Kafka: testenv.Kafka(), Topic: name, GroupID: testenv.UniqueName("dlqreader"),
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond, DrainTimeout: time.Second, MaxWait: 50 * time.Millisecond,
	}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = c.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	var out []consumer.Message
	timeout := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case m, ok := <-c.Messages():
			if !ok {
				t.Fatalf("reader stopped after %d of %d records", len(out), n)
			}
			out = append(out, m)
			c.MarkDone(m)
		case <-timeout:
			t.Fatalf("read %d of %d records of %s within 60s", len(out), n, name)
		}
	}
	return out
}
