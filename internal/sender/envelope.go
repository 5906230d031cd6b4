package sender

import (
	"bytes"
	"errors"
	"net/mail"
	"net/textproto"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/mailaddr"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/job"
)

// Recipient is one recipient of a send and the return path it gets.
type Recipient struct {
	// Address is the bare address (addr-spec) for RCPT TO.
	Address string
	// ReturnPath is the MAIL FROM address for this recipient: reports
	// about it come back there. "" means the job's From address.
	ReturnPath string
	// ListUnsubscribe, when set, are the URIs of the List-Unsubscribe
	// header of this recipient's copy (RFC 2369; the one-click https link
	// first), which then also gets List-Unsubscribe-Post:
	// List-Unsubscribe=One-Click (RFC 8058), both DKIM-signed. They replace
	// any List-Unsubscribe headers of the job's own. A URI may not hold
	// whitespace, angle brackets or commas, and fits a header line
	// (MaxListUnsubscribeURI). Recipients with different URIs get copies
	// of their own, one transaction each.
	ListUnsubscribe []string
}

// MaxListUnsubscribeURI is the longest URI ListUnsubscribe may hold: it
// fits a header line (998 bytes) as "List-Unsubscribe: <uri>,".
const MaxListUnsubscribeURI = 998 - len("List-Unsubscribe: <>,")

// Recipients returns every recipient of j (To, Cc, then Bcc) with
// returnPath, "" for the job's From.
func Recipients(j *job.Job, returnPath string) []Recipient {
	addrs := j.Recipients()
	out := make([]Recipient, len(addrs))
	for i, a := range addrs {
		out[i] = Recipient{Address: a, ReturnPath: returnPath}
	}
	return out
}

// Result says what the relay did with the recipients of one SendTo.
type Result struct {
	// Accepted are the indexes (into the recipients passed to SendTo) of
	// the recipients the relay took.
	Accepted []int
	// Refused are the recipients the relay refused at RCPT.
	Refused []Refusal
	// DKIMDomain is the domain whose key signed the message the relay
	// accepted (the From address's domain, lowercased, without a trailing
	// dot); "" when it went out unsigned or nothing was accepted.
	DKIMDomain string
}

// Refusal is one recipient the relay refused at RCPT TO.
type Refusal struct {
	// Index is the recipient's index in the recipients passed to SendTo.
	Index int
	// Err is the refusal, with Stage StageRcpt and the relay's reply.
	Err *Error
}

var errNoRecipients = errors.New("no recipients")

// transaction is one MAIL FROM and the recipients that share it, and the
// List-Unsubscribe URIs of their copy.
type transaction struct {
	from        string
	unsubscribe []string
	indexes     []int // into the recipients of the send
}

func (t transaction) addrs(rcpts []Recipient) []string {
	out := make([]string, len(t.indexes))
	for i, k := range t.indexes {
		out[i] = rcpts[k].Address
	}
	return out
}

// transactions groups rcpts by return path and List-Unsubscribe URIs, in
// the order each pair first appears; from replaces an empty return path.
func transactions(rcpts []Recipient, from string) []transaction {
	if _, spec, ok := mailaddr.Simple(from); ok {
		from = spec
	} else if a, err := mail.ParseAddress(from); err == nil {
		from = a.Address
	}
	// The transactions are found by a scan rather than a map: a mail has
	// one return path or one per recipient, and a handful of recipients.
	var out []transaction
	for i, r := range rcpts {
		rp := r.ReturnPath
		if rp == "" {
			rp = from
		}
		k := slices.IndexFunc(out, func(t transaction) bool {
			return t.from == rp && slices.Equal(t.unsubscribe, r.ListUnsubscribe)
		})
		if k < 0 {
			k = len(out)
			out = append(out, transaction{from: rp, unsubscribe: r.ListUnsubscribe})
		}
		out[k].indexes = append(out[k].indexes, i)
	}
	return out
}

// StageSign is the stage of an Error whose message could not be DKIM
// signed although its From domain has a key. The key was loaded and checked
// at start, so this is an operator's problem (a key or host gone bad), not
// the message's: the failure has no reply and classifies as Unknown, which
// is retried after a delay rather than dropped (a build failure is
// permanent), and the message is never sent unsigned in its place.
const StageSign = "sign"

// The result label values of postline_sender_dkim_total.
const (
	dkimSigned = "signed"
	dkimNoKey  = "no_key"
	dkimError  = "error"
)

// dkimMetrics counts signing results, one series per result.
type dkimMetrics struct {
	signed, noKey, failed prometheus.Counter
}

func newDKIMMetrics(reg prometheus.Registerer) (*dkimMetrics, error) {
	set := metricreg.NewSet(reg, "sender")
	v := set.CounterVec("dkim_total",
		"Messages rendered with DKIM signing configured, by result: signed, no_key (no key for the From domain: sent unsigned) or error (not sent).", "result")
	if err := set.Err(); err != nil {
		return nil, err
	}
	return &dkimMetrics{
		signed: v.WithLabelValues(dkimSigned),
		noKey:  v.WithLabelValues(dkimNoKey),
		failed: v.WithLabelValues(dkimError),
	}, nil
}

// build builds the job's message and writes it out once, unsigned, so
// that every transaction of a send carries the same bytes (one Date, one
// boundary): the copies with List-Unsubscribe headers of their own are
// those bytes behind the headers (see copyFor). With ownUnsubscribe false
// the job's own List-Unsubscribe and List-Unsubscribe-Post headers are
// left out: the recipients' replace them. The message is written into buf,
// reset first; the bytes returned are buf's, valid until its next use.
func (r *Relay) build(j *job.Job, buf *bytes.Buffer, ownUnsubscribe bool) ([]byte, *Error) {
	name := r.cfg.Name
	if !ownUnsubscribe && hasUnsubscribeHeaders(j.Headers) {
		without := *j
		without.Headers = make(map[string]string, len(j.Headers))
		for k, v := range j.Headers {
			if !isUnsubscribeHeader(k) {
				without.Headers[k] = v
			}
		}
		j = &without
	}
	msg, part, err := message(j, true)
	if err != nil {
		return nil, &Error{Relay: name, Stage: StageBuild, Err: err}
	}
	buf.Reset()
	if part != nil {
		// Room for the headers and the bodies in 7bit, so that appending
		// them does not grow the buffer again.
		buf.Grow(len(part.text) + len(part.html) + 2<<10)
	}
	if _, err := msg.WriteTo(buf); err != nil {
		return nil, &Error{Relay: name, Stage: StageBuild, Err: err}
	}
	if part != nil {
		out := part.appendTo(buf.Bytes())
		*buf = *bytes.NewBuffer(out) // keeps a grown array for the next mail
	}
	return buf.Bytes(), nil
}

// render builds the job's message (build, with the job's own headers)
// and signs it (sign): the one copy of a send without List-Unsubscribe
// URIs of its recipients'.
func (r *Relay) render(j *job.Job, buf *bytes.Buffer) ([]byte, *Error) {
	return r.renderSigned(j, buf, nil)
}

// renderSigned is render signing into *signed (see sign) when it is not
// nil, as a session does.
func (r *Relay) renderSigned(j *job.Job, buf *bytes.Buffer, signed *[]byte) ([]byte, *Error) {
	msg, e := r.build(j, buf, true)
	if e != nil {
		return nil, e
	}
	msg, _, e = r.sign(j, msg, signed)
	return msg, e
}

// appendSigner is a DKIMSigner that can append the signed message to a
// buffer of the caller's (*dkim.Keyring does): a session keeps one from
// mail to mail instead of having a copy of each message allocated.
type appendSigner interface {
	AppendSign(dst []byte, domain string, msg []byte) (signed []byte, ok bool, err error)
}

// sign signs msg, when DKIM is configured, with the key of the From
// address's domain, when there is one, and returns the signed message and
// that domain; it returns msg as it is and "" otherwise. With buf not
// nil, a signer that can appends the signed message to (*buf)[:0] and
// leaves the buffer, grown or not, in *buf for the next message.
func (r *Relay) sign(j *job.Job, msg []byte, buf *[]byte) (signed []byte, domain string, e *Error) {
	if r.cfg.DKIM == nil {
		return msg, "", nil
	}
	domain = fromDomain(j.From)
	var (
		ok  bool
		err error
	)
	if as, can := r.cfg.DKIM.(appendSigner); can && buf != nil {
		signed, ok, err = as.AppendSign((*buf)[:0], domain, msg)
		if ok && err == nil {
			*buf = signed
		}
	} else {
		signed, ok, err = r.cfg.DKIM.Sign(domain, msg)
	}
	switch {
	case err != nil:
		r.dkim.failed.Inc()
		return nil, "", &Error{Relay: r.cfg.Name, Stage: StageSign, Err: err}
	case !ok:
		r.dkim.noKey.Inc()
		return msg, "", nil
	}
	r.dkim.signed.Inc()
	return signed, strings.TrimSuffix(strings.ToLower(domain), "."), nil
}

// copyFor returns the copy of the message base for recipients with the
// List-Unsubscribe URIs uris: their headers, then base, signed as a whole,
// so that the signature covers them, and the domain that signed it. The
// copy is written into buf, reset first, and signed into signed (see
// sign).
func (r *Relay) copyFor(j *job.Job, base []byte, uris []string, buf *bytes.Buffer, signed *[]byte) ([]byte, string, *Error) {
	buf.Reset()
	buf.Grow(len(base) + 128 + 8*len(uris))
	for i, u := range uris {
		if i == 0 {
			buf.WriteString("List-Unsubscribe: <")
		} else {
			buf.WriteString(" <") // a continuation line: one URI a line
		}
		buf.WriteString(u)
		buf.WriteByte('>')
		if i < len(uris)-1 {
			buf.WriteByte(',')
		}
		buf.WriteString("\r\n")
	}
	buf.WriteString("List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n")
	buf.Write(base)
	return r.sign(j, buf.Bytes(), signed)
}

// checkUnsubscribe refuses List-Unsubscribe URIs that cannot be written
// as copyFor writes them.
func (r *Relay) checkUnsubscribe(rcpts []Recipient) *Error {
	for _, rc := range rcpts {
		for _, u := range rc.ListUnsubscribe {
			if u == "" || len(u) > MaxListUnsubscribeURI || strings.ContainsAny(u, "<>, \t\r\n\x00") {
				return &Error{Relay: r.cfg.Name, Stage: StageBuild,
					Err: errors.New("build message: a List-Unsubscribe URI is empty, too long, or holds whitespace, an angle bracket or a comma")}
			}
		}
	}
	return nil
}

// hasUnsubscribeHeaders reports whether headers hold List-Unsubscribe or
// List-Unsubscribe-Post.
func hasUnsubscribeHeaders(headers map[string]string) bool {
	for k := range headers {
		if isUnsubscribeHeader(k) {
			return true
		}
	}
	return false
}

func isUnsubscribeHeader(name string) bool {
	return strings.EqualFold(name, "List-Unsubscribe") || strings.EqualFold(name, "List-Unsubscribe-Post")
}

// fromDomain returns the domain of a From address Message accepted, "" if
// it has none.
func fromDomain(from string) string {
	if _, spec, ok := mailaddr.Simple(from); ok {
		from = spec
	} else if a, err := mail.ParseAddress(from); err == nil {
		from = a.Address
	}
	at := strings.LastIndexByte(from, '@')
	if at < 0 {
		return ""
	}
	return from[at+1:]
}

// replyError maps the error of one SMTP command at stage: the relay's
// reply when there is one, else the network error.
func replyError(relay, stage string, err error) *Error {
	e := &Error{Relay: relay, Stage: stage, Err: err, detail: err.Error()}
	var te *textproto.Error
	if errors.As(err, &te) {
		e.Code = te.Code
		e.Enhanced, e.Text = splitReply(te.Code, "", te.Msg)
	}
	return e
}
