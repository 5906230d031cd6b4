// Package bounce owns reading the reports that come back to a return path
// or a feedback address: RFC 3464 delivery status notifications (and their
// RFC 6533 internationalized form), RFC 5965 ARF complaint reports, and the
// common bounces that carry no machine-readable part (qmail, Exim, older
// Gmail texts). Parse turns one such message into report.Report values,
// one per recipient, and exposes the returned original's envelope sender
// (Return-Path) so that the caller can find its token; it never decides
// whether a token is valid and never trusts the report.
//
// Parsing is bounded: inputs over MaxReportBytes are refused, at most
// MaxParts MIME parts are read, MIME nesting is followed MaxDepth levels
// deep, embedded messages are read for their header only, and at most
// MaxRecipients reports come out of one message. Diagnostics are one line
// of at most report.MaxDiagnosticBytes and never include the returned
// message's body.
//
// BuildDSN and BuildARF write conformant reports, for tests and tools.
package bounce

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"strings"
	"time"

	"github.com/emersion/go-message"

	"github.com/postline/postline/internal/report"
)

// Bounds of Parse.
const (
	// MaxReportBytes is the largest message Parse reads. Reports return at
	// most the original's header in practice; a whole original of a large
	// mail is cut by the sending MTA or refused here.
	MaxReportBytes = 2 << 20
	// MaxRecipients is the most reports one message yields.
	MaxRecipients = 100
	// MaxParts is the most MIME parts read from one message.
	MaxParts = 64
	// MaxDepth is how deep nested multiparts are followed.
	MaxDepth = 4
	// maxOriginalBytes bounds what is read of a returned original: its
	// header is all that is used.
	maxOriginalBytes = 64 << 10
	// maxTextBytes bounds what is read of a human-readable part.
	maxTextBytes = 256 << 10
)

// ErrTooLarge is returned by Parse for input over MaxReportBytes.
var ErrTooLarge = errors.New("bounce: report over MaxReportBytes")

// Type is what kind of document a message was.
type Type string

// The types of Result.
const (
	TypeDSN          Type = report.SourceDSN          // multipart/report of delivery-status
	TypeARF          Type = report.SourceARF          // multipart/report of feedback-report
	TypeUnstructured Type = report.SourceUnstructured // a bounce in prose
	TypeNotReport    Type = "not_report"              // anything else (an auto-reply, spam)
)

// Result is what Parse read from one message.
type Result struct {
	Type Type
	// Reports holds one report per recipient the message is about; it is
	// empty for TypeNotReport. Token is never set: the caller knows which
	// address the message came to.
	Reports []report.Report
	// ReturnPath is the envelope sender of the original mail as the message
	// shows it, without angle brackets: the returned original's Return-Path
	// header, else an ARF report's Original-Mail-From, else a Postfix DSN's
	// X-Postfix-Sender; "" when none says. It is untrusted text.
	ReturnPath string
	// OriginalTo is the first address of the returned original's To
	// header, "" if none. A report that names no recipient of its own gets
	// it as its Recipient.
	OriginalTo string
	// EnvelopeID is the report's Original-Envelope-Id (DSN or ARF), ""
	// if none.
	EnvelopeID string
}

// Parse reads one message that came back to a return path or a feedback
// address. It returns ErrTooLarge for input over MaxReportBytes, and an
// error when the message has no header at all; a message that is readable
// but no report comes back as TypeNotReport without error. A header that
// MIME cannot read is read leniently and its body taken as prose.
func Parse(raw []byte) (Result, error) {
	if len(raw) > MaxReportBytes {
		return Result{Type: TypeNotReport}, ErrTooLarge
	}
	// A message saved from a mailbox may start with its "From " line.
	if bytes.HasPrefix(raw, []byte("From ")) {
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			raw = raw[i+1:]
		}
	}
	w := walker{}
	var head fields
	top, err := message.Read(bytes.NewReader(raw))
	if err == nil || top != nil {
		w.entity(top, 0)
		head = headerFields(top.Header)
	} else {
		// A header MIME cannot read (a stray line, a bad field name) is
		// still read leniently, and the body as prose.
		head = parseHeader(raw)
		if len(head) == 0 {
			return Result{Type: TypeNotReport}, fmt.Errorf("bounce: read message header: %w", err)
		}
		if i := bytes.Index(raw, []byte("\n\r\n")); i >= 0 {
			w.text = raw[i+3:]
		} else if i := bytes.Index(raw, []byte("\n\n")); i >= 0 {
			w.text = raw[i+2:]
		}
		if len(w.text) > maxTextBytes {
			w.text = w.text[:maxTextBytes]
		}
	}
	date := parseDate(head.get("date"))

	var res Result
	var copied []byte // the original as a prose bounce quotes it
	switch {
	case w.status != nil:
		res = parseDSN(w.status, date)
		if len(res.Reports) == 0 {
			res, copied = parseProse(head, w.text, date)
		}
	case w.feedback != nil:
		res = parseARF(w.feedback, date)
	default:
		res, copied = parseProse(head, w.text, date)
	}
	if res.Type == TypeNotReport {
		return Result{Type: TypeNotReport}, nil
	}
	original := w.original
	if original == nil {
		original = copied
	}
	res.applyOriginal(parseHeader(original))
	return res, nil
}

// applyOriginal takes what the returned original's header says.
func (r *Result) applyOriginal(h fields) {
	if rp := h.get("return-path"); rp != "" {
		if a := cleanAddress(rp); a != "" || r.ReturnPath == "" {
			r.ReturnPath = a
		}
	}
	if to := h.get("to"); to != "" {
		r.OriginalTo = firstAddress(to)
	}
	id := cleanMessageID(h.get("message-id"))
	for i := range r.Reports {
		if r.Reports[i].MessageID == "" {
			r.Reports[i].MessageID = id
		}
		if r.Reports[i].Recipient == "" {
			r.Reports[i].Recipient = r.OriginalTo
		}
	}
}

// firstAddress returns the first address of an address-list header.
func firstAddress(v string) string {
	if list, err := mail.ParseAddressList(OneLine(v, maxFieldBytes)); err == nil && len(list) > 0 {
		return OneLine(list[0].Address, maxAddressBytes)
	}
	first, _, _ := strings.Cut(v, ",")
	if a := cleanAddress(first); strings.Contains(a, "@") {
		return a
	}
	return ""
}

// headerFields converts a parsed MIME header into fields.
func headerFields(h message.Header) fields {
	var fs fields
	it := h.Fields()
	for it.Next() && len(fs) < maxFieldsPerGroup {
		v := it.Value()
		if len(v) > maxFieldBytes {
			v = v[:maxFieldBytes]
		}
		fs = append(fs, field{name: strings.ToLower(it.Key()), value: v})
	}
	return fs
}

// parseDate reads an RFC 5322 date, returning it in UTC; zero if it does
// not parse.
func parseDate(s string) time.Time {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}
	}
	t, err := mail.ParseDate(s)
	if err != nil {
		// Some reporters append a zone name in parentheses mail.ParseDate
		// does not take, or use a bare zone abbreviation.
		if i := strings.IndexByte(s, '('); i > 0 {
			if t, err = mail.ParseDate(strings.TrimSpace(s[:i])); err == nil {
				return t.UTC()
			}
		}
		return time.Time{}
	}
	return t.UTC()
}

// walker collects the parts of a message that matter, bounded.
type walker struct {
	parts    int
	status   []byte // the first message/delivery-status body
	feedback []byte // the first message/feedback-report body
	original []byte // the start of the first returned original
	text     []byte // the first text/plain body (or a non-multipart body)
}

func readBounded(r io.Reader, n int64) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, n))
	if b == nil {
		b = []byte{}
	}
	return b
}

func (w *walker) entity(e *message.Entity, depth int) {
	mt, _, _ := e.Header.ContentType()
	mt = strings.ToLower(mt)
	switch {
	case strings.HasPrefix(mt, "multipart/"):
		if depth >= MaxDepth {
			return
		}
		mr := e.MultipartReader()
		if mr == nil {
			return
		}
		for w.parts < MaxParts {
			p, err := mr.NextPart()
			if err != nil && p == nil {
				return
			}
			w.parts++
			w.entity(p, depth+1)
		}
	case mt == "message/delivery-status" || mt == "message/global-delivery-status":
		if w.status == nil {
			w.status = readBounded(e.Body, MaxReportBytes)
		}
	case mt == "message/feedback-report":
		if w.feedback == nil {
			w.feedback = readBounded(e.Body, MaxReportBytes)
		}
	case mt == "message/rfc822" || mt == "message/global" || mt == "text/rfc822-headers" || mt == "message/global-headers":
		if w.original == nil {
			w.original = readBounded(e.Body, maxOriginalBytes)
		}
	case mt == "text/plain" || mt == "":
		if w.text == nil {
			w.text = readBounded(e.Body, maxTextBytes)
		}
	}
}
