package job

import (
	"fmt"
	"maps"
	"mime"
	"net/mail"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/internal/mailaddr"
)

// allowedHeaders are the custom headers a job may set besides X-* headers.
// The worker sets every other header itself (Message-ID, From, To, Date,
// MIME-Version, Content-*), so a job cannot override them. They are in
// lower case.
var allowedHeaders = []string{
	"list-unsubscribe",      // RFC 2369
	"list-unsubscribe-post", // RFC 8058 one-click unsubscribe
	"list-id",               // RFC 2919
	"in-reply-to",           // threading
	"references",            // threading
	"auto-submitted",        // RFC 3834
	"precedence",            // "bulk", "list": still read by autoresponders
}

// reservedHeaderPrefix marks headers that only Postline itself may set.
const reservedHeaderPrefix = "x-postline-"

// HeaderAllowed reports whether a job may carry the custom header name:
// any X-* header except X-Postline-*, and List-Unsubscribe,
// List-Unsubscribe-Post, List-Id, In-Reply-To, References, Auto-Submitted
// and Precedence. Names match case-insensitively. It does not check that
// name is a valid field name.
func HeaderAllowed(name string) bool {
	// Compared without lower-casing a copy: the sender asks for every
	// header of every mail. The names that pass are ASCII, and no
	// non-ASCII letter lower-cases to one that would make a name pass.
	if hasPrefixFold(name, "x-") {
		return !hasPrefixFold(name, reservedHeaderPrefix) && len(name) > len("x-")
	}
	for _, allowed := range allowedHeaders {
		if len(name) == len(allowed) && hasPrefixFold(name, allowed) {
			return true
		}
	}
	return false
}

// hasPrefixFold reports whether s begins with prefix, a lower-case ASCII
// string, ignoring ASCII case.
func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// Normalize puts j in the canonical form Publisher writes and Decode
// returns the message ID in: angle brackets stripped from MessageID (the
// bare local@domain is what jobs are keyed and deduplicated by), an empty Priority set to PriorityNormal and a
// zero Version set to SchemaVersion. Decode does not call it for the
// version: a document without a version is rejected, not upgraded.
func (j *Job) Normalize() {
	j.MessageID = trimAngle(j.MessageID)
	if j.Priority == "" {
		j.Priority = PriorityNormal
	}
	if j.Version == 0 {
		j.Version = SchemaVersion
	}
}

// Expired reports whether the job's deadline has passed at now. A job
// without NotAfter never expires.
func (j Job) Expired(now time.Time) bool {
	return j.NotAfter != nil && now.After(*j.NotAfter)
}

// Validate checks j against the schema and limits (zero fields of limits
// take their defaults) and returns a *ValidationError for the first problem,
// checking in this order: version, message_id, from, reply_to, recipients
// (none, too many, then to, cc and bcc in order), subject, body, headers
// (by name; with Unsubscribe, List-Unsubscribe then List-Unsubscribe-Post
// are refused), attachments, priority, tenant, template (name, version,
// locale, data), metadata (by key).
//
// A template job (Templated) needs no body; its template name must follow
// the template store's name rule (see TemplateRef.Name) and its version be
// a number, a label or empty. On a job with bodies the template's name and
// version are free text kept for audit. On both, the locale must look like
// a language tag, and template data is bounded (see Limits), its encoding
// counting toward limits.MaxBodyBytes with the text and HTML.
// It accepts a message ID with or without angle brackets and an empty
// priority, so it may be called before or after Normalize. It does not
// check NotAfter: see Expired.
func (j *Job) Validate(limits Limits) error {
	limits = limits.WithDefaults()
	if j.Version != SchemaVersion {
		return invalid(ReasonUnsupportedVersion, "version", "version %d, want %d", j.Version, SchemaVersion)
	}
	if err := validateMessageID(j.MessageID); err != nil {
		return err
	}
	if j.From == "" {
		return invalid(ReasonMissingField, "from", "required")
	}
	if err := validateAddress("from", -1, j.From); err != nil {
		return err
	}
	for i, a := range j.ReplyTo {
		if err := validateAddress("reply_to", i, a); err != nil {
			return err
		}
	}
	n := len(j.To) + len(j.Cc) + len(j.Bcc)
	if n == 0 {
		return invalid(ReasonMissingField, "to", "at least one recipient in to, cc or bcc is required")
	}
	if n > limits.MaxRecipients {
		return invalid(ReasonTooManyRecipients, "", "%d recipients, limit %d", n, limits.MaxRecipients)
	}
	for _, list := range []struct {
		name  string
		addrs []string
	}{{"to", j.To}, {"cc", j.Cc}, {"bcc", j.Bcc}} {
		for i, a := range list.addrs {
			if err := validateAddress(list.name, i, a); err != nil {
				return err
			}
		}
	}
	if err := checkLine("subject", j.Subject, maxSubjectLength); err != nil {
		return err
	}
	templated := j.Templated()
	if j.Text == "" && j.HTML == "" && !templated {
		return invalid(ReasonMissingBody, "", "text or html is required")
	}
	if n := len(j.Text) + len(j.HTML); n > limits.MaxBodyBytes {
		return invalid(ReasonOversizeBody, "", "text and html are %d bytes, limit %d", n, limits.MaxBodyBytes)
	}
	if err := validateHeaders(j.Headers); err != nil {
		return err
	}
	if j.Unsubscribe {
		if err := ownUnsubscribeHeaders(j.Headers); err != nil {
			return err
		}
	}
	if err := validateAttachments(j.Attachments, limits.MaxAttachmentBytes); err != nil {
		return err
	}
	switch j.Priority {
	case "", PriorityUrgent, PriorityNormal, PriorityBulk:
	default:
		return invalid(ReasonInvalidPriority, "priority", "%q is not urgent, normal or bulk", truncate(string(j.Priority)))
	}
	if err := checkLine("tenant", j.Tenant, maxTenantLength); err != nil {
		return err
	}
	if j.Template != nil {
		if err := validateTemplate(j.Template, templated, len(j.Text)+len(j.HTML), limits.MaxBodyBytes); err != nil {
			return err
		}
	}
	return validateMetadata(j.Metadata)
}

// validateMessageID checks an RFC 5322 msg-id, with or without its angle
// brackets: id-left "@" id-right, printable ASCII without spaces or angle
// brackets.
func validateMessageID(id string) error {
	const field = "message_id"
	if id == "" {
		return invalid(ReasonMissingField, field, "required")
	}
	if hasInjection(id) {
		return invalid(ReasonHeaderInjection, field, "contains CR, LF or NUL")
	}
	bare := trimAngle(id)
	if bare == id && (strings.HasPrefix(id, "<") || strings.HasSuffix(id, ">")) {
		return invalid(ReasonInvalidMessageID, field, "empty or unbalanced angle brackets")
	}
	if len(bare) > maxMessageIDLength {
		return invalid(ReasonInvalidMessageID, field, "%d characters, limit %d", len(bare), maxMessageIDLength)
	}
	for i := 0; i < len(bare); i++ {
		if c := bare[i]; c <= ' ' || c > '~' || c == '<' || c == '>' {
			return invalid(ReasonInvalidMessageID, field, "character %q at %d is not printable ASCII or is a space or angle bracket", c, i)
		}
	}
	left, right, ok := strings.Cut(bare, "@")
	if !ok || left == "" || right == "" || strings.Contains(right, "@") {
		return invalid(ReasonInvalidMessageID, field, "want exactly one @ between a non-empty id-left and id-right")
	}
	return nil
}

// validateAddress checks the address at list[index] (index < 0: the field
// list itself, as "from"). The field's name is formatted only for an
// error: Validate runs once per mail, for every recipient.
func validateAddress(list string, index int, addr string) error {
	field := func() string {
		if index < 0 {
			return list
		}
		return list + "[" + strconv.Itoa(index) + "]"
	}
	if addr == "" {
		return invalid(ReasonInvalidAddress, field(), "empty address")
	}
	if hasInjection(addr) {
		return invalid(ReasonHeaderInjection, field(), "contains CR, LF or NUL")
	}
	if len(addr) > maxAddressLength {
		return invalid(ReasonInvalidAddress, field(), "%d bytes, limit %d", len(addr), maxAddressLength)
	}
	if _, _, ok := mailaddr.Simple(addr); ok {
		return nil // ParseAddress accepts it as is: a name of plain words, nothing to decode
	}
	a, err := mail.ParseAddress(addr)
	if err != nil {
		return invalid(ReasonInvalidAddress, field(), "%v", err)
	}
	// ParseAddress decodes RFC 2047 encoded words in the display name, which
	// can smuggle a line break past the check above.
	if hasInjection(a.Name) || hasInjection(a.Address) {
		return invalid(ReasonHeaderInjection, field(), "decoded display name contains CR, LF or NUL")
	}
	return nil
}

func validateHeaders(h map[string]string) error {
	if len(h) > maxHeaders {
		return invalid(ReasonOversizeField, "headers", "%d headers, limit %d", len(h), maxHeaders)
	}
	if len(h) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(h))
	for i, name := range names {
		// The name is the producer's: shortened, the field stays small in
		// a dead letter's headers and a log line whatever its length.
		// It is formatted only for an error.
		field := func() string { return "headers." + truncate(name) }
		if hasInjection(name) {
			return invalid(ReasonHeaderInjection, "headers", "header name %q contains CR, LF or NUL", truncate(name))
		}
		if err := validFieldName(name); err != nil {
			return invalid(ReasonHeaderNotAllowed, field(), "%v", err)
		}
		if !HeaderAllowed(name) {
			return invalid(ReasonHeaderNotAllowed, field(), "not on the allow-list (X-* except X-Postline-*, List-Unsubscribe, List-Unsubscribe-Post, List-Id, In-Reply-To, References, Auto-Submitted, Precedence)")
		}
		// At most maxHeaders ASCII names (validFieldName): comparing with
		// the ones before costs less than a set.
		for _, other := range names[:i] {
			if strings.EqualFold(other, name) {
				return invalid(ReasonHeaderNotAllowed, field(), "same header as %q (names are case-insensitive)", other)
			}
		}
		if err := checkLineLazy(field, h[name], maxHeaderValueLength); err != nil {
			return err
		}
	}
	return nil
}

// ownUnsubscribeHeaders refuses the List-Unsubscribe headers of a job that
// asks for Postline's (Unsubscribe): the worker writes both, per
// recipient, and a second pair would leave the recipient's mail client to
// pick one.
func ownUnsubscribeHeaders(h map[string]string) error {
	for _, want := range []string{"list-unsubscribe", "list-unsubscribe-post"} {
		for name := range h {
			if strings.EqualFold(name, want) {
				return invalid(ReasonHeaderNotAllowed, "headers."+truncate(name),
					"not allowed with unsubscribe true: the worker sets List-Unsubscribe and List-Unsubscribe-Post itself")
			}
		}
	}
	return nil
}

// validFieldName checks an RFC 5322 field name: printable US-ASCII except
// colon, at least one character.
func validFieldName(name string) error {
	if name == "" {
		return fmt.Errorf("empty header name")
	}
	if len(name) > maxHeaderNameLength {
		return fmt.Errorf("header name is %d characters, limit %d", len(name), maxHeaderNameLength)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < '!' || c > '~' || c == ':' {
			return fmt.Errorf("character %q at %d is not allowed in a header name", c, i)
		}
	}
	return nil
}

func validateAttachments(atts []Attachment, limit int) error {
	total := 0
	for i, a := range atts {
		// The fields are formatted only for an error.
		filename := func() string { return attachmentField(i, ".filename") }
		contentType := func() string { return attachmentField(i, ".content_type") }
		if a.Filename == "" {
			return invalid(ReasonMissingField, filename(), "required")
		}
		if err := checkLineLazy(filename, a.Filename, maxFilenameLength); err != nil {
			return err
		}
		if i := strings.IndexAny(a.Filename, "\"/\\"); i >= 0 {
			return invalid(ReasonInvalidField, filename(), "contains %q", a.Filename[i])
		}
		if a.ContentType != "" {
			if err := checkLineLazy(contentType, a.ContentType, maxHeaderValueLength); err != nil {
				return err
			}
			mt, _, err := mime.ParseMediaType(a.ContentType)
			if err != nil {
				return invalid(ReasonInvalidField, contentType(), "%v", err)
			}
			if !strings.Contains(mt, "/") {
				return invalid(ReasonInvalidField, contentType(), "%q is not type/subtype", mt)
			}
		}
		total += len(a.Content)
		if total > limit {
			return invalid(ReasonOversizeAttachment, attachmentField(i, ""), "attachments total at least %d bytes, limit %d", total, limit)
		}
	}
	return nil
}

// attachmentField is the path of member of the i-th attachment.
func attachmentField(i int, member string) string {
	return "attachments[" + strconv.Itoa(i) + "]" + member
}

func validateMetadata(m map[string]string) error {
	if len(m) > maxMetadataEntries {
		return invalid(ReasonOversizeField, "metadata", "%d entries, limit %d", len(m), maxMetadataEntries)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if hasInjection(k) {
			return invalid(ReasonHeaderInjection, "metadata", "key %q contains CR, LF or NUL", truncate(k))
		}
		field := func() string { return "metadata." + truncate(k) } // for an error only
		if k == "" {
			return invalid(ReasonInvalidField, field(), "empty key")
		}
		if len(k) > maxMetadataKeyLength {
			return invalid(ReasonOversizeField, field(), "key is %d bytes, limit %d", len(k), maxMetadataKeyLength)
		}
		if err := checkLineLazy(field, m[k], maxMetadataValueLength); err != nil {
			return err
		}
	}
	return nil
}

// checkLine rejects a value with CR, LF or NUL, or longer than limit bytes.
func checkLine(field, v string, limit int) error {
	if hasInjection(v) {
		return invalid(ReasonHeaderInjection, field, "contains CR, LF or NUL")
	}
	if len(v) > limit {
		return invalid(ReasonOversizeField, field, "%d bytes, limit %d", len(v), limit)
	}
	return nil
}

// checkLineLazy is checkLine with the field's name formatted only for an
// error.
func checkLineLazy(field func() string, v string, limit int) error {
	if len(v) <= limit && !hasInjection(v) {
		return nil
	}
	return checkLine(field(), v, limit)
}

func hasInjection(s string) bool {
	return strings.ContainsAny(s, "\r\n\x00")
}

// trimAngle strips one pair of enclosing angle brackets around a non-empty
// id. "<>" is kept: stripped, it would read as "no message ID" and
// Publisher would give the job a new one instead of rejecting it.
func trimAngle(id string) string {
	if len(id) > 2 && id[0] == '<' && id[len(id)-1] == '>' {
		return id[1 : len(id)-1]
	}
	return id
}

// truncate shortens a value quoted in an error detail.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
