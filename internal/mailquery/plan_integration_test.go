package mailquery_test

import (
	"strings"
	"testing"

	"github.com/postline/postline/internal/mailquery"
)

// TestRecipientSearchUsesTheAddressIndex checks, on a table of 20,000
// mails, that the planner finds an address's and a domain's mail through
// postline_recipients_address_idx and postline_recipients_domain_idx
// (migration 0021) rather than by reading the recipients: the indexes are
// what keep the search fast on 10,000,000 (bench/search).
func TestRecipientSearchUsesTheAddressIndex(t *testing.T) {
	pool := migrated(t)
	ctx := t.Context()
	// Most mail goes to a few big domains; rare.example gets a handful.
	if _, err := pool.Exec(ctx, `
INSERT INTO postline_messages (message_id, status, version, attempt, payload_hash, tenant, created_at)
SELECT 'plan-' || i || '@x', 'sent', 1, 1, '\x00', 'tenant-' || (i % 7), now() - make_interval(secs => i)
FROM generate_series(1, 20000) i;
INSERT INTO postline_recipients (message_id, idx, ref, address, state)
SELECT 'plan-' || i || '@x', k, '\x00',
	CASE WHEN i % 5000 = 0 AND k = 0 THEN 'Someone' || i || '@Rare.Example'
		ELSE 'user' || (i * 7 + k) || '@' || (ARRAY['big.example', 'huge.example', 'mail.example'])[1 + (i + k) % 3] END,
	'accepted'
FROM generate_series(1, 20000) i, generate_series(0, 1) k;
ANALYZE postline_messages;
ANALYZE postline_recipients;`); err != nil {
		t.Fatal(err)
	}
	r := newReader(t, pool)
	for _, tt := range []struct {
		name, recipient, index string
		want                   int
	}{
		{"address", "Someone5000@rare.example", "postline_recipients_address_idx", 1},
		{"domain", "@RARE.example", "postline_recipients_domain_idx", 4},
		{"big domain", "@big.example", "postline_recipients_domain_idx", 50},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := mailquery.Filter{Recipient: tt.recipient}
			text, err := r.ExplainFind(ctx, f, false)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text, tt.index) {
				t.Errorf("the plan does not use %s:\n%s", tt.index, text)
			}
			if strings.Contains(text, "Seq Scan on postline_recipients") {
				t.Errorf("the plan reads all recipients:\n%s", text)
			}
			page, err := r.Find(ctx, f)
			if err != nil || len(page.Mails) != tt.want {
				t.Errorf("Find(%s) = %d mails, %v; want %d", tt.recipient, len(page.Mails), err, tt.want)
			}
			t.Logf("plan:\n%s", text)
		})
	}
}

// TestExplainLifeShowsEachStatement checks that ExplainLife plans Life's
// statements, with their run times under analyze, and that a mail's events
// are read through their index.
func TestExplainLifeShowsEachStatement(t *testing.T) {
	pool := migrated(t)
	r := newReader(t, pool)
	for _, analyze := range []bool{false, true} {
		text, err := r.ExplainLife(t.Context(), "nobody@x", analyze)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"-- row", "-- recipients", "-- events", "-- webhooks", "postline_mail_events_message_idx"} {
			if !strings.Contains(text, want) {
				t.Errorf("ExplainLife(analyze %t) lacks %q:\n%s", analyze, want, text)
			}
		}
		if got := strings.Contains(text, "actual time="); got != analyze {
			t.Errorf("ExplainLife(analyze %t) shows run times: %t:\n%s", analyze, got, text)
		}
	}
	if _, err := r.ExplainFind(t.Context(), mailquery.Filter{State: "nonsense"}, false); err == nil {
		t.Error("ExplainFind took an invalid filter")
	}
}
