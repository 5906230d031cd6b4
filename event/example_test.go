package event_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postline/postline/event"
	"github.com/postline/postline/kafkaconn"
)

// exampleCluster starts an in-process Kafka holding events on topic
// mail.events, as Postline writes them, so that the examples run without a
// broker. It returns the bootstrap addresses and a func that stops it.
func exampleCluster(events ...event.Event) ([]string, func()) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "mail.events"))
	if err != nil {
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("mail.events"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	for _, e := range events {
		v, err := e.Encode()
		if err != nil {
			log.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(e.MessageID), Value: v}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}
	return c.ListenAddrs(), c.Close
}

// An application reads mail.events with its own consumer group, handles
// each event and commits after handling; records that are not events are
// logged and skipped. Copies of an event (delivery is at least once) are
// dropped.
func ExampleReader() {
	accepted := event.Event{Schema: event.Schema, Type: event.Accepted, At: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
		MessageID: "welcome-42@example.com", Stream: event.StreamTransactional, Recipient: "ada@example.com", Attempt: 1}
	accepted.ID = event.NewID(accepted.MessageID, 0, accepted.Type, 1)
	bounced := accepted
	bounced.Type, bounced.Bounce = event.Bounced, &event.Bounce{Type: event.BounceHard, Source: "dsn"}
	bounced.ID = event.NewID(bounced.MessageID, 0, bounced.Type, 1)
	// An in-process Kafka stands in for your cluster here.
	brokers, stop := exampleCluster(accepted, accepted, bounced)
	defer stop()

	r, err := event.NewReader(kafkaconn.Config{Brokers: brokers}, event.ReaderConfig{GroupID: "billing-app"})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 { // an application loops until ctx ends
		m, err := r.Next(ctx)
		var bad *event.DecodeError
		if errors.As(err, &bad) {
			log.Printf("skipping record %s/%d@%d: %v", bad.Topic, bad.Partition, bad.Offset, bad.Err)
			if err := r.Commit(ctx, bad.Position); err != nil {
				log.Fatal(err)
			}
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(m.Event.Type, m.Event.Recipient, "at offset", m.Offset)
		if err := r.Commit(ctx, m.Position); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// accepted ada@example.com at offset 0
	// bounced ada@example.com at offset 2
}

// An application's webhook endpoint verifies each request's Standard
// Webhooks signature with that standard's library
// (github.com/standard-webhooks/standard-webhooks/libraries/go) and the
// endpoint's secret, then decodes the body with Decode. Verify also
// refuses a timestamp more than five minutes old, so a captured request
// cannot be replayed. Delivery is at least once: dedupe by the event's ID,
// which is the webhook-id header. examples/webhook-receiver is a whole
// endpoint.
func Example_verifyWebhook() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the endpoint's secret in Postline's webhooks file
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		log.Fatal(err)
	}
	endpoint := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read error", http.StatusBadRequest)
			return
		}
		if err := verifier.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		e, err := event.Decode(body)
		if err != nil {
			http.Error(w, "not an event", http.StatusBadRequest)
			return
		}
		fmt.Println("verified:", e.Type, e.Recipient, e.Bounce.Type)
		w.WriteHeader(http.StatusNoContent)
	})

	// A request as Postline's webhook dispatcher signs it, then the same
	// request with a forged signature.
	e := event.Event{Schema: event.Schema, Type: event.Bounced, At: time.Now().UTC(), MessageID: "welcome-42@example.com",
		Stream: event.StreamTransactional, Recipient: "ada@example.com", Attempt: 1,
		Bounce: &event.Bounce{Type: event.BounceHard, Source: "dsn"}}
	e.ID = event.NewID(e.MessageID, 0, e.Type, 1)
	body, err := e.Encode()
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	signature, err := verifier.Sign(e.ID, now, body)
	if err != nil {
		log.Fatal(err)
	}
	for _, sig := range []string{signature, "v1,Zm9yZ2VkIHNpZ25hdHVyZQ=="} {
		req := httptest.NewRequest(http.MethodPost, "/hooks/postline", bytes.NewReader(body))
		req.Header.Set("webhook-id", e.ID)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		resp := httptest.NewRecorder()
		endpoint.ServeHTTP(resp, req)
		fmt.Println(resp.Code)
	}
	// Output:
	// verified: bounced ada@example.com hard
	// 204
	// 401
}
