package sender

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"

	"github.com/wneessen/go-mail"
)

// The stages an Error reports, in the order a send goes through them.
const (
	StageBuild = "build" // the job could not be turned into a message
	StageDial  = "dial"  // TCP connect
	StageHello = "hello" // greeting and EHLO/HELO
	StageTLS   = "tls"   // STARTTLS or the implicit TLS handshake
	StageAuth  = "auth"  // SMTP AUTH
	StageConn  = "conn"  // a kept connection was dead, or the context ended, before MAIL
	StageMail  = "mail"  // MAIL FROM
	StageRcpt  = "rcpt"  // RCPT TO
	StageData  = "data"  // the DATA command
	StageBody  = "body"  // the message content and the reply to its final dot
)

// Error is a failed send.
type Error struct {
	Relay    string
	Code     int    // SMTP reply code, 0 for network/TLS errors
	Enhanced string // RFC 3463 enhanced status, e.g. "5.1.1", "" if none
	Text     string // reply text
	Stage    string // one of the Stage constants
	Err      error
	// Ambiguous says the whole message and the dot that ends it were
	// written, and the relay's reply to the dot never came (a timeout, a
	// dropped connection, a reply that was not SMTP): the relay may have
	// accepted the message, so sending it again may deliver it twice. It
	// implements failure.Ambiguous, which keeps such a send out of fast
	// retries. Always with Stage StageBody and Code 0.
	Ambiguous bool

	detail  string // Err's cause without addresses, for Error when there is no reply
	dataEnd bool   // the failure came from reading the reply to the final dot
}

// Error describes the failure without recipient addresses, e.g.
// "smtp primary: rcpt: 550 5.1.1 no such user".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "smtp %s: %s", e.Relay, e.Stage)
	switch {
	case e.Code != 0:
		fmt.Fprintf(&b, ": %d", e.Code)
		if e.Enhanced != "" {
			b.WriteString(" " + e.Enhanced)
		}
		if e.Text != "" {
			b.WriteString(" " + e.Text)
		}
	case e.detail != "":
		b.WriteString(": " + e.detail)
	case e.Err != nil:
		b.WriteString(": " + e.Err.Error())
	}
	if e.Ambiguous {
		b.WriteString(" (no reply to the end of the message: the relay may have accepted it)")
	}
	return b.String()
}

// Unwrap returns the underlying error (a *mail.SendError, a net.Error, a
// TLS error, context.Canceled, ...).
func (e *Error) Unwrap() error { return e.Err }

// SMTPReply returns the SMTP reply the send failed with: code 0 (and empty
// strings) when there was none (network and TLS errors, build failures).
// It implements failure.Reply.
func (e *Error) SMTPReply() (code int, enhanced, text string) {
	return e.Code, e.Enhanced, e.Text
}

// SMTPStage returns Stage. It implements failure.Staged, which tells a
// reply while connecting (the relay refuses us) from one to the mail
// transaction (the relay refuses the message).
func (e *Error) SMTPStage() string { return e.Stage }

// SMTPAmbiguous returns Ambiguous. It implements failure.Ambiguous.
func (e *Error) SMTPAmbiguous() bool { return e.Ambiguous }

// dropsConnection reports whether the connection that produced e can no
// longer be used: no SMTP reply (network error, timeout, half-written
// message) or 421, with which the server announces it is closing.
func (e *Error) dropsConnection() bool {
	return e.Code == 0 || e.Code == 421
}

// staleConnection reports whether e is how a kept connection that died
// while idle shows up: the first command of the transaction got no reply
// or a 421. Nothing of the message was accepted yet, so sending it again on
// a fresh connection cannot duplicate it.
func (e *Error) staleConnection() bool {
	return (e.Stage == StageConn || e.Stage == StageMail) && e.dropsConnection()
}

var enhancedStatus = regexp.MustCompile(`^([245])\.\d{1,3}\.\d{1,3}$`)

// splitReply separates a leading RFC 3463 status from reply text; known is
// a status found elsewhere, kept when the text has none.
func splitReply(code int, known, text string) (enhanced, rest string) {
	text = strings.TrimSpace(text)
	first, after, _ := strings.Cut(text, " ")
	if m := enhancedStatus.FindStringSubmatch(first); m != nil && m[1] == strconv.Itoa(code/100) {
		return first, strings.TrimSpace(after)
	}
	return known, text
}

// dialError maps an error from mail.Client.DialToSMTPClientWithContext.
// stage is what the session's dial function saw fail (StageDial or
// StageTLS), "" when the TCP (and implicit TLS) connection succeeded;
// failedCmd is the last SMTP command that got an error reply.
func dialError(relay string, err error, stage, failedCmd string) *Error {
	e := &Error{Relay: relay, Stage: stage, Err: err, detail: err.Error()}
	if e.Stage == "" {
		switch {
		case failedCmd == "starttls" || isTLSError(err):
			e.Stage = StageTLS
		case isAuthError(err):
			e.Stage = StageAuth
		default:
			e.Stage = StageHello
		}
	}
	var te *textproto.Error
	if errors.As(err, &te) {
		e.Code = te.Code
		e.Enhanced, e.Text = splitReply(te.Code, "", te.Msg)
	}
	return e
}

func isTLSError(err error) bool {
	var (
		recordErr tls.RecordHeaderError
		alertErr  tls.AlertError
		verifyErr *tls.CertificateVerificationError
		authErr   x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		certErr   x509.CertificateInvalidError
	)
	if errors.As(err, &recordErr) || errors.As(err, &alertErr) || errors.As(err, &verifyErr) ||
		errors.As(err, &authErr) || errors.As(err, &hostErr) || errors.As(err, &certErr) {
		return true
	}
	msg := err.Error()
	// go-mail's own STARTTLS errors carry no type.
	return strings.HasPrefix(msg, "tls:") || strings.Contains(msg, "STARTTLS") ||
		strings.HasPrefix(msg, "failed to get TLS connection state")
}

func isAuthError(err error) bool {
	for _, target := range []error{
		mail.ErrPlainAuthNotSupported, mail.ErrLoginAuthNotSupported, mail.ErrNoSupportedAuthDiscovered,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "SMTP AUTH failed") || strings.HasPrefix(msg, "server does not support SMTP AUTH")
}

// withContext marks a failure without a reply as caused by the end of ctx
// when ctx is done (the session cut the connection's I/O short), so
// errors.Is(e, context.Canceled) or context.DeadlineExceeded holds.
func withContext(ctx context.Context, e *Error) *Error {
	if e.Code != 0 || ctx.Err() == nil || errors.Is(e.Err, ctx.Err()) {
		return e
	}
	e.Err = fmt.Errorf("%w: %w", ctx.Err(), e.Err)
	e.detail = ctx.Err().Error() + ": " + e.detail
	return e
}
