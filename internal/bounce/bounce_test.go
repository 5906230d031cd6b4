package bounce

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/report"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file       string
		typ        Type
		returnPath string
		reports    []report.Report
	}{
		{"postfix-hard.eml", TypeDSN, "bounce+tok-postfix-hard@bounces.postline.example", []report.Report{{
			Kind: report.Bounced, Source: report.SourceDSN, MessageID: "welcome.42@app.postline.example",
			Recipient: "nobody@recipient.example", Status: "5.1.1", Code: 550,
			Diagnostic: "550 5.1.1 <nobody@recipient.example>: Recipient address rejected: User unknown in virtual mailbox table",
			RemoteMTA:  "mx1.recipient.example", At: at("2025-03-04T10:15:02Z"),
		}}},
		{"postfix-delayed.eml", TypeDSN, "bounce+tok-postfix-delay@bounces.postline.example", []report.Report{{
			Kind: report.Delayed, Source: report.SourceDSN, MessageID: "invoice.7@app.postline.example",
			Recipient: "slow@busy.example", Status: "4.7.1", Code: 451,
			Diagnostic: "451 4.7.1 Greylisted, please try again later", RemoteMTA: "mx.busy.example", At: at("2025-03-05T14:00:07Z"),
		}}},
		{"gmail.eml", TypeDSN, "bounce+tok-gmail@bounces.postline.example", []report.Report{{
			Kind: report.Bounced, Source: report.SourceDSN, MessageID: "order.314@app.postline.example",
			Recipient: "no.such.user.42@gmail.com", Status: "5.1.1", Code: 550,
			Diagnostic: "550-5.1.1 The email account that you tried to reach does not exist. Please try double-checking the recipient's email address for typos or unnecessary spaces. For more information, go to https://support.google.com/mail/?p=NoSuchUser 41be03b00d2f7-b2a5e5e1c0csi1234567a12.245 - gsmtp",
			RemoteMTA:  "gmail-smtp-in.l.google.com", At: at("2025-03-07T09:02:03Z"),
		}}},
		{"outlook.eml", TypeDSN, "bounce+tok-outlook@bounces.postline.example", []report.Report{{
			Kind: report.Bounced, Source: report.SourceDSN, MessageID: "news.2025-03@app.postline.example",
			Recipient: "full.box@outlook.com", Status: "5.5.0", Code: 550,
			Diagnostic: "550 5.5.0 Requested action not taken: mailbox unavailable (S2017062302). [AM0PR01MB5678.eurprd01.prod.exchangelabs.com]",
			RemoteMTA:  "AM0PR01MB5678.eurprd01.prod.exchangelabs.com", At: at("2025-03-08T12:00:05Z"),
		}}},
		{"exim.eml", TypeUnstructured, "bounce+tok-exim@bounces.postline.example", []report.Report{{
			Kind: report.Bounced, Source: report.SourceUnstructured, MessageID: "reset.9@app.postline.example",
			Recipient: "gone@recipient.example", Status: "5.2.1", Code: 550,
			Diagnostic: "550 5.2.1 The email account that you tried to reach is disabled", At: at("2025-03-06T08:30:12Z"),
		}}},
		{"qmail.eml", TypeUnstructured, "bounce+tok-qmail@bounces.postline.example", []report.Report{{
			Kind: report.Bounced, Source: report.SourceUnstructured, MessageID: "digest.77@app.postline.example",
			Recipient: "left@oldhost.example", Status: "5.1.1",
			Diagnostic: "Sorry, no mailbox here by that name. (#5.1.1)", At: at("2025-03-09T07:45:10Z"),
		}, {
			Kind: report.Bounced, Source: report.SourceUnstructured, MessageID: "digest.77@app.postline.example",
			Recipient: "quota@oldhost.example", Status: "5.2.2", Code: 552,
			Diagnostic: "192.0.2.99 does not like recipient. Remote host said: 552 5.2.2 Mailbox quota exceeded Giving up on 192.0.2.99.",
			At:         at("2025-03-09T07:45:10Z"),
		}}},
		// RFC 5965 appendix B.2: no Return-Path in the original, so the
		// return path is the report's Original-Mail-From; the zone EDT is
		// read as UTC by net/mail.
		{"arf-rfc5965.eml", TypeARF, "somespammer@example.net", []report.Report{{
			Kind: report.Complained, Source: report.SourceARF, MessageID: "8787KJKJ3K4J3K4J3K4J3.mail@example.net",
			Recipient: "user@example.com", RemoteMTA: "mail.example.com", FeedbackType: "abuse", At: at("2005-03-08T17:40:36Z"),
		}}},
		// Yahoo's complaint feedback loop names no Original-Rcpt-To: the
		// recipient is the original's To.
		{"arf-yahoo.eml", TypeARF, "bounce+tok-yahoo@bounces.postline.example", []report.Report{{
			Kind: report.Complained, Source: report.SourceARF, MessageID: "sale.2025-spring.5@app.postline.example",
			Recipient: "reader@yahoo.com", FeedbackType: "abuse", At: at("2025-03-10T16:20:00Z"),
		}}},
		{"vacation.eml", TypeNotReport, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile("testdata/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkResult(res); err != nil {
				t.Fatal(err)
			}
			if res.Type != tt.typ || res.ReturnPath != tt.returnPath {
				t.Errorf("type %s, return path %q; want %s, %q", res.Type, res.ReturnPath, tt.typ, tt.returnPath)
			}
			if len(res.Reports) != len(tt.reports) {
				t.Fatalf("%d reports, want %d: %+v", len(res.Reports), len(tt.reports), res.Reports)
			}
			for i, want := range tt.reports {
				got := res.Reports[i]
				if !got.At.Equal(want.At) {
					t.Errorf("report %d: At %v, want %v", i, got.At, want.At)
				}
				got.At, want.At = time.Time{}, time.Time{}
				if got != want {
					t.Errorf("report %d:\n got %+v\nwant %+v", i, got, want)
				}
			}
			for _, r := range res.Reports {
				if strings.Contains(r.Diagnostic, "must never") || strings.Contains(r.Diagnostic, "may quote") ||
					strings.Contains(r.Diagnostic, "Spam Spam") || strings.Contains(r.Diagnostic, "link to reset") {
					t.Errorf("diagnostic quotes the body: %q", r.Diagnostic)
				}
			}
		})
	}
}

func TestParseCRLF(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/postfix-hard.eml")
	if err != nil {
		t.Fatal(err)
	}
	lf, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	crlf, err := Parse(bytes.ReplaceAll(raw, []byte("\n"), []byte("\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(crlf.Reports) != 1 || crlf.Reports[0] != lf.Reports[0] || crlf.ReturnPath != lf.ReturnPath {
		t.Errorf("CRLF parse %+v differs from LF parse %+v", crlf, lf)
	}
}

func TestParseBounds(t *testing.T) {
	t.Parallel()
	if _, err := Parse(make([]byte, MaxReportBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Parse(MaxReportBytes+1) error = %v, want ErrTooLarge", err)
	}
	// A DSN with more recipient groups than MaxRecipients yields
	// MaxRecipients reports.
	rs := make([]report.Report, MaxRecipients)
	for i := range rs {
		rs[i] = report.Report{Kind: report.Bounced, Recipient: "r@example.com", Status: "5.1.1"}
	}
	raw, err := BuildDSN(DSN{Date: at("2025-01-01T00:00:00Z"), Recipients: rs})
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(raw, []byte("\r\nFinal-Recipient"))
	group := raw[i : bytes.Index(raw[i+2:], []byte("\r\n\r\n"))+i+2]
	raw = bytes.Replace(raw, group, bytes.Repeat(group, 3), 1)
	res, err := Parse(raw)
	if err != nil || len(res.Reports) != MaxRecipients {
		t.Errorf("%d reports from %d groups, %v; want %d", len(res.Reports), 3*MaxRecipients, err, MaxRecipients)
	}
	// Multiparts nested deeper than MaxDepth are not followed.
	deep := []byte("Content-Type: multipart/report; report-type=delivery-status; boundary=b0\r\n\r\n")
	for d := 1; d <= MaxDepth+2; d++ {
		deep = append(deep, []byte("--b"+string(rune('0'+d-1))+"\r\nContent-Type: multipart/mixed; boundary=b"+string(rune('0'+d))+"\r\n\r\n")...)
	}
	deep = append(deep, []byte("--b"+string(rune('0'+MaxDepth+2))+"\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; x\r\n\r\nFinal-Recipient: rfc822; a@b.example\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n")...)
	if res, err := Parse(deep); err != nil || res.Type != TypeNotReport {
		t.Errorf("a delivery status %d levels deep: %s, %v; want not a report", MaxDepth+2, res.Type, err)
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"  550 5.1.1\r\n  user\tunknown \x00\x07", 100, "550 5.1.1 user unknown"},
		{"a\u202eb\xffc", 100, "abc"},
		{"héllo wörld", 6, "héllo"},
		{"héllo", 2, "h"},
		{"ab cd", 4, "ab c"},
		{"ab cd", 3, "ab"},
		{"", 10, ""},
	}
	for _, tt := range tests {
		if got := OneLine(tt.in, tt.max); got != tt.want {
			t.Errorf("OneLine(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

func TestParseProseVariants(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, raw string
		kind      report.Kind
		recipient string
		status    string
	}{
		{"gmail text", "From: Mail Delivery Subsystem <mailer-daemon@googlemail.com>\nSubject: Delivery Status Notification (Failure)\n\n" +
			"Delivery to the following recipient failed permanently:\n\n     lost@example.jp\n\nTechnical details of permanent failure:\n" +
			"The error that the other server returned was:\n550 5.1.1 <lost@example.jp>... User Unknown\n\n----- Original message -----\n\nMessage-ID: <m1@a.example>\n",
			report.Bounced, "lost@example.jp", "5.1.1"},
		{"exim delay", "From: Mail Delivery System <Mailer-Daemon@mx.example.org>\nSubject: Warning: message 1abc-000 delayed 24 hours\nX-Failed-Recipients: later@example.org\n\n" +
			"This message was created automatically by mail delivery software.\nA message that you sent has not yet been delivered to one or more of its\nrecipients after more than 24 hours on the queue on mx.example.org.\n\n" +
			"  later@example.org\n    host mx.example.org [192.0.2.1]: 451 4.4.1 try later\n\nNo action is required on your part. Delivery attempts will continue for\nsome time.\n",
			report.Delayed, "later@example.org", "4.4.1"},
		{"header MIME cannot read", "From: Mail Delivery System <MAILER-DAEMON@mx.example.org>\nSubject: Mail delivery failed\nX-Bad Name: 1\n\n" +
			"This message was created automatically by mail delivery software.\n\nA message that you sent could not be delivered to one or more of its\n" +
			"recipients. This is a permanent error. The following address(es) failed:\n\n  who@example.org\n    550 5.1.1 unknown user\n",
			report.Bounced, "who@example.org", "5.1.1"},
		{"no recipient named", "From: MAILER-DAEMON@mx.example.org\nSubject: Returned mail: see transcript for details\n\nSomething went wrong: 554 5.7.1 rejected by policy\n",
			report.Bounced, "", "5.7.1"},
	}
	for _, tt := range tests {
		res, err := Parse([]byte(tt.raw))
		if err != nil || res.Type != TypeUnstructured || len(res.Reports) != 1 {
			t.Errorf("%s: %+v, %v; want one unstructured report", tt.name, res, err)
			continue
		}
		if err := checkResult(res); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if r := res.Reports[0]; r.Kind != tt.kind || r.Recipient != tt.recipient || r.Status != tt.status {
			t.Errorf("%s: %+v; want %s to %q with %s", tt.name, r, tt.kind, tt.recipient, tt.status)
		}
	}
}
