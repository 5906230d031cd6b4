package console

import (
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/mailquery"
)

// TestMailPageShowsAttemptReplies: a deferred, failed or dead entry shows
// the relay's reply (code, enhanced status, text) as a bounce does, and one
// without a reply (code 0) shows what failed.
func TestMailPageShowsAttemptReplies(t *testing.T) {
	m, l := sampleMail()
	at := m.CreatedAt
	l.Entries = []mailquery.Entry{
		{At: at, Type: "deferred", RecipientIndex: 0, Recipient: "ada@example.com", Attempt: 1, Provider: "primary",
			Class: "throttled", NextAttemptAt: at.Add(time.Minute), Code: 451, Status: "4.7.1", Diagnostic: "try later"},
		{At: at.Add(time.Minute), Type: "deferred", RecipientIndex: 0, Recipient: "ada@example.com", Attempt: 2, Provider: "backup",
			Class: "transient", NextAttemptAt: at.Add(5 * time.Minute), Diagnostic: "no reply at dial"},
		{At: at.Add(5 * time.Minute), Type: "failed", RecipientIndex: 0, Recipient: "ada@example.com", Attempt: 3, Provider: "primary",
			Class: "permanent", Reason: "smtp_permanent", Code: 550, Status: "5.7.1", Diagnostic: "message <refused> & filed"},
		{At: at.Add(6 * time.Minute), Type: "dead", RecipientIndex: 1, Recipient: "bob@example.com", Attempt: 3, Provider: "primary",
			Class: "transient", Reason: "max_attempts", Code: 452, Diagnostic: "too many messages"},
	}
	mail := &fakeMail{mails: []mailquery.Mail{m}, lives: map[string]mailquery.Life{m.MessageID: l}}
	s, _, _ := newUnitServer(t, mail)
	w := get(t, s, "/mail/view?id="+m.MessageID, "viewer-token")
	if w.Code != 200 {
		t.Fatalf("mail page = %d: %s", w.Code, w.Body)
	}
	body := w.Body.String()
	_, life, _ := strings.Cut(body, "<h2>Life</h2>")
	items := strings.Split(life, "<li>")[1:]
	want := [][]string{
		{"<strong>deferred</strong>", "attempt 1", "relay primary", "reply 451 4.7.1 · class throttled", `<div class="diag">try later</div>`},
		{"<strong>deferred</strong>", "attempt 2", "relay backup", "class transient", `<div class="diag">no reply at dial</div>`},
		{"<strong>failed</strong>", "reply 550 5.7.1 · class permanent · reason smtp_permanent",
			`<div class="diag">message &lt;refused&gt; &amp; filed</div>`},
		{"<strong>dead</strong>", "reply 452", "class transient · reason max_attempts", `<div class="diag">too many messages</div>`},
	}
	if len(items) != len(want) {
		t.Fatalf("life shows %d entries, want %d:\n%s", len(items), len(want), life)
	}
	for i, parts := range want {
		for _, p := range parts {
			if !strings.Contains(items[i], p) {
				t.Errorf("entry %d lacks %q:\n%s", i, p, items[i])
			}
		}
	}
	if strings.Contains(items[1], "reply 0") {
		t.Errorf("an attempt without a reply shows a reply code:\n%s", items[1])
	}
}
