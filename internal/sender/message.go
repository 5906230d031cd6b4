package sender

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
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

// message is Message; with deferBody, a single-part mail (one body, no
// attachments) gets no body part from go-mail: it is returned instead, for
// the caller to append, part headers and quoted-printable body, after the
// rendered headers (deferredPart.appendTo). go-mail encodes every body into
// a fresh buffer grown per mail before copying it out (about 4 KB of
// allocations for a 1 KiB body), with a part, an encoder and a buffer per
// body besides; a single part is the last thing it writes, so appending it
// gives the same bytes without any of those (a test holds the two to
// each other byte for byte).
func message(j *job.Job, deferBody bool) (m *mail.Msg, part *deferredPart, err error) {
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
	deferBody = deferBody && len(j.Attachments) == 0 && (j.Text == "" || j.HTML == "")
	switch {
	case deferBody && j.HTML != "":
		part = &deferredPart{contentType: mail.TypeTextHTML, body: j.HTML}
	case deferBody:
		part = &deferredPart{contentType: mail.TypeTextPlain, body: j.Text}
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

// deferredPart is the single body part message left out of the go-mail
// message.
type deferredPart struct {
	contentType mail.ContentType
	body        string
}

// appendTo appends the part to buf as go-mail writes a message's only
// part: its Content-Transfer-Encoding and Content-Type (UTF-8, go-mail's
// default charset) headers, a blank line and the body quoted-printable,
// written straight into buf.
func (p *deferredPart) appendTo(buf *bytes.Buffer) error {
	buf.WriteString("Content-Transfer-Encoding: quoted-printable\r\nContent-Type: ")
	buf.WriteString(string(p.contentType))
	buf.WriteString("; charset=UTF-8\r\n\r\n")
	w := quotedprintable.NewWriter(buf)
	if _, err := w.Write(unsafe.Slice(unsafe.StringData(p.body), len(p.body))); err != nil {
		return err
	}
	return w.Close()
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
