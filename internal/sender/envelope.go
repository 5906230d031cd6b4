package sender

import (
	"bytes"
	"errors"
	"net/mail"
	"net/textproto"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/job"
)

// Recipient is one recipient of a send and the return path it gets.
type Recipient struct {
	// Address is the bare address (addr-spec) for RCPT TO.
	Address string
	// ReturnPath is the MAIL FROM address for this recipient: reports
	// about it come back there. "" means the job's From address.
	ReturnPath string
}

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
}

// Refusal is one recipient the relay refused at RCPT TO.
type Refusal struct {
	// Index is the recipient's index in the recipients passed to SendTo.
	Index int
	// Err is the refusal, with Stage StageRcpt and the relay's reply.
	Err *Error
}

var errNoRecipients = errors.New("no recipients")

// transaction is one MAIL FROM and the recipients that share it.
type transaction struct {
	from    string
	indexes []int // into the recipients of the send
}

func (t transaction) addrs(rcpts []Recipient) []string {
	out := make([]string, len(t.indexes))
	for i, k := range t.indexes {
		out[i] = rcpts[k].Address
	}
	return out
}

// transactions groups rcpts by return path, in the order each return path
// first appears; from replaces an empty one.
func transactions(rcpts []Recipient, from string) []transaction {
	if _, spec, ok := job.SimpleAddress(from); ok {
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
		k := slices.IndexFunc(out, func(t transaction) bool { return t.from == rp })
		if k < 0 {
			k = len(out)
			out = append(out, transaction{from: rp})
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

// dkimMetrics counts signing outcomes, one series per result.
type dkimMetrics struct {
	signed, noKey, failed prometheus.Counter
}

func newDKIMMetrics(reg prometheus.Registerer) (*dkimMetrics, error) {
	v, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "postline",
		Subsystem: "sender",
		Name:      "dkim_total",
		Help:      "Messages rendered with DKIM signing configured, by result: signed, no_key (no key for the From domain: sent unsigned) or error (not sent).",
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	return &dkimMetrics{
		signed: v.WithLabelValues(dkimSigned),
		noKey:  v.WithLabelValues(dkimNoKey),
		failed: v.WithLabelValues(dkimError),
	}, nil
}

// render builds the job's message and writes it out once, so that every
// transaction of a send carries the same bytes (one Date, one boundary, one
// DKIM signature). With DKIM configured it signs the bytes with the key of
// the From address's domain, when there is one. The message is written into
// buf, reset first; the bytes returned may be buf's, valid until its next
// use.
func (r *Relay) render(j *job.Job, buf *bytes.Buffer) ([]byte, *Error) {
	name := r.cfg.Name
	msg, part, err := message(j, true)
	if err != nil {
		return nil, &Error{Provider: name, Stage: StageBuild, Err: err}
	}
	buf.Reset()
	if _, err := msg.WriteTo(buf); err != nil {
		return nil, &Error{Provider: name, Stage: StageBuild, Err: err}
	}
	if part != nil {
		if err := part.appendTo(buf); err != nil {
			return nil, &Error{Provider: name, Stage: StageBuild, Err: err}
		}
	}
	if r.cfg.DKIM == nil {
		return buf.Bytes(), nil
	}
	signed, ok, err := r.cfg.DKIM.Sign(fromDomain(j.From), buf.Bytes())
	switch {
	case err != nil:
		r.dkim.failed.Inc()
		return nil, &Error{Provider: name, Stage: StageSign, Err: err}
	case !ok:
		r.dkim.noKey.Inc()
		return buf.Bytes(), nil
	}
	r.dkim.signed.Inc()
	return signed, nil
}

// fromDomain returns the domain of a From address Message accepted, "" if
// it has none.
func fromDomain(from string) string {
	if _, spec, ok := job.SimpleAddress(from); ok {
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
func replyError(provider, stage string, err error) *Error {
	e := &Error{Provider: provider, Stage: stage, Err: err, detail: err.Error()}
	var te *textproto.Error
	if errors.As(err, &te) {
		e.Code = te.Code
		e.Enhanced, e.Text = splitReply(te.Code, "", te.Msg)
	}
	return e
}
