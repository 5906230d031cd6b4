package sender_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
)

const ambiguousMetric = "postline_sender_ambiguous_data_end_total"

// TestSessionAmbiguousDataEnd fails the reply to the final dot after the
// server has read the whole message (the script sees DATA only then): a
// hang-up or a stall there may follow a delivery, so the error must say
// Ambiguous, classify as Unknown (never a resent Transient) and count
// as a possible duplicate. Failures before the message is complete, or with
// a reply, must not.
func TestSessionAmbiguousDataEnd(t *testing.T) {
	tests := []struct {
		name      string
		opts      []smtptest.Option
		verb      string // where reply is scripted, for the second message only
		reply     smtptest.Reply
		cfg       sender.Config
		timeout   time.Duration // of the second send's context; 0 for none
		ambiguous bool
		class     failure.Class
		rule      string
		isTimeout bool
	}{
		{
			name: "hang-up after the final dot", verb: smtptest.VerbData, reply: smtptest.Reply{Disconnect: true},
			ambiguous: true, class: failure.Unknown, rule: failure.RuleAmbiguousDataEnd,
		},
		{
			name: "hang-up after the final dot (STARTTLS)", verb: smtptest.VerbData, reply: smtptest.Reply{Disconnect: true},
			opts: []smtptest.Option{smtptest.WithStartTLS()}, cfg: sender.Config{TLS: sender.TLSMandatory, InsecureSkipVerify: true},
			ambiguous: true, class: failure.Unknown, rule: failure.RuleAmbiguousDataEnd,
		},
		{
			name: "stall past SendTimeout after the final dot", verb: smtptest.VerbData, reply: smtptest.Reply{Delay: time.Minute},
			cfg:       sender.Config{SendTimeout: 150 * time.Millisecond},
			ambiguous: true, class: failure.Unknown, rule: failure.RuleAmbiguousDataEnd, isTimeout: true,
		},
		{
			name: "stall past the context deadline after the final dot", verb: smtptest.VerbData, reply: smtptest.Reply{Delay: time.Minute},
			timeout:   150 * time.Millisecond,
			ambiguous: true, class: failure.Unknown, rule: failure.RuleAmbiguousDataEnd, isTimeout: true,
		},
		{
			name: "stall past SendTimeout after the final dot (implicit TLS)", verb: smtptest.VerbData, reply: smtptest.Reply{Delay: time.Minute},
			opts: []smtptest.Option{smtptest.WithImplicitTLS()},
			// SendTimeout also bounds the next send's TLS handshake, which
			// takes longer than 150ms on a loaded machine under -race.
			cfg:       sender.Config{TLS: sender.TLSImplicit, InsecureSkipVerify: true, SendTimeout: time.Second},
			ambiguous: true, class: failure.Unknown, rule: failure.RuleAmbiguousDataEnd, isTimeout: true,
		},
		// Controls: the relay answered, or never had the message.
		{
			name: "rejection after the final dot", verb: smtptest.VerbData, reply: smtptest.Reply{Code: 451, Enhanced: "4.3.0", Text: "try later"},
			class: failure.Transient, rule: "mail-system-4xx",
		},
		{
			name: "hang-up at RCPT", verb: smtptest.VerbRcpt, reply: smtptest.Reply{Disconnect: true},
			class: failure.Transient, rule: failure.RuleConnectionLost,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var failID string
			var failData atomic.Int32 // DATA commands the server saw for the failing message
			opts := append(tt.opts, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbData && c.Arg == failID {
					failData.Add(1)
				}
				if c.Verb == tt.verb && c.Conn == 1 && (c.Verb != smtptest.VerbData || c.Arg == failID) &&
					(c.Verb != smtptest.VerbRcpt || c.Attempt == 2) {
					return &tt.reply
				}
				return nil
			}))
			srv := smtptest.NewServer(t, opts...)
			cfg := tt.cfg
			cfg.Name = "primary"
			relay, reg := newRelay(t, srv, cfg)
			if got := value(t, reg, ambiguousMetric, "provider", "primary"); got != 0 {
				t.Fatalf("%s = %v before any send, want a zero series", ambiguousMetric, got)
			}
			s := newSession(t, relay)

			if err := s.Send(context.Background(), simpleJob(t, 1)); err != nil {
				t.Fatalf("first send: %v", err)
			}
			second := simpleJob(t, 2)
			failID = second.MessageID
			ctx, cancel := context.WithCancel(context.Background())
			if tt.timeout > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tt.timeout)
			}
			err := s.Send(ctx, second)
			cancel()
			var se *sender.Error
			if !errors.As(err, &se) {
				t.Fatalf("second send: %v, want *sender.Error", err)
			}
			if tt.ambiguous && failData.Load() != 1 {
				t.Errorf("the server saw the message's DATA %d times in one Send, want 1: it was sent again at once", failData.Load())
			}
			if se.Ambiguous != tt.ambiguous || se.SMTPAmbiguous() != tt.ambiguous {
				t.Errorf("Ambiguous = %v (SMTPAmbiguous %v), want %v; error %v", se.Ambiguous, se.SMTPAmbiguous(), tt.ambiguous, err)
			}
			if tt.ambiguous && (se.Stage != sender.StageBody || se.Code != 0) {
				t.Errorf("ambiguous error at stage %s code %d, want stage body code 0", se.Stage, se.Code)
			}
			v := failure.Classify(err)
			if v.Class != tt.class || v.Rule != tt.rule || v.Timeout != tt.isTimeout {
				t.Errorf("Classify = {Class:%s Rule:%s Timeout:%v}, want {%s %s %v}", v.Class, v.Rule, v.Timeout, tt.class, tt.rule, tt.isTimeout)
			}
			if tt.ambiguous && v.Class == failure.Transient {
				t.Errorf("an ambiguous end of DATA is Transient: it would be resent and likely duplicated")
			}
			if got := strings.Contains(err.Error(), "may have accepted"); got != tt.ambiguous {
				t.Errorf("Error() %q: says the relay may have the message = %v, want %v", err, got, tt.ambiguous)
			}
			want := 0.0
			if tt.ambiguous {
				want = 1
			}
			if got := value(t, reg, ambiguousMetric, "provider", "primary"); got != want {
				t.Errorf("%s{provider=primary} = %v, want %v", ambiguousMetric, got, want)
			}

			// The connection that failed is not trusted again.
			if err := s.Send(context.Background(), simpleJob(t, 3)); err != nil {
				t.Fatalf("third send: %v", err)
			}
			if tt.ambiguous && srv.Connections() != 2 {
				t.Errorf("Connections = %d, want 2: the connection without a final reply must be dropped", srv.Connections())
			}
		})
	}
}

// TestAmbiguousMetricSeriesAtStart checks every relay exports its series
// of possible duplicates at zero before its first send.
func TestAmbiguousMetricSeriesAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, name := range []string{"primary", "backup"} {
		if _, err := sender.New(sender.Config{Name: name, Host: "127.0.0.1", Port: 2525}, nil, reg); err != nil {
			t.Fatalf("New(%s): %v", name, err)
		}
	}
	if n := testutil.CollectAndCount(reg, ambiguousMetric); n != 2 {
		t.Fatalf("%s has %d series, want 2 (one per relay)", ambiguousMetric, n)
	}
	for _, name := range []string{"primary", "backup"} {
		if got := value(t, reg, ambiguousMetric, "provider", name); got != 0 {
			t.Errorf("%s{provider=%s} = %v, want 0", ambiguousMetric, name, got)
		}
	}
}
