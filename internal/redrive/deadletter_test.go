package redrive

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/job"
)

func TestParseDeadLetterAndRedriveMessage(t *testing.T) {
	dlqTime := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	orig := []kafka.Header{
		{Key: "traceparent", Value: []byte("tp")},
		{Key: jobheader.KeyAttempt, Value: []byte("3")},
		{Key: jobheader.KeyFirstSeen, Value: []byte("2026-01-01T00:00:00Z")},
		{Key: jobheader.KeyNotBefore, Value: []byte("2026-01-01T00:05:00Z")},
		{Key: jobheader.KeyLastClass, Value: []byte("transient")},
		{Key: "x-custom", Value: []byte("kept")},
	}
	headers := deadletter.Headers(deadletter.Letter{Headers: orig, Topic: "mail.retry.5s", Partition: 2, Offset: 41,
		Reason: "smtp_permanent", Class: "permanent", Error: "550 5.1.1 no such user", Attempt: 4}, jobheader.FormatTime(dlqTime))
	m := kafka.Message{Key: []byte("<a@x>"), Value: []byte("{}"), Headers: headers, Partition: 1, Offset: 7, Time: dlqTime.Add(time.Hour)}

	l := ParseDeadLetter(m)
	if !l.Time.Equal(dlqTime) || l.Partition != 1 || l.Offset != 7 || l.MessageID != "<a@x>" || l.Reason != "smtp_permanent" ||
		l.Class != "permanent" || l.Attempt != 4 || l.Error != "550 5.1.1 no such user" || l.OriginalTopic != "mail.retry.5s" ||
		l.OriginalPartition == nil || *l.OriginalPartition != 2 || l.OriginalOffset == nil || *l.OriginalOffset != 41 || l.Tenant != "" {
		t.Errorf("ParseDeadLetter = %+v", l)
	}
	// Without the time header, the record timestamp counts.
	if l := ParseDeadLetter(kafka.Message{Time: dlqTime}); !l.Time.Equal(dlqTime) || l.OriginalPartition != nil || l.Attempt != 1 {
		t.Errorf("bare record: %+v", l)
	}

	now := dlqTime.Add(24 * time.Hour)
	r := RedriveMessage(m, now)
	got := map[string]string{}
	for _, h := range r.Headers {
		if _, dup := got[h.Key]; dup {
			t.Errorf("header %s appears twice", h.Key)
		}
		got[h.Key] = string(h.Value)
	}
	want := map[string]string{"traceparent": "tp", "x-custom": "kept", jobheader.KeyAttempt: "1", jobheader.KeyFirstSeen: jobheader.FormatTime(now)}
	if len(got) != len(want) || string(r.Key) != "<a@x>" || string(r.Value) != "{}" || r.Topic != "" {
		t.Errorf("re-drive message = %+v, want headers %v", r, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("re-drive header %s = %q, want %q", k, got[k], v)
		}
	}
}

// TestDeadLetterTenant reads the tenant from the job document (jobs carry
// no tenant header), also from a job that decodes but fails validation.
func TestDeadLetterTenant(t *testing.T) {
	valid := job.Job{Version: 1, MessageID: "a@x", From: "shop@example.com", To: []string{"b@example.test"}, Subject: "s", Text: "t", Tenant: "acme"}
	invalid := valid
	invalid.To, invalid.Tenant = nil, "globex" // no recipient: fails Validate only
	tests := []struct {
		name  string
		value []byte
		want  string
	}{
		{"valid job", mustJSON(t, valid), "acme"},
		{"decodes, fails validation", mustJSON(t, invalid), "globex"},
		{"not JSON", []byte(`{"version":1,`), ""},
		{"no tenant", mustJSON(t, job.Job{Version: 1, MessageID: "c@x", From: "f@x.test", To: []string{"b@x.test"}, Subject: "s", Text: "t"}), ""},
	}
	for _, tt := range tests {
		if got := ParseDeadLetter(kafka.Message{Value: tt.value}).Tenant; got != tt.want {
			t.Errorf("%s: tenant %q, want %q", tt.name, got, tt.want)
		}
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
