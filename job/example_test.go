package job_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/postline/postline/job"
	"github.com/postline/postline/kafkaconn"
)

// exampleCluster starts an in-process Kafka with the topic mail.jobs, so
// that the examples run without a broker. It returns the bootstrap
// addresses and a func that stops it.
func exampleCluster() ([]string, func()) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "mail.jobs"))
	if err != nil {
		log.Fatal(err)
	}
	return c.ListenAddrs(), c.Close
}

// An application publishes a mail with its own bodies. The message ID makes
// a retried publish safe: the worker delivers each message ID once, so
// publish again with the same ID when Publish fails.
func ExamplePublisher_Publish() {
	// An in-process Kafka stands in for your cluster here.
	brokers, stop := exampleCluster()
	defer stop()

	conn := kafkaconn.Config{Brokers: brokers} // and TLS, SASL: see kafkaconn.Config
	pub, err := job.NewPublisher(conn, job.PublisherConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	ids, err := pub.Publish(context.Background(), job.Job{
		MessageID: "welcome-42@example.com", // empty: Publish generates one and returns it
		From:      "Example <noreply@example.com>",
		To:        []string{"Ada Lovelace <ada@example.com>"},
		Subject:   "Welcome",
		Text:      "Hello Ada, welcome aboard.",
		Priority:  job.PriorityUrgent,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids)
	// Output: [welcome-42@example.com]
}

// A template job names a template instead of carrying bodies: the worker
// renders the subject and bodies from the template's active version (or its
// canary), in the job's locale, with the job's data.
func ExamplePublisher_Publish_template() {
	// An in-process Kafka stands in for your cluster here.
	brokers, stop := exampleCluster()
	defer stop()

	pub, err := job.NewPublisher(kafkaconn.Config{Brokers: brokers}, job.PublisherConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	j := job.Job{
		MessageID: "reset-7@example.com",
		From:      "Example <noreply@example.com>",
		To:        []string{"ada@example.com"},
		Template: &job.TemplateRef{
			Name:   "password-reset",
			Locale: "fr-CA",
			Data:   map[string]any{"name": "Ada", "link": "https://example.com/reset/abc"},
		},
	}
	fmt.Println("templated:", j.Templated())
	ids, err := pub.Publish(context.Background(), j)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids)
	// Output:
	// templated: true
	// [reset-7@example.com]
}

// Publish checks every job as the worker will before it writes any: a job
// the worker would dead-letter is refused with the same reason, and nothing
// of the batch is written.
func ExamplePublishError() {
	brokers, stop := exampleCluster()
	defer stop()
	pub, err := job.NewPublisher(kafkaconn.Config{Brokers: brokers}, job.PublisherConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	good := job.Job{From: "noreply@example.com", To: []string{"ada@example.com"}, Subject: "Hi", Text: "Hello"}
	bad := good
	bad.MessageID, bad.To = "bad-1@example.com", []string{"ada at example.com"}
	_, err = pub.Publish(context.Background(), good, bad)
	var pe *job.PublishError
	var ve *job.ValidationError
	if errors.As(err, &pe) && errors.As(err, &ve) {
		fmt.Println("job", pe.Index, pe.MessageID, "refused:", ve.Reason, "at", ve.Field)
	}
	// Output: job 1 bad-1@example.com refused: invalid_address at to[0]
}

// Decode is what the worker runs on each record: it reports the first
// problem as a ValidationError whose Reason is the dead letter's reason.
func ExampleDecode() {
	_, err := job.Decode([]byte(`{"version":1,"message_id":"a@example.com","from":"noreply@example.com",
		"to":["ada@example.com"],"subject":"Hi","text":"Hello","color":"blue"}`), job.Limits{})
	var ve *job.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Reason, ve.Field)
	}
	// Output: unknown_field color
}
