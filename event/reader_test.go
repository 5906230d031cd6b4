package event_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/kafkaconn"
)

// testEvent returns a valid accepted event of recipient i of mail mid.
func testEvent(mid string, i int) event.Event {
	return event.Event{
		Schema: event.Schema, ID: event.NewID(mid, i, event.Accepted, 1), Type: event.Accepted,
		At: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), MessageID: mid, Stream: event.StreamTransactional,
		Recipient: fmt.Sprintf("r%d@example.com", i), RecipientIndex: i, Attempt: 1,
	}
}

func encode(t testing.TB, e event.Event) []byte {
	t.Helper()
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeFetcher serves records from a slice and records commits.
type fakeFetcher struct {
	records   []kafka.Message
	committed []kafka.Message
	err       error // returned once records run out
}

func (f *fakeFetcher) FetchMessage(context.Context) (kafka.Message, error) {
	if len(f.records) == 0 {
		return kafka.Message{}, f.err
	}
	m := f.records[0]
	f.records = f.records[1:]
	return m, nil
}

func (f *fakeFetcher) CommitMessages(_ context.Context, msgs ...kafka.Message) error {
	f.committed = append(f.committed, msgs...)
	return nil
}

// record returns the record at offset off of partition 0 of topic "t".
func record(off int64, value []byte) kafka.Message {
	return kafka.Message{Topic: "t", Partition: 0, Offset: off, Value: value}
}

// readAll calls Next until the fetcher runs dry and returns the offsets of
// the events handed out and of the decode errors, in order. values are the
// records' values by offset, on partition 0 of topic "t".
func readAll(t *testing.T, r *event.Reader, values [][]byte) (events, undecodable []int64) {
	t.Helper()
	for {
		m, err := r.Next(context.Background())
		var de *event.DecodeError
		switch {
		case errors.As(err, &de):
			if de.Topic != "t" || de.Partition != 0 || de.Offset < 0 || de.Offset >= int64(len(values)) || !bytes.Equal(de.Value, values[de.Offset]) {
				t.Errorf("DecodeError locates %s/%d@%d with value %q, not its record", de.Topic, de.Partition, de.Offset, de.Value)
			}
			undecodable = append(undecodable, de.Offset)
		case errors.Is(err, io.EOF):
			return events, undecodable
		case err != nil:
			t.Fatalf("Next: %v", err)
		default:
			if m.Event.ID == "" || m.Offset < 0 || m.Topic != "t" {
				t.Fatalf("Next returned %+v", m)
			}
			events = append(events, m.Offset)
		}
	}
}

func TestReaderDropsCopiesAndReportsUndecodable(t *testing.T) {
	a, b, c := testEvent("<a@x>", 0), testEvent("<b@x>", 0), testEvent("<c@x>", 0)
	invalid := testEvent("<d@x>", 0)
	invalid.Stream = "weekly"
	raw := func(e event.Event) []byte { b, _ := json.Marshal(e); return b }
	tests := []struct {
		name            string
		window          int
		values          [][]byte
		wantEvents      []int64
		wantUndecodable []int64
	}{
		{"distinct", 0, [][]byte{encode(t, a), encode(t, b), encode(t, c)}, []int64{0, 1, 2}, nil},
		{"copies dropped", 0, [][]byte{encode(t, a), encode(t, a), encode(t, b), encode(t, a)}, []int64{0, 2}, nil},
		// With a window of 2, a is forgotten once b and c were seen.
		{"window evicts", 2, [][]byte{encode(t, a), encode(t, b), encode(t, c), encode(t, a)}, []int64{0, 1, 2, 3}, nil},
		{"window keeps recent", 2, [][]byte{encode(t, a), encode(t, b), encode(t, a)}, []int64{0, 1}, nil},
		{"not json", 0, [][]byte{encode(t, a), []byte("{nope"), encode(t, b)}, []int64{0, 2}, []int64{1}},
		{"invalid event", 0, [][]byte{raw(invalid), encode(t, a)}, []int64{1}, []int64{0}},
		{"empty value", 0, [][]byte{nil, encode(t, a)}, []int64{1}, []int64{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeFetcher{err: io.EOF}
			for i, v := range tt.values {
				f.records = append(f.records, record(int64(i), v))
			}
			r, err := event.NewTestReader(f, event.ReaderConfig{DedupeWindow: tt.window})
			if err != nil {
				t.Fatal(err)
			}
			events, undecodable := readAll(t, r, tt.values)
			if !slices.Equal(events, tt.wantEvents) || !slices.Equal(undecodable, tt.wantUndecodable) {
				t.Errorf("events at %v, undecodable at %v; want %v and %v", events, undecodable, tt.wantEvents, tt.wantUndecodable)
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	if _, err := event.NewReader(kafkaconn.Config{}, event.ReaderConfig{GroupID: "g"}); err == nil || !strings.Contains(err.Error(), "Brokers") {
		t.Errorf("NewReader without brokers: %v", err)
	}
	if _, err := event.NewReader(kafkaconn.Config{Brokers: []string{"127.0.0.1:9092"}}, event.ReaderConfig{}); err == nil || !strings.Contains(err.Error(), "GroupID") {
		t.Errorf("NewReader without a group: %v", err)
	}
	if _, err := event.NewTestReader(&fakeFetcher{}, event.ReaderConfig{DedupeWindow: -1}); err == nil ||
		err.Error() != "event reader config: DedupeWindow = -1: must be at least 1" {
		t.Errorf("DedupeWindow -1: %v", err)
	}
	r, err := event.NewTestReader(&fakeFetcher{err: context.DeadlineExceeded}, event.ReaderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Next = %v, want the fetch error wrapped", err)
	}
	var de *event.DecodeError
	if _, err := r.Next(context.Background()); errors.As(err, &de) {
		t.Errorf("a fetch error is not a DecodeError: %v", err)
	}
}

func TestReaderCommitPassesRecords(t *testing.T) {
	f := &fakeFetcher{records: []kafka.Message{record(7, encode(t, testEvent("<a@x>", 0)))}, err: io.EOF}
	r, err := event.NewTestReader(f, event.ReaderConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(context.Background(), m.Position); err != nil {
		t.Fatal(err)
	}
	if len(f.committed) != 1 || f.committed[0].Offset != 7 || f.committed[0].Topic != "t" {
		t.Errorf("committed %v, want the record at offset 7", f.committed)
	}
}

// On the real Kafka: events with copies and a record that is no event;
// the reader hands out each event once, reports the bad record with its
// offset, and a second reader of the same group starts after the commit.
func TestIntegrationReader(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	topic := testenv.NewTopic(t, 1)
	group := testenv.UniqueName("events")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(testenv.KafkaBrokers()...), Transport: tr, Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	var msgs []kafka.Message
	var want []string
	for i := range 5 {
		e := testEvent(fmt.Sprintf("<m%d@x>", i), 0)
		want = append(want, e.ID)
		msgs = append(msgs, kafka.Message{Key: []byte(e.MessageID), Value: encode(t, e)})
		if i%2 == 0 { // a copy, as a producer retrying a write leaves
			msgs = append(msgs, kafka.Message{Key: []byte(e.MessageID), Value: encode(t, e)})
		}
		if i == 2 {
			msgs = append(msgs, kafka.Message{Key: []byte("junk"), Value: []byte("not an event")})
		}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	read := func(n int) (ids []string, bad []int64, last event.Position) {
		r, err := event.NewReader(testenv.Kafka().Config(), event.ReaderConfig{GroupID: group, Topic: topic, MaxWait: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for len(ids) < n {
			m, err := r.Next(ctx)
			var de *event.DecodeError
			if errors.As(err, &de) {
				bad = append(bad, de.Offset)
				continue
			}
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			ids = append(ids, m.Event.ID)
			last = m.Position
		}
		if err := r.Commit(ctx, last); err != nil {
			t.Fatal(err)
		}
		return ids, bad, last
	}
	ids, bad, _ := read(3)
	if !slices.Equal(ids, want[:3]) {
		t.Errorf("first reader: %v, want %v", ids, want[:3])
	}
	// Offsets: m0 0, copy 1, m1 2, m2 3, copy 4, junk 5, m3 6, m4 7, copy 8.
	if len(bad) != 0 {
		t.Errorf("first reader reported undecodable records at %v before the third event", bad)
	}
	// The second reader starts after the commit (offset 3): the copy of m2
	// at 4 is new to it: the window lives in one Reader.
	ids, bad, last := read(3)
	if !slices.Equal(ids, want[2:]) || !slices.Equal(bad, []int64{5}) || last.Offset != 7 {
		t.Errorf("second reader: events %v, undecodable at %v, last offset %d; want %v, [5], 7", ids, bad, last.Offset, want[2:])
	}
}
