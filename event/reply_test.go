package event_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/postline/postline/event"
)

// TestReplyRoundTripsAndMatchesTheSchema: a deferred, failed or dead
// event's reply survives Encode and Decode and validates against the
// schema file, code 0 included; a reply the schema forbids is refused by it.
func TestReplyRoundTripsAndMatchesTheSchema(t *testing.T) {
	sch := compileEventSchema(t)
	next := time.Date(2026, 12, 5, 18, 5, 0, 0, time.UTC)
	tests := []struct {
		name  string
		typ   event.Type
		reply event.Reply
	}{
		{"a throttle", event.Deferred, event.Reply{Code: 451, Status: "4.7.1", Text: "try later"}},
		{"no reply: a lost connection", event.Deferred, event.Reply{Text: "body: connection reset by peer"}},
		{"a refusal at DATA", event.Failed, event.Reply{Code: 550, Status: "5.7.1", Text: "message refused"}},
		{"a reply without enhanced status", event.Dead, event.Reply{Code: 452, Text: "too many messages"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := event.Event{Schema: event.Schema, ID: event.NewID("m@x", 0, tt.typ, 2), Type: tt.typ,
				At: time.Date(2026, 12, 5, 18, 0, 0, 0, time.UTC), MessageID: "m@x", Stream: event.StreamTransactional,
				Recipient: "a@example.test", Attempt: 2, Provider: "primary", Class: "transient", Reply: &tt.reply}
			if tt.typ == event.Deferred {
				e.NextAttemptAt = &next
			}
			b, err := e.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"reply":{"code":`) {
				t.Errorf("%s lacks the reply's code", b)
			}
			got, err := event.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if got.Reply == nil || *got.Reply != tt.reply {
				t.Errorf("decoded reply %+v, want %+v", got.Reply, tt.reply)
			}
			validate(t, sch, b, true)
		})
	}
	for _, bad := range []string{
		`{"code":451,"status":"5.7.1x"}`,
		`{"code":600}`,
		`{"code":451,"text":"` + strings.Repeat("x", 513) + `"}`,
		`{"status":"4.7.1"}`,
		`{"code":451,"diagnostic":"unknown field"}`,
	} {
		doc := `{"schema":"postline.event/v1","id":"evt_00000000000000000000000000000000","type":"deferred",` +
			`"at":"2026-12-05T18:00:00Z","message_id":"m@x","stream":"bulk","recipient":"a@example.test",` +
			`"recipient_index":0,"attempt":1,"reply":` + bad + `}`
		validate(t, sch, []byte(doc), false)
	}
}

// TestEventsWithoutReplyLeaveItOut: the field is optional, so the events
// consumers already read do not change.
func TestEventsWithoutReplyLeaveItOut(t *testing.T) {
	e := event.Event{Schema: event.Schema, ID: event.NewID("m@x", 0, event.Accepted, 1), Type: event.Accepted,
		At: time.Date(2026, 12, 5, 18, 0, 0, 0, time.UTC), MessageID: "m@x", Stream: event.StreamBulk,
		Recipient: "a@example.test", Attempt: 1}
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "reply") {
		t.Errorf("an event without a reply encodes one: %s", b)
	}
}

func compileEventSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(event.SchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("event.v1.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("event.v1.schema.json")
	if err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
	return sch
}

func validate(t *testing.T, sch *jsonschema.Schema, doc []byte, wantValid bool) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); (err == nil) != wantValid {
		t.Errorf("schema validation of %s: %v, want valid %v", doc, err, wantValid)
	}
}
