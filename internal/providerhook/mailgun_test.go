package providerhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/report"
)

const testSigningKey = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"

// testNow is the clock of the Mailgun tests.
var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// mailgunBody wraps event-data in a webhook body signed with key at ts.
func mailgunBody(t testing.TB, key string, ts time.Time, token string, eventData []byte) []byte {
	t.Helper()
	timestamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(timestamp + token))
	return marshal(t, map[string]any{
		"signature": map[string]string{
			"timestamp": timestamp,
			"token":     token,
			"signature": hex.EncodeToString(mac.Sum(nil)),
		},
		"event-data": json.RawMessage(eventData),
	})
}

// tokens makes distinct 50-character tokens, like Mailgun's.
type tokens struct{ n int }

func (tk *tokens) next() string {
	tk.n++
	return fmt.Sprintf("%050d", tk.n)
}

func newTestMailgun(t *testing.T, reports Reports, mutate func(*MailgunConfig)) *Mailgun {
	t.Helper()
	cfg := MailgunConfig{
		SigningKey: testSigningKey,
		Token:      bounceToken,
		NowFunc:    func() time.Time { return testNow },
	}
	if mutate != nil {
		mutate(&cfg)
	}
	h, err := NewMailgun(cfg, reports, discard(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestMailgunPublishedSamples(t *testing.T) {
	yes, no := boolPtr(true), boolPtr(false)
	tests := []struct {
		file string
		want report.Report
	}{
		{"delivered.json", report.Report{
			Kind: report.Delivered, Source: report.SourceMailgun,
			MessageID: "20180622182958.1.48906CB188F1A454@exmple.org", Recipient: "john@example.com",
			Code: 250, Diagnostic: "OK", RemoteMTA: "aspmx.l.example.com",
			At: time.UnixMicro(1529692199626182).UTC(),
		}},
		// 605 is Mailgun's own code, not a server's reply; the text comes
		// from the description as the message is empty.
		{"failed-permanent.json", report.Report{
			Kind: report.Bounced, Source: report.SourceMailgun,
			MessageID: "20180622211249.1.2A6098970A380E12@example.org", Recipient: "slava@mailgun.com",
			Diagnostic: "Not delivering to previously bounced address", Permanent: yes, Hard: true,
			At: time.UnixMicro(1529701969818328).UTC(),
		}},
		{"failed-permanent-delayed-bounce.json", report.Report{
			Kind: report.Bounced, Source: report.SourceMailgun,
			MessageID: "20221019211537.93011d31ea99c5a8@test.com", Recipient: "christest123@test.com",
			Status: "5.1.1", Code: 550,
			Diagnostic: "550-5.1.1 The email account that you tried to reach does not exist.", Permanent: yes,
			At: time.UnixMicro(1666214138404668).UTC(),
		}},
		{"failed-temporary.json", report.Report{
			Kind: report.Delayed, Source: report.SourceMailgun,
			MessageID: "20221006142837.1618e01bf42da9fa@test.com", Recipient: "test@test.com",
			Status: "4.7.652", Code: 451,
			Diagnostic: "4.7.652 The mail server [xxx.xxx.xxx.xxx] has exceeded the maximum number of connections.",
			RemoteMTA:  "hotmail-com.olc.protection.outlook.com", Permanent: no,
			At: time.UnixMicro(1665066523871657).UTC(),
		}},
		{"complained.json", report.Report{
			Kind: report.Complained, Source: report.SourceMailgun,
			MessageID: "20130718032413.263EE2E0926@example.com", Recipient: "foo@example.com",
			At: time.UnixMicro(1377214260049634).UTC(),
		}},
	}
	var tk tokens
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var s sink
			h := newTestMailgun(t, &s, nil)
			body := mailgunBody(t, testSigningKey, testNow, tk.next(), sample(t, "mailgun/"+tt.file))
			if code := post(t, h, body); code != http.StatusOK {
				t.Fatalf("status = %d, want 200", code)
			}
			got := s.got()
			if len(got) != 1 || len(got[0]) != 1 {
				t.Fatalf("ApplySigned got %+v, want one report", got)
			}
			if !reflect.DeepEqual(got[0][0], tt.want) {
				t.Errorf("report:\n got  %+v\n want %+v", got[0][0], tt.want)
			}
			if n := requests(t, h.metrics, resultOK); n != 1 {
				t.Errorf("requests_total{result=ok} = %v, want 1", n)
			}
		})
	}
}

// TestMailgunFailureVerdicts: a failed event's severity and reason decide
// what it resolves and whether Mailgun's verdict is a hard bounce. The
// events are the published failure samples with their severity, reason and
// delivery status set as Mailgun sends them for each reason.
func TestMailgunFailureVerdicts(t *testing.T) {
	yes, no := boolPtr(true), boolPtr(false)
	status := func(code int, message, description string) map[string]any {
		return map[string]any{"code": code, "message": message, "description": description}
	}
	tests := []struct {
		name, file, severity, reason string
		deliveryStatus               map[string]any // nil: the sample's own
		kind                         report.Kind
		permanent                    *bool
		hard                         bool
	}{
		{"bounce", "failed-permanent.json", "permanent", "bounce",
			status(550, "5.1.1 The email account that you tried to reach does not exist.", ""), report.Bounced, yes, true},
		{"bounce without a status", "failed-permanent.json", "permanent", "bounce",
			status(550, "Requested action not taken: mailbox unavailable", ""), report.Bounced, yes, true},
		{"bounce refused by the relay's policy", "failed-permanent.json", "permanent", "bounce",
			status(550, "Relay Not Permitted", ""), report.Bounced, yes, true},
		{"previously bounced", "failed-permanent.json", "permanent", "suppress-bounce", nil, report.Bounced, yes, true},
		{"in upper case", "failed-permanent.json", "PERMANENT", "Suppress-Bounce", nil, report.Bounced, yes, true},
		{"previously unsubscribed", "failed-permanent.json", "permanent", "suppress-unsubscribe",
			status(606, "", "Not delivering to previously unsubscribed address"), report.Bounced, yes, false},
		{"previously complained", "failed-permanent.json", "permanent", "suppress-complaint",
			status(607, "", "Not delivering to a user who marked your messages as spam"), report.Bounced, yes, false},
		{"gave up retrying", "failed-permanent.json", "permanent", "old",
			status(452, "4.2.2 The email account that you tried to reach is over quota.", "Too old"), report.Bounced, yes, false},
		{"esp block", "failed-permanent.json", "permanent", "espblock",
			status(554, "5.7.1 Message rejected as spam", ""), report.Bounced, yes, false},
		{"delayed bounce", "failed-permanent-delayed-bounce.json", "permanent", "generic", nil, report.Bounced, yes, false},
		{"temporary", "failed-temporary.json", "temporary", "generic", nil, report.Delayed, no, false},
		{"temporary esp block", "failed-temporary.json", "temporary", "espblock",
			status(421, "4.7.0 Try again later", ""), report.Delayed, no, false},
		{"no severity", "failed-permanent.json", "", "bounce", nil, report.Bounced, nil, false},
	}
	var tk tokens
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc map[string]any
			if err := json.Unmarshal(sample(t, "mailgun/"+tt.file), &doc); err != nil {
				t.Fatal(err)
			}
			doc["severity"], doc["reason"] = tt.severity, tt.reason
			if tt.deliveryStatus != nil {
				doc["delivery-status"] = tt.deliveryStatus
			}
			var s sink
			h := newTestMailgun(t, &s, nil)
			if code := post(t, h, mailgunBody(t, testSigningKey, testNow, tk.next(), marshal(t, doc))); code != http.StatusOK {
				t.Fatalf("status = %d, want 200", code)
			}
			got := s.got()
			if len(got) != 1 || len(got[0]) != 1 {
				t.Fatalf("ApplySigned got %+v, want one report", got)
			}
			r := got[0][0]
			if r.Kind != tt.kind || !reflect.DeepEqual(r.Permanent, tt.permanent) || r.Hard != tt.hard || r.Recipient != doc["recipient"] {
				t.Errorf("report = %+v (permanent %s), want kind %s, permanent %s, hard %t",
					r, ptrString(r.Permanent), tt.kind, ptrString(tt.permanent), tt.hard)
			}
		})
	}
}

// TestMailgunComplaintsAndUnsubscribes: a complaint is a report with its
// recipient and Message-ID and nothing of a bounce; an unsubscribe is not a
// report (the suppression it asks for is the operator's).
func TestMailgunComplaintsAndUnsubscribes(t *testing.T) {
	var s sink
	h := newTestMailgun(t, &s, nil)
	if code := post(t, h, mailgunBody(t, testSigningKey, testNow, "complaint-1", sample(t, "mailgun/complained.json"))); code != http.StatusOK {
		t.Fatalf("complained: status = %d", code)
	}
	var doc map[string]any
	if err := json.Unmarshal(sample(t, "mailgun/complained.json"), &doc); err != nil {
		t.Fatal(err)
	}
	doc["event"] = "unsubscribed"
	if code := post(t, h, mailgunBody(t, testSigningKey, testNow, "unsubscribe-1", marshal(t, doc))); code != http.StatusOK {
		t.Fatalf("unsubscribed: status = %d", code)
	}
	got := s.got()
	if len(got) != 1 || len(got[0]) != 1 {
		t.Fatalf("ApplySigned got %+v, want the complaint only", got)
	}
	if r := got[0][0]; r.Kind != report.Complained || r.Recipient != "foo@example.com" || r.MessageID == "" ||
		r.Permanent != nil || r.Hard || r.Status != "" || r.Code != 0 {
		t.Errorf("complaint = %+v", r)
	}
	if n := requests(t, h.metrics, resultIgnored); n != 1 {
		t.Errorf("requests_total{result=ignored} = %v, want 1 (the unsubscribe)", n)
	}
}

// TestMailgunToken: envelope.sender names the token.
func TestMailgunToken(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(sample(t, "mailgun/failed-temporary.json"), &doc); err != nil {
		t.Fatal(err)
	}
	doc["envelope"].(map[string]any)["sender"] = "bounce+tok-77@bounces.example.net"
	var s sink
	h := newTestMailgun(t, &s, nil)
	if code := post(t, h, mailgunBody(t, testSigningKey, testNow, "tok-a", marshal(t, doc))); code != http.StatusOK {
		t.Fatalf("status = %d", code)
	}
	if got := s.got(); len(got) != 1 || got[0][0].Token != "tok-77" {
		t.Errorf("reports = %+v, want token tok-77", got)
	}
}

func TestMailgunRefused(t *testing.T) {
	event := sample(t, "mailgun/failed-permanent.json")
	tests := []struct {
		name   string
		body   func(t *testing.T) []byte
		code   int
		result string
	}{
		{"wrong key", func(t *testing.T) []byte {
			return mailgunBody(t, "key-other", testNow, strings.Repeat("a", 50), event)
		}, http.StatusUnauthorized, resultBadSignature},
		{"tampered token", func(t *testing.T) []byte {
			b := mailgunBody(t, testSigningKey, testNow, strings.Repeat("a", 50), event)
			return bytes.Replace(b, []byte(strings.Repeat("a", 50)), []byte(strings.Repeat("b", 50)), 1)
		}, http.StatusUnauthorized, resultBadSignature},
		{"tampered timestamp", func(t *testing.T) []byte {
			b := mailgunBody(t, testSigningKey, testNow, strings.Repeat("a", 50), event)
			ts := strconv.FormatInt(testNow.Unix(), 10)
			return bytes.Replace(b, []byte(ts), []byte(strconv.FormatInt(testNow.Unix()+1, 10)), 1)
		}, http.StatusUnauthorized, resultBadSignature},
		{"signature not hex", func(t *testing.T) []byte {
			return marshal(t, map[string]any{
				"signature":  map[string]string{"timestamp": "1", "token": "t", "signature": "zz"},
				"event-data": json.RawMessage(event),
			})
		}, http.StatusUnauthorized, resultBadSignature},
		{"expired", func(t *testing.T) []byte {
			return mailgunBody(t, testSigningKey, testNow.Add(-DefaultMailgunMaxAge-time.Second), strings.Repeat("a", 50), event)
		}, http.StatusUnauthorized, resultExpired},
		{"from the future", func(t *testing.T) []byte {
			return mailgunBody(t, testSigningKey, testNow.Add(DefaultMailgunMaxAge+time.Second), strings.Repeat("a", 50), event)
		}, http.StatusUnauthorized, resultExpired},
		{"no signature", func(t *testing.T) []byte {
			return marshal(t, map[string]any{"event-data": json.RawMessage(event)})
		}, http.StatusBadRequest, resultBadRequest},
		{"no event", func(t *testing.T) []byte {
			var hook map[string]json.RawMessage
			if err := json.Unmarshal(mailgunBody(t, testSigningKey, testNow, strings.Repeat("a", 50), event), &hook); err != nil {
				t.Fatal(err)
			}
			delete(hook, "event-data")
			return marshal(t, hook)
		}, http.StatusBadRequest, resultBadRequest},
		{"not json", func(*testing.T) []byte { return []byte("timestamp=1&token=t") },
			http.StatusBadRequest, resultBadRequest},
		{"too large", func(*testing.T) []byte { return bytes.Repeat([]byte(" "), DefaultMaxBodyBytes+1) },
			http.StatusRequestEntityTooLarge, resultBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s sink
			h := newTestMailgun(t, &s, nil)
			if code := post(t, h, tt.body(t)); code != tt.code {
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

// TestMailgunWindowEdge: a timestamp MaxAge old is still taken.
func TestMailgunWindowEdge(t *testing.T) {
	var s sink
	h := newTestMailgun(t, &s, func(c *MailgunConfig) { c.MaxAge = time.Minute })
	event := sample(t, "mailgun/delivered.json")
	if code := post(t, h, mailgunBody(t, testSigningKey, testNow.Add(-time.Minute), "edge-1", event)); code != http.StatusOK {
		t.Errorf("MaxAge old: status = %d, want 200", code)
	}
	if code := post(t, h, mailgunBody(t, testSigningKey, testNow.Add(-time.Minute-time.Second), "edge-2", event)); code != http.StatusUnauthorized {
		t.Errorf("past MaxAge: status = %d, want 401", code)
	}
}

// TestMailgunReplay: a token is taken once; a request whose apply failed
// may come again with its token.
func TestMailgunReplay(t *testing.T) {
	var s sink
	h := newTestMailgun(t, &s, nil)
	body := mailgunBody(t, testSigningKey, testNow, "replay-token", sample(t, "mailgun/complained.json"))
	if code := post(t, h, body); code != http.StatusOK {
		t.Fatalf("first: status = %d, want 200", code)
	}
	if code := post(t, h, body); code != http.StatusNotAcceptable {
		t.Errorf("replay: status = %d, want 406", code)
	}
	if len(s.got()) != 1 {
		t.Errorf("ApplySigned calls = %d, want 1", len(s.got()))
	}
	if n := requests(t, h.metrics, resultReplayed); n != 1 {
		t.Errorf("requests_total{result=replayed} = %v, want 1", n)
	}

	retry := mailgunBody(t, testSigningKey, testNow, "retry-token", sample(t, "mailgun/complained.json"))
	s.setErr(errApply)
	if code := post(t, h, retry); code != http.StatusServiceUnavailable {
		t.Errorf("apply failed: status = %d, want 503", code)
	}
	s.setErr(nil)
	if code := post(t, h, retry); code != http.StatusOK {
		t.Errorf("retry: status = %d, want 200", code)
	}
	if len(s.got()) != 2 {
		t.Errorf("ApplySigned calls = %d, want 2", len(s.got()))
	}
	if n := requests(t, h.metrics, resultApplyError); n != 1 {
		t.Errorf("requests_total{result=apply_error} = %v, want 1", n)
	}
}

// TestMailgunReplayConcurrent: of many copies of one request posted at
// once, exactly one is applied.
func TestMailgunReplayConcurrent(t *testing.T) {
	var s sink
	h := newTestMailgun(t, &s, nil)
	body := mailgunBody(t, testSigningKey, testNow, "concurrent", sample(t, "mailgun/delivered.json"))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { post(t, h, body) })
	}
	wg.Wait()
	if len(s.got()) != 1 {
		t.Errorf("ApplySigned calls = %d, want 1", len(s.got()))
	}
	if n := requests(t, h.metrics, resultReplayed); n != 15 {
		t.Errorf("requests_total{result=replayed} = %v, want 15", n)
	}
}

// TestMailgunIgnored: verified events without a recipient's fate.
func TestMailgunIgnored(t *testing.T) {
	var s sink
	h := newTestMailgun(t, &s, nil)
	var tk tokens
	for _, ev := range []string{
		`{"event":"opened","recipient":"a@example.com","timestamp":1377047343.042277}`,
		`{"event":"accepted","recipient":"a@example.com"}`,
		`{"event":"delivered"}`,
		`{}`,
	} {
		if code := post(t, h, mailgunBody(t, testSigningKey, testNow, tk.next(), []byte(ev))); code != http.StatusOK {
			t.Errorf("%s: status = %d, want 200", ev, code)
		}
	}
	if len(s.got()) != 0 {
		t.Errorf("ApplySigned got %+v", s.got())
	}
	if n := requests(t, h.metrics, resultIgnored); n != 4 {
		t.Errorf("requests_total{result=ignored} = %v, want 4", n)
	}
}

// TestMailgunConfigRedacted: the signing key shows in no printout, log or
// error of the config.
func TestMailgunConfigRedacted(t *testing.T) {
	cfg := MailgunConfig{SigningKey: testSigningKey, MaxAge: -1}.WithDefaults()
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "cfg", cfg)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "cfg", cfg)
	outs := map[string]string{
		"%v":   fmt.Sprintf("%v", cfg),
		"%+v":  fmt.Sprintf("%+v", cfg),
		"%#v":  fmt.Sprintf("%#v", cfg),
		"%s":   fmt.Sprintf("%s", cfg),
		"log":  logged.String(),
		"err":  cfg.Validate().Error(),
		"ptr":  fmt.Sprintf("%v", &cfg),
		"errN": fmt.Sprint(MailgunConfig{}.WithDefaults().Validate()),
	}
	for how, out := range outs {
		if strings.Contains(out, testSigningKey) || strings.Contains(out, "3ax6xnjp") {
			t.Errorf("%s shows the signing key: %s", how, out)
		}
	}
	if !strings.Contains(outs["%v"], redacted) || !strings.Contains(outs["log"], redacted) {
		t.Errorf("printouts do not say the key is redacted: %q, %q", outs["%v"], outs["log"])
	}
	if !strings.Contains(outs["err"], "MaxAge") || !strings.Contains(outs["errN"], "SigningKey") {
		t.Errorf("Validate errors do not name the fields: %q, %q", outs["err"], outs["errN"])
	}
}
