package mailquery

import (
	"testing"
	"time"

	"github.com/postline/postline/event"
)

// TestEntryTakesTheReplyWhenThereIsNoBounce: a deferred, failed or dead
// event's reply fills the entry's code, status and diagnostic as a bounce
// does; a bounce, when there is one, is what the entry shows.
func TestEntryTakesTheReplyWhenThereIsNoBounce(t *testing.T) {
	at := time.Date(2026, 12, 5, 18, 0, 0, 0, time.UTC)
	tests := []struct {
		name                     string
		typ                      event.Type
		bounce                   *event.Bounce
		reply                    *event.Reply
		code                     int
		status, diag, bounceType string
	}{
		{"a deferral's 451", event.Deferred, nil, &event.Reply{Code: 451, Status: "4.7.1", Text: "try later"},
			451, "4.7.1", "try later", ""},
		{"a failure without a reply", event.Dead, nil, &event.Reply{Text: "no reply at dial"},
			0, "", "no reply at dial", ""},
		{"a 550 at DATA", event.Failed, nil, &event.Reply{Code: 550, Status: "5.7.1", Text: "refused"},
			550, "5.7.1", "refused", ""},
		{"a bounce", event.Bounced, &event.Bounce{Type: event.BounceHard, Code: 550, Status: "5.1.1", Diagnostic: "no such user", Source: "smtp"},
			nil, 550, "5.1.1", "no such user", event.BounceHard},
		{"a bounce wins over a reply", event.Bounced, &event.Bounce{Type: event.BounceSoft, Code: 552, Status: "5.2.2", Diagnostic: "full", Source: "dsn"},
			&event.Reply{Code: 451, Text: "other"}, 552, "5.2.2", "full", event.BounceSoft},
		{"neither", event.Deferred, nil, nil, 0, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			en := entryOf(event.Event{Type: tt.typ, At: at, Recipient: "a@example.test", Class: "transient",
				Bounce: tt.bounce, Reply: tt.reply})
			if en.Code != tt.code || en.Status != tt.status || en.Diagnostic != tt.diag || en.BounceType != tt.bounceType {
				t.Errorf("entry code %d status %q diagnostic %q bounce %q, want %d %q %q %q",
					en.Code, en.Status, en.Diagnostic, en.BounceType, tt.code, tt.status, tt.diag, tt.bounceType)
			}
			if en.Class != "transient" || en.Type != string(tt.typ) {
				t.Errorf("entry %+v lost the event's type or class", en)
			}
		})
	}
}
