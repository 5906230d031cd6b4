package providerhook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/postline/postline/internal/report"
)

// checkReports is the property of every decoded report: a valid kind, the
// right source, a one-line diagnostic within report.MaxDiagnosticBytes, an
// enhanced status or none, an SMTP code or none, and one-line names; and a
// provider verdict that agrees with the kind: a hard verdict only on a
// permanent bounce, a temporary one only on a report that resolves nothing.
func checkReports(t *testing.T, source string, reports []report.Report, input int) {
	t.Helper()
	for i, r := range reports {
		if !r.Kind.Valid() {
			t.Errorf("report %d: Kind %q not valid", i, r.Kind)
		}
		if r.Hard && (r.Kind != report.Bounced || r.Permanent == nil || !*r.Permanent) {
			t.Errorf("report %d: Hard on a %s report with Permanent %s", i, r.Kind, ptrString(r.Permanent))
		}
		if r.Permanent != nil && !*r.Permanent && r.Kind != report.Delayed {
			t.Errorf("report %d: a temporary verdict on a %s report: it must resolve nothing", i, r.Kind)
		}
		if r.Permanent != nil && r.Kind != report.Bounced && r.Kind != report.Delayed {
			t.Errorf("report %d: a bounce verdict on a %s report", i, r.Kind)
		}
		if r.Source != source {
			t.Errorf("report %d: Source %q, want %q", i, r.Source, source)
		}
		checkOneLine(t, "Diagnostic", r.Diagnostic)
		checkOneLine(t, "RemoteMTA", r.RemoteMTA)
		checkOneLine(t, "FeedbackType", r.FeedbackType)
		if r.Status != "" && !enhancedStatus.MatchString(r.Status) {
			t.Errorf("report %d: Status %q is not an enhanced status", i, r.Status)
		}
		if r.Code != 0 && (r.Code < 200 || r.Code > 599) {
			t.Errorf("report %d: Code %d is not an SMTP reply code", i, r.Code)
		}
		if r.Recipient == "" {
			t.Errorf("report %d: no Recipient", i)
		}
		for name, v := range map[string]string{"Recipient": r.Recipient, "MessageID": r.MessageID, "Token": r.Token} {
			if strings.ContainsFunc(v, unicode.IsControl) {
				t.Errorf("report %d: %s %q has control characters", i, name, v)
			}
		}
		if r.MessageID != "" && (strings.HasPrefix(r.MessageID, "<") || strings.HasSuffix(r.MessageID, ">")) {
			t.Errorf("report %d: MessageID %q keeps its angle brackets", i, r.MessageID)
		}
	}
	// Every report is one recipient of the input: never more reports than
	// the input could name.
	if len(reports) > input/2+1 {
		t.Errorf("%d reports from %d bytes", len(reports), input)
	}
}

func checkOneLine(t *testing.T, field, s string) {
	t.Helper()
	if len(s) > report.MaxDiagnosticBytes {
		t.Errorf("%s is %d bytes, over %d", field, len(s), report.MaxDiagnosticBytes)
	}
	if !utf8.ValidString(s) {
		t.Errorf("%s %q is not UTF-8", field, s)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' }) {
		t.Errorf("%s %q is not on one line", field, s)
	}
	if s != strings.TrimSpace(s) || strings.Contains(s, "  ") {
		t.Errorf("%s %q has white space left over", field, s)
	}
}

func addSamples(f *testing.F, dir string) {
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no samples in testdata/%s: %v", dir, err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzSESReports(f *testing.F) {
	addSamples(f, "ses")
	f.Add([]byte(`{"notificationType":"Bounce","bounce":{"bounceType":"Transient","bouncedRecipients":[{"emailAddress":"a@b","diagnosticCode":"smtp; 452-4.2.2 full\r\n452 4.2.2 mailbox\u2028full"}]},"mail":{"source":"bounce+t@bounces.example.net","headers":[{"name":"message-id","value":" <x@y> "}]}}`))
	f.Add([]byte(`{"eventType":"Bounce","bounce":{"bounceType":"PERMANENT","bounceSubType":"OnAccountSuppressionList","bouncedRecipients":[{"emailAddress":"a@b"},{"emailAddress":" "}]}}`))
	f.Add([]byte(`{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","bounceSubType":"Undetermined","bouncedRecipients":[{"emailAddress":"a@b","status":"5.1.1"}]}}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		reports, err := sesReports(msg, bounceToken)
		if err != nil && len(reports) != 0 {
			t.Fatalf("error %v with %d reports", err, len(reports))
		}
		checkReports(t, report.SourceSES, reports, len(msg))
	})
}

func FuzzMailgunReports(f *testing.F) {
	addSamples(f, "mailgun")
	f.Add([]byte(`{"event":"failed","severity":"permanent","reason":"suppress-bounce","recipient":"a@b","delivery-status":{"code":605,"description":"Not delivering to previously bounced address"}}`))
	f.Add([]byte(`{"event":"complained","severity":"permanent","reason":"bounce","recipient":"a@b"}`))
	f.Add([]byte(`{"event":"failed","severity":"temporary","recipient":"a@b","delivery-status":{"code":421,"message":"421-4.7.0 try\nlater \u0000 please"},"message":{"headers":{"Message-Id":"<m@x>"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		reports, err := mailgunReports(data, bounceToken)
		if err != nil && len(reports) != 0 {
			t.Fatalf("error %v with %d reports", err, len(reports))
		}
		if len(reports) > 1 {
			t.Fatalf("%d reports from one event", len(reports))
		}
		checkReports(t, report.SourceMailgun, reports, len(data))
	})
}

// FuzzOneLine: the result is one line within the cap, a fixed point, and
// keeps every word of a short input.
func FuzzOneLine(f *testing.F) {
	f.Add("smtp; 550-5.1.1 The email account\n550-5.1.1 does not exist")
	f.Add(strings.Repeat("é", 400))
	f.Add("\xff\xfe bad \t\r\n utf8")
	f.Fuzz(func(t *testing.T, s string) {
		got := oneLine(s)
		checkOneLine(t, "oneLine", got)
		if again := oneLine(got); again != got {
			t.Errorf("oneLine not idempotent: %q then %q", got, again)
		}
		if utf8.ValidString(s) && len(s) <= report.MaxDiagnosticBytes {
			words := strings.FieldsFunc(s, func(r rune) bool {
				return unicode.IsSpace(r) || unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
			})
			if want := strings.Join(words, " "); got != want {
				t.Errorf("oneLine(%q) = %q, want %q", s, got, want)
			}
		}
	})
}

func TestSMTPReply(t *testing.T) {
	tests := []struct {
		in       string
		code     int
		enhanced string
		text     string
	}{
		{"smtp; 550 5.1.1 <jane@example.com>... User", 550, "5.1.1", "550 5.1.1 <jane@example.com>... User"},
		{"SMTP;550-5.1.1 first\n550 5.1.1 second", 550, "5.1.1", "550-5.1.1 first 550 5.1.1 second"},
		{"250 ok:  Message 64111812 accepted", 250, "", "250 ok: Message 64111812 accepted"},
		{"250", 250, "", "250"},
		{"4.7.652 The mail server", 0, "", "4.7.652 The mail server"},
		{"605 not a reply", 0, "", "605 not a reply"},
		{"5501 no", 0, "", "5501 no"},
		{"", 0, "", ""},
		{"x-unknown; 451 4.3.0 later", 0, "", "x-unknown; 451 4.3.0 later"},
	}
	for _, tt := range tests {
		code, enhanced, text := smtpReply(tt.in)
		if code != tt.code || enhanced != tt.enhanced || text != tt.text {
			t.Errorf("smtpReply(%q) = %d, %q, %q; want %d, %q, %q", tt.in, code, enhanced, text, tt.code, tt.enhanced, tt.text)
		}
	}
}

func TestOneLineCap(t *testing.T) {
	long := strings.Repeat("ab ", 1000)
	if got := oneLine(long); len(got) > report.MaxDiagnosticBytes || !strings.HasPrefix(long, got) {
		t.Errorf("oneLine of %d bytes = %d bytes %q", len(long), len(got), got[:20])
	}
	// A cut never splits a character.
	wide := strings.Repeat("€", 300) // 3 bytes each
	got := oneLine(wide)
	if !utf8.ValidString(got) || len(got) != report.MaxDiagnosticBytes/3*3 {
		t.Errorf("oneLine of %d bytes of € = %d bytes", len(wide), len(got))
	}
}

func TestMessageIDAndAddress(t *testing.T) {
	for in, want := range map[string]string{
		"<a@b>": "a@b", " <a@b> ": "a@b", "a@b": "a@b", "<>": "", "": "", "<a b@c>": "", "a@b\r\nX: y": "",
	} {
		if got := messageID(in); got != want {
			t.Errorf("messageID(%q) = %q, want %q", in, got, want)
		}
	}
	tok := func(a string) (string, bool) { return bounceToken(a) }
	for in, want := range map[string]string{
		"bounce+abc@bounces.example.net":            "abc",
		"Postline <bounce+abc@bounces.example.net>": "abc",
		"<bounce+abc@bounces.example.net>":          "abc",
		"john@example.com":                          "",
		"":                                          "",
	} {
		if got := envelopeToken(tok, in); got != want {
			t.Errorf("envelopeToken(%q) = %q, want %q", in, got, want)
		}
	}
	if got := envelopeToken(nil, "bounce+abc@bounces.example.net"); got != "" {
		t.Errorf("envelopeToken without a TokenFunc = %q", got)
	}
}
