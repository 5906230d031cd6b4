package inbound_test

import (
	"bufio"
	"bytes"
	"net"
	"net/smtp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/bounce"
	"github.com/postline/postline/internal/inbound"
)

// dialFrom opens a connection to addr from the loopback address local
// (127.0.0.0/8 is all loopback on Linux, so each stands for a client) and
// returns it with its greeting line.
func dialFrom(t *testing.T, local, addr string) (net.Conn, string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", local, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("greeting to %s: %v", local, err)
	}
	return c, strings.TrimSpace(line)
}

// TestSessionLimits: past MaxSessionsPerClient from one address, and past
// MaxSessions in all, a connection is greeted 421 4.7.0 and closed; a
// closed session frees its place.
func TestSessionLimits(t *testing.T) {
	h := start(t, inbound.Config{MaxSessions: 3, MaxSessionsPerClient: 2})
	a1, g := dialFrom(t, "127.0.0.2", h.addr)
	if !strings.HasPrefix(g, "220 ") {
		t.Fatalf("first session: %q, want 220", g)
	}
	a2, _ := dialFrom(t, "127.0.0.2", h.addr)
	a3, g := dialFrom(t, "127.0.0.2", h.addr)
	if !strings.HasPrefix(g, "421 4.7.0 ") || !strings.Contains(g, "your address") {
		t.Errorf("third session from one address: %q, want 421 4.7.0 naming the address", g)
	}
	if _, err := a3.Read(make([]byte, 1)); err == nil {
		t.Error("the refused connection stayed open")
	}
	b1, g := dialFrom(t, "127.0.0.3", h.addr)
	if !strings.HasPrefix(g, "220 ") {
		t.Errorf("a session from another address: %q, want 220", g)
	}
	c1, g := dialFrom(t, "127.0.0.4", h.addr)
	if !strings.HasPrefix(g, "421 4.7.0 ") || strings.Contains(g, "your address") {
		t.Errorf("a fourth session in all: %q, want 421 4.7.0 for the total", g)
	}
	for _, want := range []struct {
		reason string
		n      float64
	}{{"per_client", 1}, {"total", 1}} {
		if n := counter(t, h.reg, "postline_admission_refused_total", "reason", want.reason); n != want.n {
			t.Errorf("refused_total{reason=%s} = %v, want %v", want.reason, n, want.n)
		}
	}
	if n := gaugeValue(t, h.reg, "postline_admission_open", "limit", inbound.SessionsLimit); n != 3 {
		t.Errorf("admission_open{limit=smtp_sessions} = %v, want 3", n)
	}

	// A session that ends (QUIT) gives its place back: the server closes
	// the connection, so wait for that before dialling again.
	if _, err := a1.Write([]byte("QUIT\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = a1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(a1).ReadString(0); err == nil {
		t.Fatal("the server did not close the session after QUIT")
	}
	waitGauge(t, h.reg, 2)
	a4, g := dialFrom(t, "127.0.0.2", h.addr)
	if !strings.HasPrefix(g, "220 ") {
		t.Errorf("a session after one ended: %q, want 220", g)
	}
	// A client that just drops the connection frees its place too.
	_ = b1.Close()
	waitGauge(t, h.reg, 2)
	for _, c := range []net.Conn{a1, a2, a3, a4, c1} {
		_ = c.Close()
	}
	waitGauge(t, h.reg, 0)
	if problems, err := testutil.GatherAndLint(h.reg); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}

// waitGauge waits until the server counts want open sessions.
func waitGauge(t *testing.T, reg *prometheus.Registry, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := gaugeValue(t, reg, "postline_admission_open", "limit", inbound.SessionsLimit)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("open sessions = %v after 5s, want %v", n, want)
		}
		time.Sleep(5 * time.Millisecond) // a poll with a deadline: the close is the server's
	}
}

// plainCounter returns the value of a counter without labels, -1 if absent.
func plainCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
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
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// bigDSN is a Postfix DSN whose returned original is whole (message/rfc822)
// with a body of about size bytes: the returned mail had an attachment.
func bigDSN(t *testing.T, size int) []byte {
	t.Helper()
	raw := fixture(t, "postfix-hard.eml")
	raw = bytes.Replace(raw, []byte("Content-Type: text/rfc822-headers"), []byte("Content-Type: message/rfc822"), 1)
	end := []byte("MIME-Version: 1.0\n\n--4Z1q2w3e4r.1741083302/mx.sender.example--")
	i := bytes.Index(raw, end)
	if i < 0 {
		t.Fatal("postfix-hard.eml changed: no end of the returned header")
	}
	var body bytes.Buffer
	body.WriteString("MIME-Version: 1.0\nContent-Type: application/pdf\nContent-Transfer-Encoding: base64\n\n")
	line := strings.Repeat("QUJDRGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo", 3)[:76] + "\n"
	for body.Len() < size {
		body.WriteString(line)
	}
	body.WriteString("\n--4Z1q2w3e4r.1741083302/mx.sender.example--\n")
	return append(append([]byte(nil), raw[:i]...), body.Bytes()...)
}

// TestLongReportParsedFromItsStart: a DSN that returns a 1.5 MiB original
// is read whole (it is under MaxMessageBytes) but only its first
// MaxParseBytes are held; the report read from them is the one bounce
// reads from the whole message.
func TestLongReportParsedFromItsStart(t *testing.T) {
	h := start(t, inbound.Config{})
	raw := bigDSN(t, 1536<<10)
	whole, err := bounce.Parse(bytes.ReplaceAll(raw, []byte("\n"), []byte("\r\n")))
	if err != nil || len(whole.Reports) != 1 {
		t.Fatalf("bounce.Parse of the whole message = %+v, %v", whole, err)
	}
	if err := send(t, h.addr, "bounce+tok-long@"+domain, raw); err != nil {
		t.Fatal(err)
	}
	got := h.rec.all()
	if len(got) != 1 || len(got[0]) != 1 {
		t.Fatalf("applied %v, want one report", got)
	}
	want := whole.Reports[0]
	want.Token = "tok-long"
	if got[0][0] != want {
		t.Errorf("report from the held start %+v\nwant (from the whole) %+v", got[0][0], want)
	}
	if n := plainCounter(t, h.reg, "postline_inbound_messages_cut_total"); n != 1 {
		t.Errorf("messages_cut_total = %v, want 1", n)
	}
}

// TestOversizeIsRefusedAfterItsEnd: a message over MaxMessageBytes, with
// MaxParseBytes far below it, is answered 552 and the session goes on.
func TestOversizeIsRefusedAfterItsEnd(t *testing.T) {
	h := start(t, inbound.Config{MaxMessageBytes: 256 << 10, MaxParseBytes: 16 << 10})
	c, err := smtp.Dial(h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tt := range []struct {
		rcpt string
		msg  []byte
		code int
	}{
		{"bounce+tok-big@" + domain, bigDSN(t, 300<<10), 552},
		{"bounce+tok-postfix-hard@" + domain, fixture(t, "postfix-hard.eml"), 250},
	} {
		if err := c.Mail(""); err != nil {
			t.Fatal(err)
		}
		if err := c.Rcpt(tt.rcpt); err != nil {
			t.Fatal(err)
		}
		w, err := c.Data()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(tt.msg); err != nil {
			t.Fatal(err)
		}
		err = w.Close()
		if got := code(err); (tt.code == 250 && err != nil) || (tt.code != 250 && got != tt.code) {
			t.Errorf("%d bytes to %s: %v, want %d", len(tt.msg), tt.rcpt, err, tt.code)
		}
	}
	if err := c.Quit(); err != nil {
		t.Error(err)
	}
	if got := h.rec.all(); len(got) != 1 || got[0][0].Token != "tok-postfix-hard" {
		t.Errorf("applied %v, want the small report only", got)
	}
	if n := counter(t, h.reg, "postline_inbound_messages_total", "result", inbound.ResultTooLarge); n != 1 {
		t.Errorf("messages{result=too_large} = %v, want 1", n)
	}
}
