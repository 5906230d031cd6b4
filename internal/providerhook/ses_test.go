package providerhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/report"
)

func TestSESPublishedSamples(t *testing.T) {
	yes := boolPtr(true)
	tests := []struct {
		file string
		want []report.Report
	}{
		{"notification-bounce-dsn.json", []report.Report{{
			Kind: report.Bounced, Source: report.SourceSES, MessageID: "custom-message-ID",
			Recipient: "jane@example.com", Status: "5.1.1", Code: 550,
			Diagnostic: "550 5.1.1 <jane@example.com>... User", RemoteMTA: "127.0.2.0",
			Permanent: yes, Hard: true, At: at("2016-01-27T14:59:38.237Z"),
		}}},
		{"notification-bounce-no-dsn.json", []report.Report{{
			Kind: report.Bounced, Source: report.SourceSES, MessageID: "custom-message-ID",
			Recipient: "jane@example.com", RemoteMTA: "127.0.2.0", Permanent: yes, Hard: true,
			At: at("2016-01-27T14:59:38.237Z"),
		}, {
			Kind: report.Bounced, Source: report.SourceSES, MessageID: "custom-message-ID",
			Recipient: "richard@example.com", RemoteMTA: "127.0.2.0", Permanent: yes, Hard: true,
			At: at("2016-01-27T14:59:38.237Z"),
		}}},
		{"notification-complaint-feedback.json", []report.Report{{
			Kind: report.Complained, Source: report.SourceSES, MessageID: "custom-message-ID",
			Recipient: "richard@example.com", FeedbackType: "abuse", At: at("2016-01-27T14:59:38.237Z"),
		}}},
		{"notification-complaint-no-feedback.json", []report.Report{{
			Kind: report.Complained, Source: report.SourceSES, MessageID: "custom-message-ID",
			Recipient: "richard@example.com", At: at("2016-01-27T14:59:38.237Z"),
		}}},
		{"notification-delivery.json", []report.Report{{
			Kind: report.Delivered, Source: report.SourceSES, MessageID: "custom-message-ID",
			Recipient: "jane@example.com", Code: 250, Diagnostic: "250 ok: Message 64111812 accepted",
			RemoteMTA: "127.0.2.0", At: at("2016-01-27T14:59:38.237Z"),
		}}},
		// Event publishing records: these mails had no Message-ID of their
		// own, so commonHeaders.messageId is SES's id and is not taken.
		{"event-bounce.json", []report.Report{{
			Kind: report.Bounced, Source: report.SourceSES, Recipient: "recipient@example.com",
			Status: "5.1.1", Code: 550, Diagnostic: "550 5.1.1 user unknown", Permanent: yes, Hard: true,
			At: at("2017-08-05T00:41:02.669Z"),
		}}},
		{"event-complaint.json", []report.Report{{
			Kind: report.Complained, Source: report.SourceSES, Recipient: "recipient@example.com",
			FeedbackType: "abuse", At: at("2017-08-05T00:41:02.669Z"),
		}}},
		{"event-delivery.json", []report.Report{{
			Kind: report.Delivered, Source: report.SourceSES, Recipient: "recipient@example.com",
			Status: "2.6.0", Code: 250, Diagnostic: "250 2.6.0 Message received",
			At: at("2016-10-19T23:21:04.133Z"),
		}}},
		{"event-delivery-delay.json", []report.Report{{
			Kind: report.Delayed, Source: report.SourceSES, Recipient: "recipient@example.com",
			Status: "4.4.1", Code: 421, Diagnostic: "421 4.4.1 Unable to connect to remote host",
			At: at("2020-06-16T00:25:40.095Z"),
		}}},
	}
	srv := newSNSServer(t)
	for _, version := range []string{"1", "2"} {
		for _, tt := range tests {
			t.Run(tt.file+"/v"+version, func(t *testing.T) {
				var s sink
				h := newTestSES(t, srv.sesConfig(), &s)
				msg := srv.sesNotificationMessage(t, tt.file, version)
				if code := post(t, h, marshal(t, msg)); code != http.StatusOK {
					t.Fatalf("status = %d, want 200", code)
				}
				got := s.got()
				if len(got) != 1 {
					t.Fatalf("ApplySigned calls = %d, want 1", len(got))
				}
				if !reflect.DeepEqual(got[0], tt.want) {
					t.Errorf("reports:\n got  %+v\n want %+v", got[0], tt.want)
				}
				if n := requests(t, h.metrics, resultOK); n != 1 {
					t.Errorf("requests_total{result=ok} = %v, want 1", n)
				}
			})
		}
	}
}

// sesBounceDoc is the published bounce notification with a DSN, its
// bounce's type and subtype set and its one recipient replaced by rcpt.
func sesBounceDoc(t testing.TB, bounceType, subType string, rcpt map[string]any) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(sample(t, "ses/notification-bounce-dsn.json"), &doc); err != nil {
		t.Fatal(err)
	}
	b := doc["bounce"].(map[string]any)
	b["bounceType"], b["bounceSubType"] = bounceType, subType
	b["bouncedRecipients"] = []any{rcpt}
	return marshal(t, doc)
}

// TestSESBounceVerdicts: SES's own bounce type decides what a bounce
// resolves and whether SES calls it hard, with or without a DSN's status.
func TestSESBounceVerdicts(t *testing.T) {
	yes, no := boolPtr(true), boolPtr(false)
	noDSN := map[string]any{"emailAddress": "jane@example.com"}
	dsn := func(status, diag string) map[string]any {
		return map[string]any{"emailAddress": "jane@example.com", "action": "failed", "status": status, "diagnosticCode": diag}
	}
	tests := []struct {
		name, bounceType, subType string
		rcpt                      map[string]any
		kind                      report.Kind
		permanent                 *bool
		hard                      bool
		status                    string
		code                      int
	}{
		// Permanent: SES says the address takes no mail, DSN or not.
		{"permanent general without a DSN", "Permanent", "General", noDSN, report.Bounced, yes, true, "", 0},
		{"permanent general with a DSN", "Permanent", "General", dsn("5.1.1", "smtp; 550 5.1.1 user unknown"), report.Bounced, yes, true, "5.1.1", 550},
		{"permanent no email", "Permanent", "NoEmail", noDSN, report.Bounced, yes, true, "", 0},
		{"permanent reply without a status", "Permanent", "General", map[string]any{"emailAddress": "jane@example.com",
			"diagnosticCode": "smtp; 550 Requested action not taken"}, report.Bounced, yes, true, "", 550},
		{"permanent suppressed", "Permanent", "Suppressed", map[string]any{"emailAddress": "jane@example.com",
			"diagnosticCode": "Amazon SES has suppressed sending to this address because it has a recent history of bouncing as an invalid address."},
			report.Bounced, yes, true, "", 0},
		{"permanent on the account's suppression list", "Permanent", "OnAccountSuppressionList", noDSN, report.Bounced, yes, true, "", 0},
		{"permanent in upper case", "PERMANENT", "GENERAL", noDSN, report.Bounced, yes, true, "", 0},
		{"permanent without a subtype", "Permanent", "", noDSN, report.Bounced, yes, true, "", 0},
		// Permanent but undetermined: the rules decide from the reply.
		{"permanent undetermined", "Permanent", "Undetermined", noDSN, report.Bounced, yes, false, "", 0},
		// Transient: soft, and it resolves nothing.
		{"transient general (an auto-reply)", "Transient", "General", noDSN, report.Delayed, no, false, "", 0},
		{"transient mailbox full", "Transient", "MailboxFull", dsn("5.2.2", "smtp; 552 5.2.2 Mailbox full"), report.Delayed, no, false, "5.2.2", 552},
		{"transient message too large", "Transient", "MessageTooLarge", dsn("5.3.4", "smtp; 552 5.3.4 Message size exceeds fixed limit"), report.Delayed, no, false, "5.3.4", 552},
		{"transient content rejected", "Transient", "ContentRejected", dsn("5.7.1", "smtp; 554 5.7.1 Message rejected"), report.Delayed, no, false, "5.7.1", 554},
		{"transient attachment rejected", "Transient", "AttachmentRejected", noDSN, report.Delayed, no, false, "", 0},
		// Undetermined or unknown: no verdict; the rules decide from the reply.
		{"undetermined", "Undetermined", "Undetermined", noDSN, report.Bounced, nil, false, "", 0},
		{"undetermined with a DSN", "Undetermined", "Undetermined", dsn("5.1.1", "smtp; 550 5.1.1 user unknown"), report.Bounced, nil, false, "5.1.1", 550},
		{"a type SES may add", "Sideways", "General", noDSN, report.Bounced, nil, false, "", 0},
	}
	srv := newSNSServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := envelope(t, "notification")
			msg.Subject = nil
			msg.Message = string(sesBounceDoc(t, tt.bounceType, tt.subType, tt.rcpt))
			srv.sign(t, msg, "2", testKey())
			var s sink
			h := newTestSES(t, srv.sesConfig(), &s)
			if code := post(t, h, marshal(t, msg)); code != http.StatusOK {
				t.Fatalf("status = %d, want 200", code)
			}
			got := s.got()
			if len(got) != 1 || len(got[0]) != 1 {
				t.Fatalf("ApplySigned got %+v, want one report", got)
			}
			r := got[0][0]
			if r.Kind != tt.kind || !reflect.DeepEqual(r.Permanent, tt.permanent) || r.Hard != tt.hard ||
				r.Status != tt.status || r.Code != tt.code || r.Recipient != "jane@example.com" || r.MessageID != "custom-message-ID" {
				t.Errorf("report = %+v (permanent %v), want kind %s, permanent %v, hard %t, status %q, code %d",
					r, ptrString(r.Permanent), tt.kind, ptrString(tt.permanent), tt.hard, tt.status, tt.code)
			}
			if n := testutil.ToFloat64(h.metrics.reports.WithLabelValues(providerSES, string(tt.kind))); n != 1 {
				t.Errorf("reports_total{ses,%s} = %v, want 1", tt.kind, n)
			}
		})
	}
}

// ptrString prints a *bool as true, false or nil.
func ptrString(b *bool) string {
	if b == nil {
		return "nil"
	}
	return strconv.FormatBool(*b)
}

// TestSESToken: the envelope sender (mail.source) names the token, with or
// without a display name.
func TestSESToken(t *testing.T) {
	srv := newSNSServer(t)
	for _, source := range []string{
		"bounce+tok123@bounces.example.net",
		"Postline <bounce+tok123@bounces.example.net>",
	} {
		var doc map[string]any
		if err := json.Unmarshal(sample(t, "ses/notification-bounce-dsn.json"), &doc); err != nil {
			t.Fatal(err)
		}
		doc["mail"].(map[string]any)["source"] = source
		msg := envelope(t, "notification")
		msg.Subject = nil
		msg.Message = string(marshal(t, doc))
		srv.sign(t, msg, "2", testKey())
		var s sink
		h := newTestSES(t, srv.sesConfig(), &s)
		if code := post(t, h, marshal(t, msg)); code != http.StatusOK {
			t.Fatalf("source %q: status = %d", source, code)
		}
		if got := s.got(); len(got) != 1 || got[0][0].Token != "tok123" {
			t.Errorf("source %q: reports = %+v, want token tok123", source, got)
		}
	}
}

func TestSESRefused(t *testing.T) {
	srv := newSNSServer(t)
	tests := []struct {
		name   string
		cfg    func(*SESConfig)
		msg    func(t *testing.T) []byte
		code   int
		result string
	}{
		{"tampered message", nil, func(t *testing.T) []byte {
			m := srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2")
			m.Message = strings.Replace(m.Message, "jane@example.com", "mallory@example.com", 1)
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"tampered timestamp", nil, func(t *testing.T) []byte {
			m := srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "1")
			m.Timestamp = "2030-01-01T00:00:00.000Z"
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"subject added", nil, func(t *testing.T) []byte {
			m := srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2")
			subject := "added"
			m.Subject = &subject
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"signed by another key", nil, func(t *testing.T) []byte {
			m := envelope(t, "notification")
			m.Message = string(sample(t, "ses/notification-bounce-dsn.json"))
			srv.sign(t, m, "2", otherKey())
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"version 1 signature claimed as version 2", nil, func(t *testing.T) []byte {
			m := srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "1")
			m.SignatureVersion = "2"
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"unknown signature version", nil, func(t *testing.T) []byte {
			m := srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2")
			m.SignatureVersion = "3"
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"published placeholder signature", nil, func(t *testing.T) []byte {
			m := envelope(t, "notification")
			m.SigningCertURL = srv.URL + "/cert.pem"
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"cert host not allowed", func(c *SESConfig) {
			c.SNSHostPattern = DefaultSNSHostPattern
		}, func(t *testing.T) []byte {
			return marshal(t, srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2"))
		}, http.StatusForbidden, resultBadSignature},
		{"cert host by another name", nil, func(t *testing.T) []byte {
			m := srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2")
			m.SigningCertURL = strings.Replace(m.SigningCertURL, "127.0.0.1", "localhost", 1)
			signWith(t, m, testKey())
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"cert over http", nil, func(t *testing.T) []byte {
			m := srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2")
			m.SigningCertURL = strings.Replace(m.SigningCertURL, "https://", "http://", 1)
			signWith(t, m, testKey())
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"cert url with user info", nil, func(t *testing.T) []byte {
			m := srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2")
			m.SigningCertURL = strings.Replace(m.SigningCertURL, "https://", "https://sns.us-east-1.amazonaws.com@", 1)
			signWith(t, m, testKey())
			return marshal(t, m)
		}, http.StatusForbidden, resultBadSignature},
		{"topic not allowed", func(c *SESConfig) {
			c.TopicARNs = []string{"arn:aws:sns:us-west-2:123456789012:Other"}
		}, func(t *testing.T) []byte {
			return marshal(t, srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2"))
		}, http.StatusForbidden, resultForbidden},
		{"not json", nil, func(*testing.T) []byte { return []byte("Type=Notification") },
			http.StatusBadRequest, resultBadRequest},
		{"unknown type", nil, func(t *testing.T) []byte {
			m := srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2")
			m.Type = "Other"
			return marshal(t, m)
		}, http.StatusBadRequest, resultBadRequest},
		{"too large", nil, func(*testing.T) []byte {
			return bytes.Repeat([]byte(" "), DefaultMaxBodyBytes+1)
		}, http.StatusRequestEntityTooLarge, resultBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := srv.sesConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			var s sink
			h := newTestSES(t, cfg, &s)
			if code := post(t, h, tt.msg(t)); code != tt.code {
				t.Errorf("status = %d, want %d", code, tt.code)
			}
			if got := s.got(); len(got) != 0 {
				t.Errorf("ApplySigned got %+v from a refused request", got)
			}
			if n := requests(t, h.metrics, tt.result); n != 1 {
				t.Errorf("requests_total{result=%s} = %v, want 1", tt.result, n)
			}
		})
	}
}

// TestSESTopicAllowed: an allow-listed topic is taken.
func TestSESTopicAllowed(t *testing.T) {
	srv := newSNSServer(t)
	cfg := srv.sesConfig()
	cfg.TopicARNs = []string{"arn:aws:sns:us-west-2:123456789012:MyTopic"}
	var s sink
	h := newTestSES(t, cfg, &s)
	if code := post(t, h, marshal(t, srv.sesNotificationMessage(t, "notification-delivery.json", "2"))); code != http.StatusOK {
		t.Fatalf("status = %d, want 200", code)
	}
	if len(s.got()) != 1 {
		t.Errorf("ApplySigned calls = %d, want 1", len(s.got()))
	}
}

// TestSESRetries: a failed apply or an unavailable certificate answers 503
// so SNS retries; the retry then goes through.
func TestSESRetries(t *testing.T) {
	srv := newSNSServer(t)
	var s sink
	h := newTestSES(t, srv.sesConfig(), &s)
	body := marshal(t, srv.sesNotificationMessage(t, "notification-bounce-dsn.json", "2"))

	srv.failCert.Store(true)
	if code := post(t, h, body); code != http.StatusServiceUnavailable {
		t.Errorf("certificate unavailable: status = %d, want 503", code)
	}
	srv.failCert.Store(false)
	s.setErr(errApply)
	if code := post(t, h, body); code != http.StatusServiceUnavailable {
		t.Errorf("apply failed: status = %d, want 503", code)
	}
	s.setErr(nil)
	if code := post(t, h, body); code != http.StatusOK {
		t.Errorf("retry: status = %d, want 200", code)
	}
	if len(s.got()) != 1 {
		t.Errorf("ApplySigned calls = %d, want 1", len(s.got()))
	}
	for result, want := range map[string]float64{resultCertError: 1, resultApplyError: 1, resultOK: 1} {
		if n := requests(t, h.metrics, result); n != want {
			t.Errorf("requests_total{result=%s} = %v, want %v", result, n, want)
		}
	}
}

// TestSESCertCache: the certificate is fetched once, however many messages
// it signs.
func TestSESCertCache(t *testing.T) {
	srv := newSNSServer(t)
	var s sink
	h := newTestSES(t, srv.sesConfig(), &s)
	for range 5 {
		if code := post(t, h, marshal(t, srv.sesNotificationMessage(t, "notification-delivery.json", "2"))); code != http.StatusOK {
			t.Fatalf("status = %d, want 200", code)
		}
	}
	if n := srv.certFetches.Load(); n != 1 {
		t.Errorf("certificate fetches = %d, want 1", n)
	}
}

func TestSESSubscription(t *testing.T) {
	srv := newSNSServer(t)
	confirmation := func(t *testing.T, subscribeURL string) []byte {
		m := envelope(t, "subscription-confirmation")
		m.SubscribeURL = subscribeURL
		srv.sign(t, m, "1", testKey())
		return marshal(t, m)
	}
	tests := []struct {
		name     string
		noAuto   bool
		url      func() string
		code     int
		result   string
		confirms int64
	}{
		{"confirmed", false, func() string { return srv.URL + "/confirm?Action=ConfirmSubscription&Token=2336412f37" },
			http.StatusOK, resultOK, 1},
		{"auto-confirm off", true, func() string { return srv.URL + "/confirm?Token=2336412f37" },
			http.StatusOK, resultIgnored, 0},
		{"subscribe url host not allowed", false, func() string {
			return strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/confirm?Token=2336412f37"
		}, http.StatusForbidden, resultForbidden, 0},
		{"subscribe url over http", false, func() string {
			return strings.Replace(srv.URL, "https://", "http://", 1) + "/confirm?Token=2336412f37"
		}, http.StatusForbidden, resultForbidden, 0},
		{"confirmation refused", false, func() string { return srv.URL + "/confirm" },
			http.StatusBadGateway, resultConfirmError, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := srv.confirms.Load()
			cfg := srv.sesConfig()
			cfg.NoAutoConfirm = tt.noAuto
			var s sink
			h := newTestSES(t, cfg, &s)
			if code := post(t, h, confirmation(t, tt.url())); code != tt.code {
				t.Errorf("status = %d, want %d", code, tt.code)
			}
			if n := srv.confirms.Load() - before; n != tt.confirms {
				t.Errorf("confirmations = %d, want %d", n, tt.confirms)
			}
			if n := requests(t, h.metrics, tt.result); n != 1 {
				t.Errorf("requests_total{result=%s} = %v, want 1", tt.result, n)
			}
		})
	}

	t.Run("forged confirmation is not followed", func(t *testing.T) {
		before := srv.confirms.Load()
		m := envelope(t, "subscription-confirmation")
		m.SubscribeURL = srv.URL + "/confirm?Token=2336412f37"
		srv.sign(t, m, "1", otherKey())
		var s sink
		h := newTestSES(t, srv.sesConfig(), &s)
		if code := post(t, h, marshal(t, m)); code != http.StatusForbidden {
			t.Errorf("status = %d, want 403", code)
		}
		if n := srv.confirms.Load() - before; n != 0 {
			t.Errorf("confirmations = %d, want 0", n)
		}
	})

	t.Run("unsubscribe confirmation", func(t *testing.T) {
		m := envelope(t, "unsubscribe-confirmation")
		srv.sign(t, m, "2", testKey())
		var s sink
		h := newTestSES(t, srv.sesConfig(), &s)
		if code := post(t, h, marshal(t, m)); code != http.StatusOK {
			t.Errorf("status = %d, want 200", code)
		}
		if n := requests(t, h.metrics, resultIgnored); n != 1 {
			t.Errorf("requests_total{result=ignored} = %v, want 1", n)
		}
	})
}

// TestSESNotSES: a verified notification that is not an SES document (the
// published SNS example, "Hello world!" with a Subject) is taken and
// ignored; so is an SES type without a recipient's fate.
func TestSESNotSES(t *testing.T) {
	srv := newSNSServer(t)
	var s sink
	h := newTestSES(t, srv.sesConfig(), &s)
	hello := envelope(t, "notification")
	srv.sign(t, hello, "1", testKey())
	send := envelope(t, "notification")
	send.Subject = nil
	send.Message = `{"eventType":"Send","mail":{"source":"bounce+x@bounces.example.net"},"send":{}}`
	srv.sign(t, send, "2", testKey())
	for _, m := range []*snsMessage{hello, send} {
		if code := post(t, h, marshal(t, m)); code != http.StatusOK {
			t.Errorf("status = %d, want 200", code)
		}
	}
	if len(s.got()) != 0 {
		t.Errorf("ApplySigned got %+v", s.got())
	}
	if n := requests(t, h.metrics, resultIgnored); n != 2 {
		t.Errorf("requests_total{result=ignored} = %v, want 2", n)
	}
}

func TestSESMethod(t *testing.T) {
	srv := newSNSServer(t)
	h := newTestSES(t, srv.sesConfig(), &sink{})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: status = %d, want 405", w.Code)
	}
}

// TestStringToSign: the canonical text of the guide's own examples.
func TestStringToSign(t *testing.T) {
	subject := "My subject"
	n := snsMessage{Type: "Notification", Message: "My Test Message",
		MessageID: "4d4dc071-ddbf-465d-bba8-08f81c89da64", Subject: &subject,
		Timestamp: "2019-01-31T04:37:04.321Z",
		TopicArn:  "arn:aws:sns:us-east-2:123456789012:s4-MySNSTopic-1G1WEFCOXTC0P"}
	want := "Message\nMy Test Message\nMessageId\n4d4dc071-ddbf-465d-bba8-08f81c89da64\nSubject\nMy subject\n" +
		"Timestamp\n2019-01-31T04:37:04.321Z\nTopicArn\narn:aws:sns:us-east-2:123456789012:s4-MySNSTopic-1G1WEFCOXTC0P\nType\nNotification\n"
	if got, err := n.stringToSign(); err != nil || got != want {
		t.Errorf("Notification:\n got %q, %v\nwant %q", got, err, want)
	}
	c := snsMessage{Type: "SubscriptionConfirmation", Message: "My Test Message",
		MessageID:    "3d891288-136d-417f-bc05-901c108273ee",
		SubscribeURL: "https://sns.us-east-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-east-2:123456789012:s4-MySNSTopic-1G1WEFCOXTC0P&Token=233...",
		Timestamp:    "2019-01-31T19:25:13.719Z", Token: "233...",
		TopicArn: "arn:aws:sns:us-east-2:123456789012:s4-MySNSTopic-1G1WEFCOXTC0P"}
	want = "Message\nMy Test Message\nMessageId\n3d891288-136d-417f-bc05-901c108273ee\nSubscribeURL\n" +
		"https://sns.us-east-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-east-2:123456789012:s4-MySNSTopic-1G1WEFCOXTC0P&Token=233...\n" +
		"Timestamp\n2019-01-31T19:25:13.719Z\nToken\n233...\nTopicArn\narn:aws:sns:us-east-2:123456789012:s4-MySNSTopic-1G1WEFCOXTC0P\nType\nSubscriptionConfirmation\n"
	if got, err := c.stringToSign(); err != nil || got != want {
		t.Errorf("SubscriptionConfirmation:\n got %q, %v\nwant %q", got, err, want)
	}
}

func TestDefaultSNSHostPattern(t *testing.T) {
	v, err := newSNSVerifier(regexp.MustCompile(DefaultSNSHostPattern), http.DefaultClient, DefaultFetchTimeout, 1)
	if err != nil {
		t.Fatal(err)
	}
	for raw, ok := range map[string]bool{
		"https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem": true,
		"https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-x.pem":                            true,
		"https://sns.us-west-2.amazonaws.com:443/x.pem":                                                      true,
		"http://sns.us-west-2.amazonaws.com/x.pem":                                                           false,
		"https://sns.us-west-2.amazonaws.com.evil.example/x.pem":                                             false,
		"https://evil.example/sns.us-west-2.amazonaws.com/x.pem":                                             false,
		"https://sns.us-west-2.amazonaws.com@evil.example/x.pem":                                             false,
		"https://x@sns.us-west-2.amazonaws.com/x.pem":                                                        false,
		"https://SNS.us-west-2.amazonaws.com/x.pem":                                                          false,
		"https://sqs.us-west-2.amazonaws.com/x.pem":                                                          false,
		"https://sns.us_west.amazonaws.com/x.pem":                                                            false,
		"": false,
	} {
		if err := v.allowedURL(raw); (err == nil) != ok {
			t.Errorf("allowedURL(%q) = %v, want allowed %t", raw, err, ok)
		}
	}
}
