package eventstream

import (
	"bytes"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
)

// TestRecordsCarryKeyTypeAndValue holds Records' shared keys and headers to
// what copies would give: the Message-ID as key, one type header, the
// encoded event as value; and one record's headers cannot be appended over
// the next one's.
func TestRecordsCarryKeyTypeAndValue(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	events := []event.Event{
		{Schema: event.Schema, Type: event.Accepted, At: at, MessageID: "a@test", Recipient: "x@example.com", Stream: event.StreamTransactional, Attempt: 1},
		{Schema: event.Schema, Type: event.Bounced, At: at, MessageID: "b@test", Recipient: "y@example.com", Stream: event.StreamTransactional, Attempt: 1, Bounce: &event.Bounce{Type: "hard", Code: 550}},
	}
	for i := range events {
		events[i].ID = event.NewID(events[i].MessageID, 0, events[i].Type, 1)
	}
	msgs, err := Records(events)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != len(events) {
		t.Fatalf("%d records for %d events", len(msgs), len(events))
	}
	for i, m := range msgs {
		want, err := events[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Key) != events[i].MessageID || !bytes.Equal(m.Value, want) {
			t.Errorf("record %d: key %q value %s, want %q %s", i, m.Key, m.Value, events[i].MessageID, want)
		}
		if len(m.Headers) != 1 || m.Headers[0].Key != HeaderType || string(m.Headers[0].Value) != string(events[i].Type) {
			t.Errorf("record %d: headers %v", i, m.Headers)
		}
	}
	_ = append(msgs[0].Headers, kafka.Header{Key: "extra"})
	if msgs[1].Headers[0].Key != HeaderType {
		t.Errorf("appending to the first record's headers overwrote the second's: %v", msgs[1].Headers)
	}
}

// TestAppendRecordsReusesABufferAndEncodesAsEncode holds the values encoded
// into a lent buffer to Event.Encode's bytes, batch after batch in the same
// buffer, and checks that no value can be appended over the next one.
func TestAppendRecordsReusesABufferAndEncodesAsEncode(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	batches := [][]event.Event{
		{
			{Schema: event.Schema, Type: event.Accepted, At: at, MessageID: "a@test", Recipient: "x@example.com", Stream: event.StreamTransactional, Attempt: 1},
			{Schema: event.Schema, Type: event.Bounced, At: at, MessageID: "b@test", Recipient: "<y>&z@example.com", Stream: event.StreamTransactional, Attempt: 2, Bounce: &event.Bounce{Type: "hard", Code: 550}},
		},
		{
			{Schema: event.Schema, Type: event.Deferred, At: at, MessageID: "c@test", Recipient: "w@example.com", Stream: event.StreamBulk, Attempt: 3},
		},
	}
	buf := []byte("left over from an earlier batch")[:0]
	for n, events := range batches {
		for i := range events {
			events[i].ID = event.NewID(events[i].MessageID, 0, events[i].Type, events[i].Attempt)
		}
		msgs, values, err := appendRecords(buf, events)
		if err != nil {
			t.Fatalf("batch %d: %v", n, err)
		}
		for i, m := range msgs {
			want, err := events[i].Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Value, want) {
				t.Errorf("batch %d record %d: value %s, want %s", n, i, m.Value, want)
			}
			if cap(m.Value) != len(m.Value) {
				t.Errorf("batch %d record %d: value has room to grow into the next (len %d, cap %d)", n, i, len(m.Value), cap(m.Value))
			}
		}
		buf = values[:0]
	}
	bad := []event.Event{{Schema: event.Schema, Type: "no-such-type", At: at, MessageID: "d@test"}}
	if _, _, err := appendRecords(buf, bad); err == nil {
		t.Error("an event that does not validate was encoded")
	}
}
