package mailquery

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/postline/postline/internal/idempotency"
)

// ErrInvalidFilter is wrapped by every error of Filter.Validate, so callers
// (the console, postctl) can tell a bad request from a failed read.
var ErrInvalidFilter = errors.New("invalid filter")

// maxFieldBytes bounds each text field of a Filter: longer values cannot
// match a stored value (addresses, IDs and reasons are stored cut shorter)
// and would only make a query large.
const maxFieldBytes = 1024

// States lists the values Filter.State takes: every mail status, then the
// recipient states that are not also mail statuses.
var States = func() []string {
	var out []string
	for _, s := range idempotency.Statuses {
		out = append(out, string(s))
	}
	for _, s := range idempotency.RecipientStates {
		if !slices.Contains(out, string(s)) {
			out = append(out, string(s))
		}
	}
	return out
}()

// isMailStatus and isRecipientState say which column a state is matched on.
func isMailStatus(s string) bool     { return idempotency.Status(s).Valid() }
func isRecipientState(s string) bool { return idempotency.RecipientState(s).Valid() }

// FilterError is an invalid field of a Filter; it wraps ErrInvalidFilter.
type FilterError struct {
	// Field is the Filter field's name ("State", "Cursor").
	Field string
	// Problem says what is wrong with it.
	Problem string
}

func (e *FilterError) Error() string {
	return ErrInvalidFilter.Error() + ": " + e.Field + ": " + e.Problem
}

func (e *FilterError) Unwrap() error { return ErrInvalidFilter }

// filterError is an error naming the invalid field.
func filterError(field, format string, args ...any) error {
	return &FilterError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first invalid field of f by name. A valid filter
// may still carry a cursor of another filter's listing: Find refuses it.
func (f Filter) Validate() error {
	for _, fld := range []struct{ name, v string }{
		{"MessageID", f.MessageID}, {"Recipient", f.Recipient}, {"Tenant", f.Tenant},
		{"Reason", f.Reason}, {"Cursor", f.Cursor},
	} {
		if len(fld.v) > maxFieldBytes {
			return filterError(fld.name, "longer than %d bytes", maxFieldBytes)
		}
		if !utf8.ValidString(fld.v) || strings.ContainsRune(fld.v, 0) {
			return filterError(fld.name, "not valid UTF-8 text")
		}
	}
	if f.Recipient != "" {
		if _, err := ParseRecipient(f.Recipient); err != nil {
			return filterError("Recipient", "%v", err)
		}
	}
	if f.State != "" && !slices.Contains(States, f.State) {
		return filterError("State", "unknown state %q, want one of %s", f.State, strings.Join(States, ", "))
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return filterError("Since", "%s is not before Until %s", f.Since.UTC().Format(time.RFC3339Nano),
			f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return filterError("Limit", "%d is out of range 1 to %d (0: %d)", f.Limit, MaxLimit, DefaultLimit)
	}
	if f.Cursor != "" {
		if _, err := decodeCursor(f.Cursor); err != nil {
			return filterError("Cursor", "%v", err)
		}
	}
	return nil
}

// limit is the page size f asks for.
func (f Filter) limit() int {
	if f.Limit == 0 {
		return DefaultLimit
	}
	return f.Limit
}

// RecipientMatch is a parsed Filter.Recipient.
type RecipientMatch struct {
	// Local is the local part, matched exactly; "" selects every address
	// of Domain.
	Local string
	// Domain is the domain, lowercased: domains match whatever their case.
	Domain string
}

// Address is the address m matches, or "@domain" for a whole domain.
func (m RecipientMatch) Address() string { return m.Local + "@" + m.Domain }

// ParseRecipient parses an address ("Ada@Example.COM": local part "Ada",
// domain "example.com") or a whole domain ("@example.com"). Surrounding
// space and angle brackets are dropped. The domain is what follows the last
// "@", so a quoted local part holding one still parses.
func ParseRecipient(s string) (RecipientMatch, error) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '<' && s[len(s)-1] == '>' {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return RecipientMatch{}, fmt.Errorf("%q has no @: want local@domain or @domain", s)
	}
	local, domain := s[:at], strings.ToLower(s[at+1:])
	switch {
	case domain == "":
		return RecipientMatch{}, fmt.Errorf("%q has no domain after its @", s)
	case strings.ContainsAny(domain, " \t\r\n@<>,;"):
		return RecipientMatch{}, fmt.Errorf("domain %q is not a domain", domain)
	case strings.ContainsAny(local, "\r\n"):
		return RecipientMatch{}, fmt.Errorf("local part %q holds a line break", local)
	}
	return RecipientMatch{Local: local, Domain: domain}, nil
}
