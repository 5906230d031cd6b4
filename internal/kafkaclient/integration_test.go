package kafkaclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/kafkaconn"
)

// Over the stack's SASL_SSL listener (SCRAM-SHA-512, a certificate of its
// own CA): the cluster is checked, a writer and a reader built here round-
// trip a record, and the topic's limit is read from the broker.
func TestSecuredListenerRoundTrip(t *testing.T) {
	cfg := testenv.SecureKafka(t)
	c, err := kafkaclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := c.Check(ctx); err != nil {
		t.Fatalf("Check over SASL_SSL: %v", err)
	}
	name := testenv.UniqueName("secure")
	if err := topic.Ensure(ctx, c, topic.Spec{Name: name, Partitions: 1, ReplicationFactor: 1,
		Configs: map[string]string{"max.message.bytes": "200000"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topic.Delete(context.Background(), c, name) })

	limits, err := c.MaxMessageBytes(ctx, name)
	if err != nil || limits[name] != 200000 {
		t.Fatalf("MaxMessageBytes = %v, %v; want 200000", limits, err)
	}
	w, closeConn, err := c.Writer(kafkaclient.WriterConfig{Topic: name, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	defer w.Close()
	// Three records of 90 KB: together more than the topic takes in one
	// batch, so the writer must cut them into batches that fit.
	big := strings.Repeat("x", 90_000)
	msgs := []kafka.Message{{Value: []byte(big)}, {Value: []byte(big)}, {Value: []byte(big)}}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("write three 90 KB records to a 200 KB topic: %v", err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.Brokers(), Dialer: c.Dialer("test"), Topic: name, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for i := range msgs {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read record %d: %v", i, err)
		}
		if len(m.Value) != len(big) {
			t.Fatalf("record %d has %d bytes", i, len(m.Value))
		}
	}
	// One record over the limit fails at once, before anything is sent,
	// and may not heal.
	err = w.WriteMessages(ctx, kafka.Message{Value: make([]byte, 250_000)})
	if err == nil || kafkaclient.MayHeal(err) {
		t.Fatalf("write of a record over the limit = %v, want an error that may not heal", err)
	}
}

// A wrong password and an untrusted certificate end Await at once with an
// error that says which, and never holds the password.
func TestSecuredListenerRefusals(t *testing.T) {
	good := testenv.SecureKafka(t)
	wrongPass := good
	wrongPass.SASL.Password = "definitely-" + "not-the-password"
	untrusted := good
	untrusted.TLS.CAFile = testenv.UntrustedCA(t)
	plaintext := good
	plaintext.TLS = kafkaconn.TLSConfig{Mode: kafkaconn.TLSOff}
	plaintext.DialTimeout = 2 * time.Second
	tests := []struct {
		name    string
		cfg     kafkaconn.Config
		want    string
		mayHeal bool
	}{
		{"wrong password", wrongPass, "refused the SASL credentials", false},
		{"untrusted certificate", untrusted, "certificate is not trusted", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := kafkaclient.New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			start := time.Now()
			err = c.Await(ctx, func(err error) { t.Logf("trying again after: %v", err) })
			if err == nil || !strings.Contains(err.Error(), tt.want) || kafkaclient.MayHeal(err) != tt.mayHeal {
				t.Fatalf("Await = %v (may heal %t), want an error containing %q, may heal %t", err, kafkaclient.MayHeal(err), tt.want, tt.mayHeal)
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("Await took %v to give up: a permanent refusal must end it at once", took)
			}
			for _, secret := range []string{good.SASL.Password, wrongPass.SASL.Password} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error holds a password: %v", err)
				}
			}
		})
	}
	// Plaintext spoken to the TLS listener: each attempt times out; Await
	// keeps trying (the listener may be the wrong one only for a while)
	// and says what it saw.
	c, err := kafkaclient.New(plaintext)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var seen error
	if err := c.Await(ctx, func(err error) { seen = err }); err == nil {
		t.Fatal("plaintext to a SASL_SSL listener succeeded")
	}
	if seen == nil {
		t.Fatal("Await never reported a retried failure")
	}
	t.Logf("plaintext to SASL_SSL: %v", seen)
}
