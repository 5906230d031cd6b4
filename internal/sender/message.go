package sender

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	netmail "net/mail"
	"net/textproto"
	"slices"
	"strings"
	"unsafe"

	"github.com/wneessen/go-mail"

	"github.com/postline/postline/internal/mailaddr"
	"github.com/postline/postline/job"
)

// Message builds the go-mail message for a job: From, To, Cc, Bcc (envelope
// only), Reply-To, Subject, a text and/or HTML body (both make a
// multipart/alternative), the job's extra headers, attachments, its
// Message-ID and the current Date.
//
// The job is expected to be valid (job.Validate); Message still refuses,
// rather than encodes, anything that could smuggle a header line: CR, LF or
// NUL in the Message-ID, subject, header names and values, attachment file
// names and content types, header names that are not allow-listed by
// job.HeaderAllowed, and content types that do not parse.
func Message(j *job.Job) (*mail.Msg, error) {
	m, _, err := message(j, false)
	return m, err
}

// message is Message; with deferBody, a mail without attachments gets no
// body part from go-mail: its bodies are returned instead, for the caller
// to append, part headers and bodies, after the rendered headers
// (deferredBody.appendTo), each in the lightest transfer encoding that
// carries it (see appendBodyPart). go-mail quoted-printable encodes every
// body, byte by byte, into a fresh buffer grown per mail before copying it
// out, with a part, an encoder and a buffer per body besides; the bodies
// are the last thing it writes, so appending them gives the same message
// without any of those (a test holds the two to each other).
func message(j *job.Job, deferBody bool) (m *mail.Msg, part *deferredBody, err error) {
	if j == nil {
		return nil, nil, errors.New("build message: nil job")
	}
	if err := checkMessageID(j.MessageID); err != nil {
		return nil, nil, fmt.Errorf("build message: message_id: %w", err)
	}
	m = mail.NewMsg(mail.WithNoDefaultUserAgent())
	m.SetMessageIDWithValue(j.MessageID)
	m.SetDate()

	if name, spec, ok := mailaddr.Simple(j.From); ok {
		m.FromMailAddress(&netmail.Address{Name: name, Address: spec})
	} else if err := m.From(j.From); err != nil {
		return nil, nil, fmt.Errorf("build message: from: %w", err)
	}
	for _, f := range []struct {
		name   string
		header mail.AddrHeader
		addrs  []string
	}{
		{"to", mail.HeaderTo, j.To},
		{"cc", mail.HeaderCc, j.Cc},
		{"bcc", mail.HeaderBcc, j.Bcc},
		{"reply_to", mail.HeaderReplyTo, j.ReplyTo},
	} {
		if len(f.addrs) == 0 {
			continue
		}
		if simple := simpleAddresses(f.addrs); simple != nil {
			m.SetAddrHeaderFromMailAddress(f.header, simple...)
			continue
		}
		if err := m.SetAddrHeader(f.header, f.addrs...); err != nil {
			return nil, nil, fmt.Errorf("build message: %s: %w", f.name, err)
		}
	}

	if hasLineBreak(j.Subject) {
		return nil, nil, errors.New("build message: subject contains CR, LF or NUL")
	}
	m.Subject(j.Subject)

	// The bodies are written from the job's strings as the message is
	// rendered: SetBodyString would copy each into a buffer first.
	deferBody = deferBody && len(j.Attachments) == 0
	switch {
	case deferBody:
		part = &deferredBody{text: j.Text, html: j.HTML}
	case j.Text != "" && j.HTML != "":
		m.SetBodyWriter(mail.TypeTextPlain, writeString(j.Text))
		m.AddAlternativeWriter(mail.TypeTextHTML, writeString(j.HTML))
	case j.HTML != "":
		m.SetBodyWriter(mail.TypeTextHTML, writeString(j.HTML))
	default:
		m.SetBodyWriter(mail.TypeTextPlain, writeString(j.Text))
	}

	if err := setHeaders(m, j.Headers); err != nil {
		return nil, nil, fmt.Errorf("build message: %w", err)
	}

	for i, a := range j.Attachments {
		if a.Filename == "" || hasLineBreak(a.Filename) {
			return nil, nil, fmt.Errorf("build message: attachments[%d]: filename is empty or contains CR, LF or NUL", i)
		}
		var opts []mail.FileOption
		if a.ContentType != "" {
			if hasLineBreak(a.ContentType) {
				return nil, nil, fmt.Errorf("build message: attachments[%d]: content_type contains CR, LF or NUL", i)
			}
			if _, _, err := mime.ParseMediaType(a.ContentType); err != nil {
				return nil, nil, fmt.Errorf("build message: attachments[%d]: content_type: %w", i, err)
			}
			opts = append(opts, mail.WithFileContentType(mail.ContentType(a.ContentType)))
		}
		m.AttachReadSeeker(a.Filename, bytes.NewReader(a.Content), opts...)
	}
	return m, part, nil
}

// writeString is a go-mail body writer of s. It hands the encoder the
// string's bytes without a copy (io.WriteString would make one, the
// encoders having no WriteString): io.Writer's contract forbids Write to
// modify or keep them, so the string stays immutable.
func writeString(s string) func(io.Writer) (int64, error) {
	return func(w io.Writer) (int64, error) {
		n, err := w.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
		return int64(n), err
	}
}

// simpleAddresses returns addrs as the addresses SetAddrHeader would parse
// them into when every one is a mailaddr.Simple (ParseAddress would give
// each back as that name and addr-spec), and nil when one is not.
func simpleAddresses(addrs []string) []*netmail.Address {
	all := make([]netmail.Address, len(addrs))
	for i, a := range addrs {
		name, spec, ok := mailaddr.Simple(a)
		if !ok {
			return nil
		}
		all[i] = netmail.Address{Name: name, Address: spec}
	}
	out := make([]*netmail.Address, len(addrs))
	for i := range all {
		out[i] = &all[i]
	}
	return out
}

// deferredBody is the bodies message left out of the go-mail message.
type deferredBody struct {
	text, html string
}

// appendTo appends the bodies to msg, the rendered headers, as go-mail
// lays them out: a body alone as the message's only part (its
// Content-Transfer-Encoding and Content-Type, UTF-8 being go-mail's
// default charset, a blank line and the body), both in a
// multipart/alternative, text first. An empty job has an empty text body.
func (d *deferredBody) appendTo(msg []byte) []byte {
	if d.text == "" || d.html == "" {
		body, contentType := d.text, mail.TypeTextPlain
		if d.html != "" {
			body, contentType = d.html, mail.TypeTextHTML
		}
		return appendPart(msg, contentType, body)
	}
	boundary := randomBoundary()
	msg = append(msg, "Content-Type: multipart/alternative;\r\n boundary="...)
	msg = append(msg, boundary[:]...)
	msg = append(msg, "\r\n\r\n--"...)
	msg = append(msg, boundary[:]...)
	msg = append(msg, "\r\n"...)
	msg = appendPart(msg, mail.TypeTextPlain, d.text)
	msg = append(msg, "\r\n--"...)
	msg = append(msg, boundary[:]...)
	msg = append(msg, "\r\n"...)
	msg = appendPart(msg, mail.TypeTextHTML, d.html)
	msg = append(msg, "\r\n--"...)
	msg = append(msg, boundary[:]...)
	return append(msg, "--\r\n"...)
}

// appendPart appends a part's headers and body, encoded.
func appendPart(msg []byte, contentType mail.ContentType, body string) []byte {
	msg, _ = appendEncodedPart(msg, body, func(b []byte, enc transferEncoding) []byte {
		b = append(b, "Content-Transfer-Encoding: "...)
		b = append(b, enc.String()...)
		b = append(b, "\r\nContent-Type: "...)
		b = append(b, contentType...)
		return append(b, "; charset=UTF-8\r\n\r\n"...)
	})
	return msg
}

// randomBoundary is a multipart boundary as mime/multipart makes one: 30
// random bytes in hexadecimal, which no body holds by chance.
func randomBoundary() [60]byte {
	var raw [30]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	var b [60]byte
	hex.Encode(b[:], raw[:])
	return b
}

// setHeaders sets the job's extra headers in a stable order. Names that
// differ only in case would overwrite each other in an order that depends on
// map iteration, so they are refused.
func setHeaders(m *mail.Msg, headers map[string]string) error {
	if len(headers) == 0 {
		return nil
	}
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	slices.Sort(names)
	// The canonical names set so far, a slice rather than a map: a job
	// carries at most 50 of them (see job.Limits), and this runs for every mail.
	seen := make([]string, 0, len(names))
	for _, name := range names {
		value := headers[name]
		if !validFieldName(name) {
			return fmt.Errorf("header name %q is not a valid field name", name)
		}
		if !job.HeaderAllowed(name) {
			return fmt.Errorf("header %q is not allowed in a job", name)
		}
		canonical := textproto.CanonicalMIMEHeaderKey(name)
		if slices.Contains(seen, canonical) {
			return fmt.Errorf("header %q is given twice with different case", name)
		}
		seen = append(seen, canonical)
		if hasLineBreak(value) {
			return fmt.Errorf("header %q: value contains CR, LF or NUL", name)
		}
		m.SetGenHeader(mail.Header(canonical), value)
	}
	return nil
}

// validFieldName reports whether name is an RFC 5322 field name: printable
// US-ASCII except colon.
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 33 || c > 126 || c == ':' {
			return false
		}
	}
	return true
}

// checkMessageID accepts an RFC 5322 msg-id without its angle brackets.
func checkMessageID(id string) error {
	if id == "" {
		return errors.New("empty")
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 33 || c > 126 || c == '<' || c == '>' {
			return fmt.Errorf("%q contains a space, control, non-ASCII or angle bracket character", id)
		}
	}
	if !strings.Contains(id, "@") {
		return fmt.Errorf("%q has no @", id)
	}
	return nil
}

func hasLineBreak(s string) bool { return strings.ContainsAny(s, "\r\n\x00") }
