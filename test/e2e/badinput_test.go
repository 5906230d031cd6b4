package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// TestBadInputIsDeadLettered publishes each kind of bad input between valid
// jobs: every bad record lands on the dead-letter topic unchanged with a
// machine-readable reason header, and the worker keeps consuming (every
// valid job around them is sent, every offset committed, the worker stays
// ready).
func TestBadInputIsDeadLettered(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	w := startWorker(t, s.workerEnv("badinput", nil))
	w.WaitReady(readyTimeout)

	// encode marshals a valid job after mutate changed it, bypassing the
	// publisher's validation.
	encode := func(mutate func(j *job.Job)) []byte {
		j := newJobs(1, "bad")[0]
		mutate(&j)
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// edit changes the JSON document of a valid job as a map, for documents
	// job.Job cannot express.
	edit := func(change func(doc map[string]any)) []byte {
		var doc map[string]any
		if err := json.Unmarshal(encode(func(*job.Job) {}), &doc); err != nil {
			t.Fatal(err)
		}
		change(doc)
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name   string
		value  []byte
		reason job.Reason
	}{
		{"truncated JSON", []byte(`{"version":1,"message_id":"x@y","from":`), job.ReasonMalformedJSON},
		{"not JSON", []byte("hello, worker"), job.ReasonMalformedJSON},
		{"wrong type", edit(func(d map[string]any) { d["to"] = "one@example.test" }), job.ReasonMalformedJSON},
		{"unknown schema version", edit(func(d map[string]any) { d["version"] = 2 }), job.ReasonUnsupportedVersion},
		{"missing version", edit(func(d map[string]any) { delete(d, "version") }), job.ReasonUnsupportedVersion},
		{"no recipients", encode(func(j *job.Job) { j.To = nil }), job.ReasonMissingField},
		{"missing from", encode(func(j *job.Job) { j.From = "" }), job.ReasonMissingField},
		{"invalid to address", encode(func(j *job.Job) { j.To = []string{"not an address"} }), job.ReasonInvalidAddress},
		{"invalid from address", encode(func(j *job.Job) { j.From = "bob@" }), job.ReasonInvalidAddress},
		{"invalid cc address", encode(func(j *job.Job) { j.Cc = []string{"a@b@c"} }), job.ReasonInvalidAddress},
		{"LF in subject", encode(func(j *job.Job) { j.Subject = "Hello\nBcc: victim@example.test" }), job.ReasonHeaderInjection},
		{"CR in subject", encode(func(j *job.Job) { j.Subject = "Hello\rBcc: victim@example.test" }), job.ReasonHeaderInjection},
		{"CRLF in header value", encode(func(j *job.Job) {
			j.Headers = map[string]string{"X-Campaign": "spring\r\nBcc: victim@example.test"}
		}), job.ReasonHeaderInjection},
		{"LF in display name", encode(func(j *job.Job) { j.To = []string{"Eve\n <eve@example.test>"} }), job.ReasonHeaderInjection},
		{"CRLF in encoded display name", encode(func(j *job.Job) {
			j.To = []string{"=?UTF-8?Q?Eve=0D=0AX-Evil=3A_1?= <eve@example.test>"}
		}), job.ReasonHeaderInjection},
		{"oversize body", encode(func(j *job.Job) { j.Text = strings.Repeat("a", job.Limits{}.WithDefaults().MaxBodyBytes+1) }), job.ReasonOversizeBody},
	}

	// valid, bad, valid, bad, ..., valid: a worker that stopped at a bad
	// record would leave the valid jobs after it unsent.
	valid := newJobs(len(cases)+1, "between bad records")
	var (
		msgs    []kafka.Message
		validID []string
		byKey   = make(map[string]int)
	)
	add := func(j job.Job) {
		v, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(j.MessageID), Value: v})
		validID = append(validID, j.MessageID)
	}
	for i, c := range cases {
		add(valid[i])
		key := fmt.Sprintf("bad-%02d.%s", i, job.NewMessageID(messageIDDomain))
		byKey[key] = i
		msgs = append(msgs, kafka.Message{
			Key:     []byte(key),
			Value:   c.value,
			Headers: []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("1")}},
		})
	}
	add(valid[len(cases)])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.raw.PublishRaw(ctx, msgs); err != nil {
		t.Fatal(err)
	}

	letters := s.readDLQ(len(cases), 60*time.Second)
	s.waitSent(len(validID), 60*time.Second)
	s.waitCommittedToEnd(30 * time.Second)

	seen := make(map[int]bool)
	for _, l := range letters {
		i, ok := byKey[string(l.Key)]
		if !ok {
			t.Errorf("unexpected dead letter with key %q, reason %q", l.Key, l.Reason)
			continue
		}
		seen[i] = true
		c := cases[i]
		if l.Reason != string(c.reason) {
			t.Errorf("%s: dead letter reason %q, want %q (error header: %s)",
				c.name, l.Reason, c.reason, testkit.Header(l.Headers, jobheader.KeyDLQError))
		}
		if !bytes.Equal(l.Value, c.value) {
			t.Errorf("%s: dead letter value differs from the record published (%d bytes, want %d)", c.name, len(l.Value), len(c.value))
		}
		if got := testkit.Header(l.Headers, jobheader.KeyDLQOriginalTopic); got != s.jobs {
			t.Errorf("%s: original topic header %q, want %q", c.name, got, s.jobs)
		}
	}
	for i, c := range cases {
		if !seen[i] {
			t.Errorf("%s: no dead letter", c.name)
		}
	}

	got := s.mailbox(validID)
	if got.Total != len(validID) || got.Distinct != len(validID) || len(got.Missing) != 0 {
		t.Errorf("want the %d valid jobs each once; got %s", len(validID), got)
	}
	if ok, reason := w.Ready(ctx); !ok {
		t.Errorf("worker not ready after bad input: %s", reason)
	}
	if n := w.mustMetric("postline_delivery_records_total", "outcome", "rejected"); n != float64(len(cases)) {
		t.Errorf("postline_delivery_records_total{outcome=rejected} = %v, want %d", n, len(cases))
	}
}
