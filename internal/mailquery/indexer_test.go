package mailquery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
)

// scriptedSource hands out its records, then waits for the context to end,
// as a reader at the end of its partitions does.
type scriptedSource struct {
	records []any // event.Message or error
}

func (s *scriptedSource) Next(ctx context.Context) (event.Message, error) {
	if len(s.records) == 0 {
		<-ctx.Done()
		return event.Message{}, fmt.Errorf("event reader: fetch: %w", ctx.Err())
	}
	r := s.records[0]
	s.records = s.records[1:]
	if err, ok := r.(error); ok {
		return event.Message{}, err
	}
	return r.(event.Message), nil
}

func (s *scriptedSource) Commit(context.Context, ...event.Position) error { return nil }
func (s *scriptedSource) Close() error                                    { return nil }

func message(offset int64, messageID string) event.Message {
	return event.Message{Event: event.Event{ID: fmt.Sprintf("evt_%d", offset), MessageID: messageID},
		Position: event.Position{Topic: "mail.events", Offset: offset}}
}

func TestCollect(t *testing.T) {
	garbage := &event.DecodeError{Position: event.Position{Topic: "mail.events", Offset: 1}, Err: errors.New("not JSON")}
	tests := []struct {
		name          string
		batchSize     int
		records       []any
		wantEvents    int
		wantPositions int
		wantSkipped   int64
	}{
		{"waits out the batch wait", 10, []any{message(0, "a@x"), message(1, "b@x")}, 2, 2, 0},
		{"stops at the batch size", 2, []any{message(0, "a@x"), message(1, "b@x"), message(2, "c@x")}, 2, 2, 0},
		{"skips records that are not events, and commits them", 10,
			[]any{message(0, "a@x"), garbage, message(2, "a\x00@x"), message(3, "b@x")}, 2, 4, 2},
		{"skips an ID too long for the table", 10, []any{message(0, string(make([]byte, maxIndexedIDBytes+1)))}, 0, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := &Indexer{cfg: IndexerConfig{BatchSize: tt.batchSize, BatchWait: 20 * time.Millisecond}.WithDefaults()}
			b, err := ix.collect(t.Context(), &scriptedSource{records: tt.records})
			if err != nil {
				t.Fatal(err)
			}
			if len(b.events) != tt.wantEvents || len(b.positions) != tt.wantPositions || ix.Stats().Skipped != tt.wantSkipped {
				t.Errorf("collect = %d events, %d positions, %d skipped; want %d, %d, %d", len(b.events), len(b.positions),
					ix.Stats().Skipped, tt.wantEvents, tt.wantPositions, tt.wantSkipped)
			}
		})
	}

	t.Run("ends with its context", func(t *testing.T) {
		ix := &Indexer{cfg: IndexerConfig{}.WithDefaults()}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		if _, err := ix.collect(ctx, &scriptedSource{}); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
			t.Errorf("collect = %v, want the context's end", err)
		}
	})
	t.Run("a reader failure is returned", func(t *testing.T) {
		ix := &Indexer{cfg: IndexerConfig{}.WithDefaults()}
		broken := errors.New("event reader: fetch: closed")
		if _, err := ix.collect(t.Context(), &scriptedSource{records: []any{broken}}); !errors.Is(err, broken) {
			t.Errorf("collect = %v, want %v", err, broken)
		}
	})
}

func TestIndexedDocLeavesOutMetadata(t *testing.T) {
	doc, err := indexedDoc(event.Event{ID: "evt_1", Metadata: map[string]string{"customer": "private"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(doc); got == "" || strings.Contains(got, "customer") || strings.Contains(got, "metadata") {
		t.Errorf("indexed document %s keeps the metadata", got)
	}
}

func TestIndexerConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg  IndexerConfig
		want string
	}{
		{IndexerConfig{BatchSize: -1}, "BatchSize"},
		{IndexerConfig{BatchWait: -time.Second}, "BatchWait"},
	} {
		if err := tt.cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	c := IndexerConfig{}.WithDefaults()
	if c.Topic != "mail.events" || c.GroupID != DefaultIndexerGroup || c.BatchSize != DefaultBatchSize || c.BatchWait != DefaultBatchWait {
		t.Errorf("defaults = %+v", c)
	}
}
