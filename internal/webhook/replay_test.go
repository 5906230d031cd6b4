package webhook

import (
	"testing"
	"time"

	"github.com/postline/postline/event"
)

func TestReplayFilterMatchesAndSays(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e := event.Event{At: at, Type: event.Bounced, Tenant: "acme"}
	tests := []struct {
		name string
		f    ReplayFilter
		want bool
		says string
	}{
		{"everything", ReplayFilter{}, true, ""},
		{"from inclusive", ReplayFilter{From: at}, true, "from 2026-12-01T10:00:00Z"},
		{"to exclusive", ReplayFilter{To: at}, false, "to 2026-12-01T10:00:00Z"},
		{"type", ReplayFilter{Types: []event.Type{event.Delivered}}, false, "of types [delivered]"},
		{"tenant", ReplayFilter{Tenants: []string{"acme"}, Types: []event.Type{event.Bounced}}, true, "of types [bounced] of tenants [acme]"},
		{"other tenant", ReplayFilter{Tenants: []string{"globex"}}, false, "of tenants [globex]"},
	}
	for _, tt := range tests {
		if got := tt.f.Matches(&e); got != tt.want {
			t.Errorf("%s: Matches = %v, want %v", tt.name, got, tt.want)
		}
		if got := tt.f.String(); got != tt.says {
			t.Errorf("%s: String = %q, want %q", tt.name, got, tt.says)
		}
	}
}
