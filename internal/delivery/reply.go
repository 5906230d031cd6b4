package delivery

import (
	"errors"
	"regexp"
	"strings"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/sender"
)

// sendReply is the event reply of a failed send: the relay's reply, or
// for a failure without one (code 0: network, TLS, a lost connection) only
// the stage it happened at. The cause names the relay's host and address,
// which are the operator's, not the tenants' that read events through
// webhooks: the row's last error and the logs keep it. nil when err is not
// a send's failure.
//
// The reply is shared by every recipient the send leaves pending, failed
// or dead, and relays echo addresses in replies ("<a@example.com>: ...",
// the MAIL FROM's return path): an address in it could be another
// recipient's, a Bcc's even, so addresses are masked. A recipient's own
// RCPT reply (rcpt.reply) is kept as it is, as Bounce.Diagnostic is: the
// address it echoes is the event's recipient.
func sendReply(err error) *event.Reply {
	var se *sender.Error
	if !errors.As(err, &se) {
		return nil
	}
	text := se.Text
	if se.Code == 0 {
		text = "no reply at " + se.Stage
	}
	return &event.Reply{Code: se.Code, Status: se.Enhanced, Text: truncateDiagnostic(maskAddresses(text))}
}

// reply is the reply of r's deferred, failed or dead event in fate f: its
// own refusal at RCPT when the relay refused it for now, else the send's.
func (r *rcpt) reply(f fate) *event.Reply {
	if r.deferral != nil {
		return &event.Reply{Code: r.deferral.Code, Status: r.deferral.Enhanced, Text: truncateDiagnostic(r.deferral.Text)}
	}
	return f.reply
}

// addressLike matches what looks like an address in a reply text: a local
// part and a domain around an @, up to the brackets, quotes or separators
// that enclose it.
var addressLike = regexp.MustCompile(`[^\s<>()\[\]",;:@]+@[^\s<>()\[\]",;:@]+`)

// maskedAddress stands for an address masked out of a reply.
const maskedAddress = "[address]"

// maskAddresses replaces what looks like an address in s by maskedAddress.
func maskAddresses(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return addressLike.ReplaceAllLiteralString(s, maskedAddress)
}
