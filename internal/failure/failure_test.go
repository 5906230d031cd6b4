package failure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/wneessen/go-mail"
)

func TestClassifyReply(t *testing.T) {
	tests := []struct {
		code       int
		enhanced   string
		text       string
		class      Class
		provider   bool
		rule       string
		retryAfter time.Duration
	}{
		// Auth.
		{530, "5.7.0", "Authentication required", Auth, true, "auth-required", 0},
		{534, "5.7.9", "Authentication mechanism is too weak", Auth, true, "auth-mechanism-too-weak", 0},
		{535, "5.7.8", "Username and Password not accepted", Auth, true, "auth-credentials-invalid", 0},
		{535, "", "authentication failed", Auth, true, "auth-credentials-invalid", 0},
		{538, "5.7.11", "Encryption required for requested authentication mechanism", Auth, true, "auth-encryption-required", 0},

		// Throttling.
		{421, "4.7.0", "Try again later, closing connection", Throttled, true, "policy-4xx", 0},
		{421, "4.7.0", "Too many concurrent SMTP connections; try again in 92 seconds", Throttled, true, "throttle-text", 92 * time.Second},
		{450, "4.2.1", "The user you are trying to contact is receiving mail at a rate that prevents additional messages from being delivered", Throttled, false, "mailbox-rate", 0},
		{452, "4.4.5", "per second limit exceeded", Throttled, true, "congestion", 0},
		{450, "4.7.1", "Greylisted, please try again in 300 seconds", Throttled, false, "greylisted", 5 * time.Minute},
		{451, "4.7.1", "Please try again later (greylisting)", Throttled, false, "greylisted", 0},
		{452, "", "Rate limit: per second limit reached, retry in 5 minutes", Throttled, true, "throttle-text", 5 * time.Minute},
		{454, "4.7.0", "Throttling failure: Maximum sending rate exceeded", Throttled, true, "throttle-text", 0},
		{451, "4.7.1", "Greylisted, please try again later", Throttled, false, "greylisted", 0},
		{451, "", "Too many messages, slow down", Throttled, true, "throttle-text", 0},
		{550, "5.7.1", "Temporary rate limit, try again in 60 seconds", Throttled, true, "temporary-rate-limit", 60 * time.Second},
		{554, "", "Throttled: sending too fast, retry later", Throttled, true, "temporary-rate-limit", 0},
		{550, "5.4.5", "Daily user sending quota exceeded.", Throttled, true, "sending-quota", 0},
		{550, "5.7.1", "Message refused, try again in 30 seconds", Throttled, true, "retry-hint-5xx", 30 * time.Second},
		{554, "", "Service refused; Retry-After: 120", Throttled, true, "retry-hint-5xx", 2 * time.Minute},
		{550, "5.1.1", "No such user, try again in 5 minutes", Permanent, false, "recipient-unknown", 0},
		{552, "5.2.2", "Mailbox full, try again in 1 hour", Permanent, false, "mailbox-full-5xx", 0},
		{554, "5.6.0", "Message content rejected, retry in 10 minutes", Permanent, false, "permanent-default", 0},
		{550, "5.7.1", "Message refused, try again later", Permanent, false, "policy-5xx", 0},

		// Transient.
		{421, "", "Service not available, closing transmission channel", Transient, true, "service-unavailable", 0},
		{421, "4.4.2", "Idle timeout", Transient, true, "service-unavailable", 0},
		{451, "4.3.0", "Temporary server error. Please try again later", Transient, true, "mail-system-4xx", 0},
		{452, "4.3.1", "Insufficient system storage", Transient, true, "mail-system-4xx", 0},
		{454, "4.7.0", "Temporary authentication failure", Transient, true, "auth-temporary", 0},
		{454, "", "TLS not available due to temporary reason", Transient, true, "tls-unavailable", 0},
		{452, "4.2.2", "Mailbox full", Transient, false, "mailbox-full", 0},
		{452, "4.5.3", "Too many recipients", Transient, false, "too-many-recipients", 0},
		{450, "4.1.1", "Recipient address temporarily unavailable", Transient, false, "transient-default", 0},
		{451, "", "Local error in processing, wait 2 min", Transient, false, "transient-default", 2 * time.Minute},
		{451, "5.7.1", "class digit disagrees with the code", Transient, false, "transient-default", 0},

		// Permanent.
		{550, "5.1.1", "The email account that you tried to reach does not exist", Permanent, false, "recipient-unknown", 0},
		{552, "", "Message size exceeds fixed maximum message size", Permanent, false, "permanent-default", 0},
		{552, "5.2.2", "Mailbox quota exceeded", Permanent, false, "mailbox-full-5xx", 0},
		{552, "5.5.3", "Too many recipients, try again later", Permanent, false, "permanent-default", 0},
		{553, "", "Requested action not taken: mailbox name not allowed", Permanent, false, "permanent-default", 0},
		{554, "5.7.1", "Message rejected as spam", Permanent, false, "policy-5xx", 0},
		{554, "", "Transaction failed", Permanent, false, "permanent-default", 0},
		{550, "5.7.1", "Relay access denied", Auth, true, "relay-denied", 0},
		{554, "5.7.1", "<ada@example.com>: Relay access denied", Auth, true, "relay-denied", 0},
		{550, "", "we do not relay, unable to relay for example.com", Auth, true, "relay-denied", 0},

		// Not a failure reply.
		{250, "2.0.0", "OK", Unknown, false, RuleUnmatched, 0},
		{0, "", "", Unknown, false, RuleUnmatched, 0},
	}
	for set, classify := range replyClassifiers(t) {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%d %s %s", set, tt.code, tt.enhanced, tt.text), func(t *testing.T) {
				v := classify(tt.code, tt.enhanced, tt.text)
				if v.Class != tt.class || v.RelayFault != tt.provider || v.Rule != tt.rule || v.RetryAfter != tt.retryAfter {
					t.Errorf("ClassifyReply = {Class:%s RelayFault:%v Rule:%s RetryAfter:%s}, want {%s %v %s %s}",
						v.Class, v.RelayFault, v.Rule, v.RetryAfter, tt.class, tt.provider, tt.rule, tt.retryAfter)
				}
				if v.Code != tt.code || v.Timeout {
					t.Errorf("Code %d Timeout %v, want %d false", v.Code, v.Timeout, tt.code)
				}
			})
		}
	}
}

// reachableExamples are a reply for every default row, which the row
// must match.
var reachableExamples = map[string][3]any{ // rule -> code, enhanced, text
	"auth-required":             {530, "", ""},
	"auth-mechanism-too-weak":   {534, "", ""},
	"auth-credentials-invalid":  {535, "", ""},
	"auth-encryption-required":  {538, "", ""},
	"mailbox-rate":              {450, "4.2.1", "receiving too fast"},
	"greylisted":                {450, "4.7.1", "greylisted"},
	"mailbox-full":              {452, "4.2.2", ""},
	"too-many-recipients":       {452, "", "Too many recipients"},
	"congestion":                {452, "4.4.5", ""},
	"throttle-text":             {450, "", "throttled"},
	"auth-temporary":            {454, "", "Temporary authentication failure"},
	"policy-4xx":                {450, "4.7.1", ""},
	"mail-system-4xx":           {451, "4.3.0", ""},
	"service-unavailable":       {421, "", ""},
	"tls-unavailable":           {454, "", ""},
	"blocked-4xx":               {451, "", "Blocked by policy"},
	"transient-default":         {451, "", ""},
	"relay-denied":              {554, "", "Relaying denied"},
	"temporary-rate-limit":      {550, "", "rate limited, try again later"},
	"sending-quota":             {550, "", "Daily sending quota exceeded"},
	"retry-hint-5xx":            {550, "5.7.1", "Message refused, try again in 30 seconds"},
	"mailbox-rate-5xx":          {550, "5.2.1", "receiving mail at a rate that prevents delivery"},
	"sender-address-invalid":    {553, "5.1.7", ""},
	"sender-domain-invalid":     {550, "5.1.8", ""},
	"recipient-unknown":         {550, "5.1.1", ""},
	"recipient-domain-invalid":  {550, "5.1.2", ""},
	"recipient-address-invalid": {501, "5.1.3", ""},
	"recipient-moved":           {550, "5.1.6", ""},
	"recipient-null-mx":         {556, "5.1.10", ""},
	"mailbox-disabled":          {550, "5.2.1", ""},
	"mailbox-full-5xx":          {552, "5.2.2", ""},
	"policy-5xx":                {554, "5.7.1", ""},
	"policy-text":               {554, "", "Rejected as spam"},
	"sender-rejected-text":      {553, "", "Sender address rejected"},
	"mailbox-full-text":         {552, "", "Quota exceeded"},
	"mailbox-disabled-text":     {550, "", "This mailbox is disabled"},
	"recipient-unknown-text":    {550, "", "User unknown"},
	"permanent-default":         {550, "", ""},
}

// TestRulesAllReachable makes sure every default row is exercised: a row
// shadowed by an earlier one would be dead data.
func TestRulesAllReachable(t *testing.T) {
	names := map[string]bool{}
	for _, r := range Default().Rules() {
		if names[r.Name] {
			t.Errorf("rule name %q used twice", r.Name)
		}
		names[r.Name] = true
		ex, ok := reachableExamples[r.Name]
		if !ok {
			t.Errorf("rule %q has no example here", r.Name)
			continue
		}
		if v := ClassifyReply(ex[0].(int), ex[1].(string), ex[2].(string)); v.Rule != r.Name || v.Class != r.Class || v.RelayFault != r.RelayFault {
			t.Errorf("example for %q matched %q (%s, provider %v)", r.Name, v.Rule, v.Class, v.RelayFault)
		}
		if b := Default().ClassifyBounce(ex[0].(int), ex[1].(string), ex[2].(string)); b != (Bounce{Type: r.Bounce, Rule: r.Name, Suppress: r.Suppress}) {
			t.Errorf("example for %q as a bounce = %+v, want the row's %s/%v", r.Name, b, r.Bounce, r.Suppress)
		}
	}
	for name := range reachableExamples {
		if !names[name] {
			t.Errorf("example for unknown rule %q", name)
		}
	}
}

func TestClassifyReplyEnhancedFromText(t *testing.T) {
	v := ClassifyReply(421, "", "4.7.0 Try again later")
	if v.Enhanced != "4.7.0" || v.Rule != "policy-4xx" {
		t.Errorf("ClassifyReply(421, \"\", \"4.7.0 ...\") = %+v, want Enhanced 4.7.0, rule policy-4xx", v)
	}
	if v := ClassifyReply(421, "4.7.10", ""); v.Rule != "policy-4xx" {
		t.Errorf("4.7.10 matched %q, want policy-4xx (prefix by components)", v.Rule)
	}
	if v := ClassifyReply(452, "4.4.50", ""); v.Rule != "transient-default" {
		t.Errorf("4.4.50 matched %q, want transient-default (4.4.5 is not a prefix of it)", v.Rule)
	}
	if v := ClassifyReply(550, "4.7.1", "x"); v.Enhanced != "" {
		t.Errorf("Enhanced = %q, want a class mismatch dropped", v.Enhanced)
	}
}

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		text string
		want time.Duration
		ok   bool
	}{
		{"try again in 92 seconds", 92 * time.Second, true},
		{"4.7.0 Please try again in 92 seconds.", 92 * time.Second, true},
		{"retry in 5 minutes", 5 * time.Minute, true},
		{"Retry-After: 30", 30 * time.Second, true},
		{"throttled; retry-after: 45s", 45 * time.Second, true},
		{"Retry-After: 2 minutes", 2 * time.Minute, true},
		{"wait 2 min", 2 * time.Minute, true},
		{"please wait 10 secs", 10 * time.Second, true},
		{"Try again after 30s", 30 * time.Second, true},
		{"try again in 1.5 minutes", 90 * time.Second, true},
		{"come back in 1 hour", time.Hour, true},
		{"TRY AGAIN IN 2 HRS", 2 * time.Hour, true},
		{"retry in 7 hours", MaxRetryAfter, true},
		{"try again in 99999999999999999999999 seconds", MaxRetryAfter, true},
		{"try again in 0 seconds, then try again in 20 seconds", 20 * time.Second, true},
		{"try again later", 0, false},
		{"", 0, false},
		{"try again in 92", 0, false},               // no unit
		{"try again in -5 seconds", 0, false},       // the sign is not part of the number
		{"retry in 500 ms", 0, false},               // not a unit we read
		{"try again in five minutes", 0, false},     // words
		{"try again after 10:30", 0, false},         // a clock time
		{"550 5.1.1 user 92 seconds old", 0, false}, // a number, no retry wording
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.text)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tt.text, got, ok, tt.want, tt.ok)
		}
	}
}

// replyErr is an error with an SMTP reply and a stage, as *sender.Error.
type replyErr struct {
	code           int
	enhanced, text string
	stage          string
	err            error
}

func (e *replyErr) Error() string {
	return fmt.Sprintf("%s: %d %s %s", e.stage, e.code, e.enhanced, e.text)
}
func (e *replyErr) Unwrap() error { return e.err }
func (e *replyErr) SMTPReply() (int, string, string) {
	return e.code, e.enhanced, e.text
}
func (e *replyErr) SMTPStage() string { return e.stage }

// taggedErr is a replyErr that says whether the body was written in full
// before the reply to its final dot went missing, as *sender.Error does.
type taggedErr struct {
	replyErr
	ambiguous bool
}

func (e *taggedErr) SMTPAmbiguous() bool { return e.ambiguous }

// dataEnd is a go-mail failure at the end of DATA, with cause.
func dataEnd(ambiguous bool, cause error) error {
	return &taggedErr{replyErr{stage: "body", err: fmt.Errorf("%w: %w", cause, &mail.SendError{Reason: mail.ErrSMTPDataClose})}, ambiguous}
}

func TestClassifyErrors(t *testing.T) {
	timeoutOp := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name     string
		err      error
		class    Class
		provider bool
		timeout  bool
		rule     string
	}{
		{"reply through a wrapper", fmt.Errorf("deliver: %w", &replyErr{code: 550, enhanced: "5.1.1", stage: "rcpt"}), Permanent, false, false, "recipient-unknown"},
		{"5xx while connecting", &replyErr{code: 554, text: "Your IP is blocked", stage: stageHello}, Auth, true, false, RuleRelayRefused},
		{"5xx to STARTTLS", &replyErr{code: 554, enhanced: "5.7.3", stage: stageTLS}, Auth, true, false, RuleRelayRefused},
		{"535 to AUTH", &replyErr{code: 535, enhanced: "5.7.8", stage: stageAuth}, Auth, true, false, "auth-credentials-invalid"},
		{"mailbox 4xx while connecting", &replyErr{code: 450, enhanced: "4.2.1", stage: stageHello}, Throttled, true, false, "mailbox-rate"},
		{"textproto reply", fmt.Errorf("dial: %w", &textproto.Error{Code: 421, Msg: "4.7.0 too many connections"}), Throttled, true, false, "throttle-text"},
		{"build failure", &replyErr{stage: stageBuild, err: errors.New("build message: from: bad")}, Permanent, false, false, RuleBuild},
		{"go-mail cannot get the sender", &mail.SendError{Reason: mail.ErrGetSender}, Permanent, false, false, RuleBuild},
		{"canceled", fmt.Errorf("%w: %w", context.Canceled, timeoutOp), Unknown, false, false, RuleCanceled},
		{"deadline", context.DeadlineExceeded, Transient, true, true, RuleTimeout},
		{"read timeout", timeoutOp, Transient, true, true, RuleTimeout},
		// No reply to the final dot: the relay may have the message.
		{"SendError at the final dot without a cause", &replyErr{stage: "body", err: &mail.SendError{Reason: mail.ErrSMTPDataClose}}, Unknown, true, false, RuleAmbiguousDataEnd},
		{"tagged ambiguous: timeout waiting for the final reply", dataEnd(true, timeoutOp), Unknown, true, true, RuleAmbiguousDataEnd},
		{"tagged ambiguous: deadline waiting for the final reply", dataEnd(true, context.DeadlineExceeded), Unknown, true, true, RuleAmbiguousDataEnd},
		{"tagged ambiguous: EOF instead of the final reply", dataEnd(true, io.EOF), Unknown, true, false, RuleAmbiguousDataEnd},
		{"tagged ambiguous: reset instead of the final reply", dataEnd(true, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), Unknown, true, false, RuleAmbiguousDataEnd},
		{"tagged ambiguous: garbled final reply", dataEnd(true, textproto.ProtocolError("short response: 2")), Unknown, true, false, RuleAmbiguousDataEnd},
		{"tagged ambiguous through a wrapper", fmt.Errorf("deliver: %w", dataEnd(true, io.EOF)), Unknown, true, false, RuleAmbiguousDataEnd},
		{"tagged ambiguous but canceled", dataEnd(true, context.Canceled), Unknown, false, false, RuleCanceled},
		{"tagged not ambiguous: the final dot was not written", dataEnd(false, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), Transient, true, false, RuleConnectionLost},
		{"tagged not ambiguous: write timeout", dataEnd(false, timeoutOp), Transient, true, true, RuleTimeout},
		{"tagged ambiguous with a reply: the reply wins", &taggedErr{replyErr{code: 451, enhanced: "4.3.0", stage: "body"}, true}, Transient, true, false, "mail-system-4xx"},
		{"body cut short before the final dot", &replyErr{stage: "body", err: &mail.SendError{Reason: mail.ErrWriteContent}}, Transient, true, false, RuleConnectionLost},
		{"conn check", &replyErr{stage: "conn", err: &mail.SendError{Reason: mail.ErrConnCheck}}, Transient, true, false, RuleConnCheck},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, Transient, true, false, RuleRefused},
		{"EOF", fmt.Errorf("read greeting: %w", io.EOF), Transient, true, false, RuleConnectionLost},
		{"unexpected EOF", io.ErrUnexpectedEOF, Transient, true, false, RuleConnectionLost},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, Transient, true, false, RuleConnectionLost},
		{"broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, Transient, true, false, RuleConnectionLost},
		{"closed", net.ErrClosed, Transient, true, false, RuleConnectionLost},
		{"tls stage without a type", &replyErr{stage: stageTLS, err: errors.New("STARTTLS mode set to: \"TLSMandatory\", but target host does not support STARTTLS")}, Transient, true, false, RuleTLS},
		{"go-mail STARTTLS error", errors.New("STARTTLS mode set to: \"TLSMandatory\", but target host does not support STARTTLS"), Transient, true, false, RuleTLS},
		{"no auth mechanism", fmt.Errorf("SMTP AUTH failed: %w", mail.ErrNoSupportedAuthDiscovered), Auth, true, false, RuleAuthFailed},
		{"auth stage without a reply", &replyErr{stage: stageAuth, err: errors.New("server does not support SMTP AUTH")}, Auth, true, false, RuleAuthFailed},
		{"EOF during auth", &replyErr{stage: stageAuth, err: fmt.Errorf("SMTP AUTH failed: %w", io.EOF)}, Transient, true, false, RuleConnectionLost},
		{"dns", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "relay.invalid", IsNotFound: true}}, Transient, true, false, RuleDNS},
		{"unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, Transient, true, false, RuleUnreachable},
		{"protocol", textproto.ProtocolError("short response: 2"), Transient, true, false, RuleProtocol},
		{"other network", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("something odd")}, Transient, true, false, RuleNetwork},
		{"anything else", errors.New("boom"), Unknown, false, false, RuleUnmatched},
	}
	for set, classify := range errorClassifiers(t) {
		for _, tt := range tests {
			t.Run(set+"/"+tt.name, func(t *testing.T) {
				v := classify(tt.err)
				if v.Class != tt.class || v.RelayFault != tt.provider || v.Timeout != tt.timeout || v.Rule != tt.rule {
					t.Errorf("Classify = {Class:%s RelayFault:%v Timeout:%v Rule:%s}, want {%s %v %v %s}",
						v.Class, v.RelayFault, v.Timeout, v.Rule, tt.class, tt.provider, tt.timeout, tt.rule)
				}
			})
		}
		if v := classify(nil); v != (Verdict{}) {
			t.Errorf("%s: Classify(nil) = %+v, want the zero Verdict", set, v)
		}
	}
}

// TestClassifyLimit covers which relay limit a throttle names: a sender
// cuts connections for one and its send rate for the other.
func TestClassifyLimit(t *testing.T) {
	tests := []struct {
		name     string
		code     int
		enhanced string
		text     string
		want     Limit
	}{
		{"421 closes the channel", 421, "4.7.0", "Try again later, closing connection", LimitConnections},
		{"421 too many connections", 421, "4.7.0", "Too many concurrent SMTP connections; try again in 92 seconds", LimitConnections},
		{"450 too many sessions", 450, "4.7.0", "too many sessions from your IP", LimitConnections},
		{"450 rate limit", 450, "4.7.1", "rate limit exceeded, try again in 2 seconds", LimitRate},
		{"452 congestion", 452, "4.4.5", "per second limit exceeded", LimitRate},
		{"550 temporary rate limit", 550, "5.7.1", "Temporary rate limit, try again in 60 seconds", LimitRate},
		{"greylisting is about the pair, not the relay's rate", 450, "4.7.1", "Greylisted, try again in 60 seconds", ""},
		{"mailbox rate is not the relay's", 450, "4.2.1", "receiving mail at a rate that prevents additional messages", ""},
		{"transient has none", 451, "4.3.0", "local error in processing", ""},
		{"permanent has none", 550, "5.1.1", "no such user", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClassifyReply(tt.code, tt.enhanced, tt.text).Limit; got != tt.want {
				t.Errorf("Limit = %q, want %q", got, tt.want)
			}
		})
	}
}

// stagedReply is an SMTP reply received at a stage of the session.
type stagedReply struct {
	code        int
	enhanced    string
	text, stage string
}

func (e stagedReply) Error() string { return fmt.Sprintf("%d %s %s", e.code, e.enhanced, e.text) }
func (e stagedReply) SMTPReply() (int, string, string) {
	return e.code, e.enhanced, e.text
}
func (e stagedReply) SMTPStage() string { return e.stage }

func TestClassifyLimitAtGreeting(t *testing.T) {
	tests := []struct {
		name  string
		err   stagedReply
		class Class
		want  Limit
	}{
		{"rate text at the greeting is a connection refusal", stagedReply{450, "4.7.1", "rate limit exceeded", stageHello}, Throttled, LimitConnections},
		{"rate text at MAIL is a rate limit", stagedReply{450, "4.7.1", "rate limit exceeded", "mail"}, Throttled, LimitRate},
		{"transient at the greeting has no limit", stagedReply{451, "4.3.0", "local error", stageHello}, Transient, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Classify(tt.err)
			if v.Class != tt.class || v.Limit != tt.want {
				t.Errorf("Classify = %s/%q, want %s/%q", v.Class, v.Limit, tt.class, tt.want)
			}
		})
	}
}
