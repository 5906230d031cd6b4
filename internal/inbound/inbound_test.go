package inbound_test

import (
	"context"
	"errors"
	"fmt"
	"net/smtp"
	"net/textproto"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/bounce"
	"github.com/postline/postline/internal/inbound"
	"github.com/postline/postline/internal/report"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const domain = "bounces.postline.example"

// tokenOf accepts bounce+<token>@domain.
func tokenOf(addr string) (string, bool) {
	local, d, ok := strings.Cut(addr, "@")
	if !ok || !strings.EqualFold(d, domain) || !strings.HasPrefix(local, "bounce+") || len(local) == len("bounce+") {
		return "", false
	}
	return strings.TrimPrefix(local, "bounce+"), true
}

// recorder is a Reports that records what it is given, or fails.
type recorder struct {
	mu    sync.Mutex
	got   [][]report.Report
	fail  error
	block bool // wait for the context to end, then fail
}

func (r *recorder) ApplyReturned(ctx context.Context, rs []report.Report) error {
	r.mu.Lock()
	block := r.block
	r.mu.Unlock()
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.got = append(r.got, append([]report.Report(nil), rs...))
	return nil
}

func (r *recorder) all() [][]report.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]report.Report(nil), r.got...)
}

type harness struct {
	addr string
	rec  *recorder
	reg  *prometheus.Registry
}

func start(t *testing.T, cfg inbound.Config) harness {
	t.Helper()
	cfg.Addr, cfg.Domain = "127.0.0.1:0", domain
	rec := &recorder{}
	reg := prometheus.NewRegistry()
	s, err := inbound.New(cfg, nil, reg, tokenOf, rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	return harness{addr: s.Addr().String(), rec: rec, reg: reg}
}

// send delivers msg from the null sender to rcpt and returns the error
// of the first command refused (or of the dial).
func send(t *testing.T, addr, rcpt string, msg []byte) error {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Mail(""); err != nil {
		return err
	}
	if err := c.Rcpt(rcpt); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(msg); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile("../bounce/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// code returns the SMTP reply code of a refused command, 0 for none.
func code(err error) int {
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

func TestDSNToBounceAddress(t *testing.T) {
	h := start(t, inbound.Config{})
	if err := send(t, h.addr, "bounce+tok-postfix-hard@"+domain, fixture(t, "postfix-hard.eml")); err != nil {
		t.Fatal(err)
	}
	got := h.rec.all()
	if len(got) != 1 || len(got[0]) != 1 {
		t.Fatalf("applied %v, want one report", got)
	}
	r := got[0][0]
	if r.Token != "tok-postfix-hard" || r.Kind != report.Bounced || r.Status != "5.1.1" || r.Recipient != "nobody@recipient.example" {
		t.Errorf("report %+v", r)
	}
	if n := counter(t, h.reg, "postline_inbound_messages_total", "result", inbound.ResultReport); n != 1 {
		t.Errorf("messages{result=report} = %v, want 1", n)
	}
	if n := counter(t, h.reg, "postline_inbound_reports_total", "kind", string(report.Bounced)); n != 1 {
		t.Errorf("reports{kind=bounced} = %v, want 1", n)
	}
}

func TestComplaintToFeedbackAddress(t *testing.T) {
	h := start(t, inbound.Config{})
	if err := send(t, h.addr, "fbl@"+domain, fixture(t, "arf-yahoo.eml")); err != nil {
		t.Fatal(err)
	}
	// A built complaint whose original names no valid return path still
	// reaches the applier, without a token.
	raw, err := bounce.BuildARF(bounce.ARF{To: "fbl@" + domain, Date: time.Unix(1741623600, 0), ReturnPath: "someone@elsewhere.example",
		MessageID: "x@app.example", Recipients: []string{"reader@example.org"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := send(t, h.addr, "FBL@"+strings.ToUpper(domain), raw); err != nil {
		t.Fatal(err)
	}
	got := h.rec.all()
	if len(got) != 2 || len(got[0]) != 1 || len(got[1]) != 1 {
		t.Fatalf("applied %v, want two single reports", got)
	}
	if r := got[0][0]; r.Token != "tok-yahoo" || r.Kind != report.Complained || r.Recipient != "reader@yahoo.com" {
		t.Errorf("yahoo complaint %+v", r)
	}
	if r := got[1][0]; r.Token != "" || r.Kind != report.Complained || r.Recipient != "reader@example.org" {
		t.Errorf("complaint without a token %+v", r)
	}
}

func TestRefusals(t *testing.T) {
	h := start(t, inbound.Config{MaxMessageBytes: 4096})
	for _, rcpt := range []string{"someone@example.com", "bounce+@" + domain, "postmaster@" + domain, "bounce+tok@other.example", "bounce+tok@" + domain + ".evil.example"} {
		if err := send(t, h.addr, rcpt, fixture(t, "qmail.eml")); code(err) != 550 || !strings.Contains(err.Error(), "5.1.1") {
			t.Errorf("RCPT %s: %v, want 550 5.1.1", rcpt, err)
		}
	}
	big := append(fixture(t, "gmail.eml"), []byte(strings.Repeat("padding line of the returned body\r\n", 200))...)
	if err := send(t, h.addr, "bounce+tok-big@"+domain, big); code(err) != 552 {
		t.Errorf("oversize message: %v, want 552", err)
	}
	// Not a report: accepted, counted, not applied.
	if err := send(t, h.addr, "bounce+tok-vacation@"+domain, fixture(t, "vacation.eml")); err != nil {
		t.Errorf("auto-reply: %v, want 250", err)
	}
	if got := h.rec.all(); len(got) != 0 {
		t.Errorf("applied %v, want nothing", got)
	}
	for result, want := range map[string]float64{inbound.ResultTooLarge: 1, inbound.ResultNotReport: 1} {
		if n := counter(t, h.reg, "postline_inbound_messages_total", "result", result); n != want {
			t.Errorf("messages{result=%s} = %v, want %v", result, n, want)
		}
	}
}

func TestApplyErrorIsTemporary(t *testing.T) {
	h := start(t, inbound.Config{})
	h.rec.mu.Lock()
	h.rec.fail = errors.New("database down")
	h.rec.mu.Unlock()
	err := send(t, h.addr, "bounce+tok-exim@"+domain, fixture(t, "exim.eml"))
	if code(err) != 451 || !strings.Contains(err.Error(), "4.3.0") {
		t.Errorf("DATA with a failing applier: %v, want 451 4.3.0", err)
	}
	if n := counter(t, h.reg, "postline_inbound_messages_total", "result", inbound.ResultApplyError); n != 1 {
		t.Errorf("messages{result=apply_error} = %v, want 1", n)
	}
}

// TestApplyTimeout: an applier that does not return in ApplyTimeout gets
// its context cancelled and the message is answered 451.
func TestApplyTimeout(t *testing.T) {
	h := start(t, inbound.Config{ApplyTimeout: 50 * time.Millisecond})
	h.rec.mu.Lock()
	h.rec.block = true
	h.rec.mu.Unlock()
	err := send(t, h.addr, "bounce+tok-exim@"+domain, fixture(t, "exim.eml"))
	if code(err) != 451 {
		t.Errorf("DATA with a stuck applier: %v, want 451", err)
	}
}

// TestConcurrentSessions sends reports on several connections at once.
func TestConcurrentSessions(t *testing.T) {
	h := start(t, inbound.Config{})
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			raw, err := bounce.BuildDSN(bounce.DSN{Date: time.Unix(1741083302, 0), MessageID: fmt.Sprintf("m%d@app.example", i),
				Recipients: []report.Report{{Kind: report.Bounced, Recipient: fmt.Sprintf("r%d@example.org", i), Status: "5.1.1"}}})
			if err != nil {
				errs <- err
				return
			}
			errs <- send(t, h.addr, fmt.Sprintf("bounce+tok%d@%s", i, domain), raw)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	got := h.rec.all()
	if len(got) != n {
		t.Fatalf("applied %d messages, want %d", len(got), n)
	}
	for _, rs := range got {
		if want := "tok" + strings.TrimSuffix(strings.TrimPrefix(rs[0].Recipient, "r"), "@example.org"); rs[0].Token != want {
			t.Errorf("report %+v has token %q, want %q", rs[0], rs[0].Token, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  inbound.Config
		want string
	}{
		{inbound.Config{}, "Domain"},
		{inbound.Config{Domain: "a@b"}, "Domain"},
		{inbound.Config{Domain: domain, FeedbackLocalPart: "a+b"}, "FeedbackLocalPart"},
		{inbound.Config{Domain: domain, MaxMessageBytes: bounce.MaxReportBytes + 1}, "MaxMessageBytes"},
		{inbound.Config{Domain: domain, MaxRecipients: -1}, "MaxRecipients"},
		{inbound.Config{Domain: domain, ReadTimeout: -time.Second}, "ReadTimeout"},
		{inbound.Config{Domain: domain, MaxSessions: -1}, "MaxSessions"},
		{inbound.Config{Domain: domain, MaxSessions: 5, MaxSessionsPerClient: 6}, "MaxSessionsPerClient"},
		{inbound.Config{Domain: domain, MaxSessionsPerClient: -1}, "MaxSessionsPerClient"},
		{inbound.Config{Domain: domain, MaxMessageBytes: 4096, MaxParseBytes: 4097}, "MaxParseBytes"},
		{inbound.Config{Domain: domain, MaxParseBytes: -1}, "MaxParseBytes"},
	}
	for _, tt := range tests {
		err := tt.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	if err := (inbound.Config{Domain: domain}).WithDefaults().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	// Defaults never exceed the limits they sit under.
	small := inbound.Config{Domain: domain, MaxSessions: 4, MaxMessageBytes: 1000}.WithDefaults()
	if small.MaxSessionsPerClient != 4 || small.MaxParseBytes != 1000 {
		t.Errorf("defaults under small limits: MaxSessionsPerClient %d, MaxParseBytes %d; want 4 and 1000",
			small.MaxSessionsPerClient, small.MaxParseBytes)
	}
	if err := small.Validate(); err != nil {
		t.Errorf("defaults under small limits: %v", err)
	}
}

// counter returns the value of the counter name{label=value}, 0 if absent.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
