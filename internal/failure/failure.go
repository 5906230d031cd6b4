package failure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wneessen/go-mail"
)

// Class is the kind of a failure, which decides what the caller does next.
type Class string

// The classes.
const (
	Transient Class = "transient" // try again soon: network blips, 421/451 without a throttling sign
	Throttled Class = "throttled" // the relay asks us to slow down: 4.7.x, "rate", "too many", "throttl"
	Permanent Class = "permanent" // the message will never be accepted: 5xx except auth
	Auth      Class = "auth"      // credentials or auth policy: 530, 534, 535 (relay-level)
	Unknown   Class = "unknown"
)

// Verdict is the classification of one failure.
type Verdict struct {
	Class      Class
	RetryAfter time.Duration // hint parsed from the reply text ("try again in 92 seconds"); 0 = none
	Timeout    bool          // a network timeout (circuit breakers escalate faster)
	RelayFault bool          // the relay, not this message, is the problem: counts toward the breaker, except a Throttled one (the send control's)
	Code       int           // SMTP reply code, 0 for network errors
	Enhanced   string        // RFC 3463 code, "" if none
	Rule       string        // name of the table row that matched (for logs and tests)
	// Limit says which of the relay's limits a throttled failure hit, so
	// the sender slows down the right way: fewer connections, or fewer
	// sends per second. Empty for every other failure, and for a throttle
	// about one mailbox, which says nothing about the relay.
	Limit Limit
}

// Limit is the relay limit behind a throttled failure.
type Limit string

// The limits of Verdict.Limit.
const (
	// LimitConnections is the relay's cap on concurrent connections or
	// sessions: a 421 (it closes the channel), a refusal at the greeting,
	// or a reply saying "too many connections".
	LimitConnections Limit = "connections"
	// LimitRate is the relay's cap on messages per unit of time: any other
	// throttled reply (450 4.7.1 "rate limit exceeded").
	LimitRate Limit = "rate"
)

// Reply is implemented by errors that carry an SMTP reply (*sender.Error
// does). A code of 0 means there was no reply.
type Reply interface {
	SMTPReply() (code int, enhanced, text string)
}

// Staged is implemented by errors that know which stage of an SMTP session
// failed (*sender.Error does, with its Stage constants). Classify uses it
// for what the reply alone cannot tell: a job that could not be built into a
// message is permanent, and a reply while connecting (greeting, EHLO,
// STARTTLS, AUTH) is about the relay, never about the message.
type Staged interface {
	SMTPStage() string
}

// Ambiguous is implemented by errors that know whether a send failed after
// the relay may already have accepted the message (*sender.Error does): the
// whole message and the dot that ends it were written, and the relay's reply
// to the dot never came (a timeout, a dropped connection, a reply that was
// not SMTP). Sending such a message again at once would likely deliver it
// twice, so Classify makes it Unknown (RuleAmbiguousDataEnd), which callers
// retry only after a delay, never in a resend.
//
// An error that implements Ambiguous is believed either way; a go-mail
// SendError without one that failed at the end of DATA without a reply is
// taken as ambiguous, since nothing says the dot did not reach the relay.
type Ambiguous interface {
	SMTPAmbiguous() bool
}

// The stages Classify treats specially; they are sender's Stage values (a
// test in this package checks that they agree).
const (
	stageBuild = "build"
	stageHello = "hello"
	stageTLS   = "tls"
	stageAuth  = "auth"
)

// connectionLimitText is a throttle about concurrent connections or
// sessions rather than the rate of messages.
var connectionLimitText = regexp.MustCompile(`(?i)too many (concurrent |simultaneous |open )?(connections|sessions)|connection (limit|count)|concurrency`)

// Rule names Classify reports for failures without a reply, and for
// replies the stage changes.
const (
	RuleUnmatched      = "unmatched"       // nothing matched: Unknown
	RuleBuild          = "build"           // the job could not be built into a message: Permanent
	RuleRelayRefused   = "relay-refused"   // a 5xx while connecting (greeting, EHLO, STARTTLS, AUTH): Auth
	RuleCanceled       = "canceled"        // context.Canceled, a shutdown: Unknown, not the relay's fault
	RuleTimeout        = "timeout"         // dial, read or write timeout, context deadline: Transient
	RuleTLS            = "tls"             // TLS handshake or certificate failure: Transient
	RuleAuthFailed     = "auth-failed"     // AUTH failed without a reply (no common mechanism): Auth
	RuleConnCheck      = "conn-check"      // go-mail's connection check failed: Transient
	RuleRefused        = "refused"         // connection refused: Transient
	RuleConnectionLost = "connection-lost" // EOF, reset, broken pipe, closed mid-transaction: Transient
	RuleDNS            = "dns"             // the relay's host name did not resolve: Transient
	RuleUnreachable    = "unreachable"     // no route to the relay: Transient
	RuleProtocol       = "protocol"        // the relay's reply was not SMTP: Transient
	RuleNetwork        = "network"         // any other network error: Transient
)

// RuleAmbiguousDataEnd is a send that got no reply to the dot ending the
// message after writing all of it (see Ambiguous): Unknown, because the
// relay may have accepted the message, and the relay's fault. It is never
// Transient, so it is never resent.
const RuleAmbiguousDataEnd = "ambiguous-data-end"

// RuleProviderHard is the rule of a bounce a provider (SES, Mailgun) itself
// called hard where the rules found no more than a soft bounce: the
// report applier, not a row, decides it, so no rules file may use the
// name.
const RuleProviderHard = "provider-hard"

// Classify classifies a failed send by the Default rule set (see
// RuleSet.Classify).
func Classify(err error) Verdict { return Default().Classify(err) }

// ClassifyReply classifies an SMTP reply by the Default rule set (see
// RuleSet.ClassifyReply).
func ClassifyReply(code int, enhanced, text string) Verdict {
	return Default().ClassifyReply(code, enhanced, text)
}

// Classify classifies a failed send. nil gives the zero Verdict.
//
// An SMTP reply anywhere in err's chain (Reply, *textproto.Error, or a
// *mail.SendError with a code) is classified by s.ClassifyReply; when err
// also says (Staged) that the reply came while connecting, it is the
// relay's fault, and a 5xx other than auth becomes Auth (relay-refused):
// the relay refuses us, not the message, so the caller fails over instead
// of dropping the message. Errors without a reply are classified by type;
// their rule names are the Rule constants.
func (s *RuleSet) Classify(err error) Verdict {
	if err == nil {
		return Verdict{}
	}
	stage := ""
	var staged Staged
	if errors.As(err, &staged) {
		stage = staged.SMTPStage()
	}
	if code, enhanced, text := reply(err); code != 0 {
		v := s.ClassifyReply(code, enhanced, text)
		if stage == stageHello || stage == stageTLS || stage == stageAuth {
			v = whileConnecting(v)
		}
		return v
	}
	provider := func(rule string) Verdict {
		return Verdict{Class: Transient, RelayFault: true, Rule: rule}
	}
	se, isSendErr := errors.AsType[*mail.SendError](err)
	switch {
	case stage == stageBuild || isSendErr && isBuildReason(se.Reason):
		return Verdict{Class: Permanent, Rule: RuleBuild}
	case errors.Is(err, context.Canceled):
		// A shutdown or an abandoned send says nothing about the relay
		// or the message.
		return Verdict{Class: Unknown, Rule: RuleCanceled}
	case ambiguousDataEnd(err, se):
		// Before timeouts and lost connections, which are Transient and
		// would be retried at once: this message may have gone out.
		return Verdict{Class: Unknown, RelayFault: true, Timeout: isTimeout(err), Rule: RuleAmbiguousDataEnd}
	case isTimeout(err):
		v := provider(RuleTimeout)
		v.Timeout = true
		return v
	case stage == stageTLS || isTLSError(err):
		// Not permanent: a failed handshake or a rejected certificate
		// (expired, wrong host, unknown CA, a plain-text port) is a
		// property of the relay or the path to it, not of the message. It
		// is usually an operator's mistake fixed in minutes, and another
		// relay may be fine; dropping mail for it would lose messages.
		// The breaker opens and the caller fails over.
		return provider(RuleTLS)
	case isSendErr && se.Reason == mail.ErrConnCheck:
		return provider(RuleConnCheck)
	case errors.Is(err, syscall.ECONNREFUSED):
		return provider(RuleRefused)
	case isConnectionLost(err):
		return provider(RuleConnectionLost)
	case stage == stageAuth || isAuthError(err):
		return Verdict{Class: Auth, RelayFault: true, Rule: RuleAuthFailed}
	case isSendErr:
		// A SendError without a code hides its cause's type: a
		// transaction cut short by the network (go-mail returns a timeout
		// this way too, caught by isTimeout from its text).
		return provider(RuleConnectionLost)
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return provider(RuleDNS)
	}
	if errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EADDRNOTAVAIL) {
		return provider(RuleUnreachable)
	}
	if _, ok := errors.AsType[textproto.ProtocolError](err); ok {
		return provider(RuleProtocol)
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return provider(RuleNetwork)
	}
	return Verdict{Class: Unknown, Rule: RuleUnmatched}
}

// whileConnecting turns the verdict on a reply that came while connecting
// into the relay's fault: the relay refuses us, not the message.
func whileConnecting(v Verdict) Verdict {
	v.RelayFault = true
	if v.Class == Permanent {
		v.Class, v.Rule = Auth, RuleRelayRefused
	}
	if v.Class == Throttled {
		// Refused before any transaction: the relay will not
		// take another connection, whatever the text says.
		v.Limit = LimitConnections
	}
	return v
}

// reply finds an SMTP reply in err's chain.
func reply(err error) (code int, enhanced, text string) {
	var r Reply
	if errors.As(err, &r) {
		if code, enhanced, text = r.SMTPReply(); code != 0 {
			return code, enhanced, text
		}
	}
	if te, ok := errors.AsType[*textproto.Error](err); ok && te.Code != 0 {
		return te.Code, "", te.Msg
	}
	if se, ok := errors.AsType[*mail.SendError](err); ok && se.ErrorCode() != 0 {
		return se.ErrorCode(), se.EnhancedStatusCode(), se.Error()
	}
	return 0, "", ""
}

// ambiguousDataEnd reports a failure without a reply after the whole
// message was written (see Ambiguous); se is err's SendError, nil if none.
func ambiguousDataEnd(err error, se *mail.SendError) bool {
	var a Ambiguous
	if errors.As(err, &a) {
		return a.SMTPAmbiguous()
	}
	return se != nil && se.Reason == mail.ErrSMTPDataClose
}

func isBuildReason(r mail.SendErrReason) bool {
	return r == mail.ErrGetSender || r == mail.ErrGetRcpts || r == mail.ErrNoUnencoded
}

// isTimeout reports a dial, read or write timeout or an expired context.
// go-mail's SendError does not unwrap, so its text is read too.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	if _, ok := errors.AsType[*mail.SendError](err); ok {
		msg := err.Error()
		return strings.Contains(msg, "i/o timeout") || strings.Contains(msg, "deadline exceeded")
	}
	return false
}

// isTLSError reports a TLS handshake or certificate failure, including
// go-mail's untyped STARTTLS errors.
func isTLSError(err error) bool {
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "tls:") || strings.Contains(msg, "STARTTLS") ||
		strings.HasPrefix(msg, "failed to get TLS connection state")
}

// isAuthError reports an AUTH that failed without a reply: the relay and
// we share no mechanism.
func isAuthError(err error) bool {
	return errors.Is(err, mail.ErrPlainAuthNotSupported) || errors.Is(err, mail.ErrLoginAuthNotSupported) ||
		errors.Is(err, mail.ErrNoSupportedAuthDiscovered) ||
		strings.Contains(err.Error(), "server does not support SMTP AUTH")
}

// isConnectionLost reports a connection that ended under us.
func isConnectionLost(err error) bool {
	for _, target := range []error{
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
		syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	if _, ok := errors.AsType[*mail.SendError](err); ok {
		msg := err.Error()
		for _, s := range []string{"EOF", "connection reset", "broken pipe", "use of closed network connection", "connection aborted"} {
			if strings.Contains(msg, s) {
				return true
			}
		}
	}
	return false
}

// enhancedStatus is an RFC 3463 status code.
var enhancedStatus = regexp.MustCompile(`^([245])\.\d{1,3}\.\d{1,3}$`)

// enhancedHasPrefix reports whether the RFC 3463 status enhanced starts
// with prefix in whole components: "4.7" is a prefix of "4.7.0", not of
// "4.70.1".
func enhancedHasPrefix(enhanced, prefix string) bool {
	return enhanced == prefix || strings.HasPrefix(enhanced, prefix+".")
}

// MaxRetryAfter caps a retry-after hint: a relay asking for more is
// throttling us hard, and the message should still go out the same day.
const MaxRetryAfter = 6 * time.Hour

// retryAfterPatterns find a delay in reply text; the number is group 1,
// the unit (seconds if absent, only for Retry-After) group 2.
var retryAfterPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bretry-after:\s*(\d+(?:\.\d+)?)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)?\b`),
	regexp.MustCompile(`(?i)\b(?:try(?:\s+again)?|retry|wait|come\s+back|back\s+off|resend)\s+(?:(?:again|later)\s+)?(?:in|after|for)?\s*(?:about\s+|at\s+least\s+)?(\d+(?:\.\d+)?)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)\b`),
}

// ParseRetryAfter finds a retry-after hint in SMTP reply text: "try again
// in 92 seconds", "retry in 5 minutes", "wait 2 min", "Retry-After: 30"
// (seconds). Hints above MaxRetryAfter are capped to it; zero, or a number
// without a unit outside Retry-After, is no hint.
func ParseRetryAfter(text string) (time.Duration, bool) {
	for _, p := range retryAfterPatterns {
		for _, m := range p.FindAllStringSubmatch(text, -1) {
			n, err := strconv.ParseFloat(m[1], 64)
			if err != nil || n <= 0 {
				continue
			}
			secs := n * unitSeconds(m[2])
			if secs >= MaxRetryAfter.Seconds() {
				return MaxRetryAfter, true
			}
			if d := time.Duration(secs * float64(time.Second)).Round(time.Millisecond); d > 0 {
				return d, true
			}
		}
	}
	return 0, false
}

func unitSeconds(unit string) float64 {
	switch strings.ToLower(unit)[:min(1, len(unit))] {
	case "m":
		return 60
	case "h":
		return 3600
	}
	return 1 // "s", "sec", "seconds" and none
}
