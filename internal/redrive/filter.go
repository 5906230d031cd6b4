package redrive

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/timearg"
)

// Filter selects dead letters. Zero fields select everything.
type Filter struct {
	// Since and Until bound the dead-letter time: Since <= t < Until; a
	// zero time is unbounded.
	Since, Until time.Time
	// Tenants, Reasons and Classes list the accepted values of the job's
	// tenant, the dead-letter reason and the dead-letter class; empty
	// accepts any. A dead letter that is not a job has no tenant: a tenant
	// filter never selects it.
	Tenants, Reasons, Classes []string
	// MessageIDs lists the accepted Message-IDs (the record key): one
	// mail's dead letters, from its page in the console; empty accepts any.
	MessageIDs []string
	// Limit stops the selection after this many matches, partitions read
	// in order; 0 is no limit.
	Limit int
}

// Match reports whether l passes the filter's time, tenant, reason, class
// and Message-ID conditions (not the limit).
func (f Filter) Match(l DeadLetter) bool {
	switch {
	case len(f.MessageIDs) > 0 && !slices.Contains(f.MessageIDs, l.MessageID),
		len(f.Reasons) > 0 && !slices.Contains(f.Reasons, l.Reason),
		len(f.Classes) > 0 && !slices.Contains(f.Classes, l.Class),
		len(f.Tenants) > 0 && (l.Tenant == "" || !slices.Contains(f.Tenants, l.Tenant)),
		!f.Since.IsZero() && l.Time.Before(f.Since),
		!f.Until.IsZero() && !l.Time.Before(f.Until):
		return false
	}
	return true
}

// The names of a FilterSpec's fields in its errors, unless the caller
// names them otherwise.
const (
	FieldSince     = "since"
	FieldUntil     = "until"
	FieldTenant    = "tenant"
	FieldReason    = "reason"
	FieldClass     = "class"
	FieldMessageID = "message-id"
	FieldLimit     = "limit"
)

// maxListValue bounds one tenant, reason or class: they are compared with
// header and document values, never longer in practice.
const maxListValue = 256

// maxMessageIDValue bounds one Message-ID: a header line.
const maxMessageIDValue = 998

// FilterSpec is a Filter as an operator writes it: from flags or a form.
type FilterSpec struct {
	// Since and Until are RFC 3339 times or durations before now ("90m",
	// "2h", "7d"); "" is unbounded.
	Since, Until string
	// Tenants, Reasons and Classes each take values repeated or
	// comma-separated; blanks are dropped and duplicates kept once.
	Tenants, Reasons, Classes []string
	// MessageIDs take Message-IDs the same way, each with or without its
	// angle brackets.
	MessageIDs []string
	// Limit is 0 (no limit) or more.
	Limit int
}

// FieldError is a FilterSpec (or Options) field that does not parse.
type FieldError struct {
	// Field is the field's name (FieldSince ... or as the caller named it).
	Field string
	msg   string
}

func (e *FieldError) Error() string { return e.msg }

// Parse checks the spec and returns its Filter, durations counted back from
// now. name gives each field's name in errors (a command line's "--since",
// a form's label); nil keeps FieldSince and the others.
func (s FilterSpec) Parse(now time.Time, name func(field string) string) (Filter, error) {
	if name == nil {
		name = func(field string) string { return field }
	}
	fail := func(field, format string, args ...any) error {
		return &FieldError{Field: field, msg: name(field) + " " + fmt.Sprintf(format, args...)}
	}
	out := Filter{Limit: s.Limit}
	if s.Limit < 0 {
		return Filter{}, fail(FieldLimit, "%d: must be 0 (no limit) or more", s.Limit)
	}
	lists := []struct {
		field string
		in    []string
		out   *[]string
		max   int
	}{{FieldTenant, s.Tenants, &out.Tenants, maxListValue}, {FieldReason, s.Reasons, &out.Reasons, maxListValue},
		{FieldClass, s.Classes, &out.Classes, maxListValue}, {FieldMessageID, s.MessageIDs, &out.MessageIDs, maxMessageIDValue}}
	for _, l := range lists {
		for _, v := range l.in {
			for v := range strings.SplitSeq(v, ",") {
				v = strings.TrimSpace(v)
				if l.field == FieldMessageID {
					v = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(v, "<"), ">"))
				}
				if err := checkListValue(v, l.max); err != nil {
					return Filter{}, fail(l.field, "%q: %v", v, err)
				}
				if v != "" && !slices.Contains(*l.out, v) {
					*l.out = append(*l.out, v)
				}
			}
		}
	}
	var err error
	if out.Since, err = timearg.Parse(s.Since, now); err != nil {
		return Filter{}, fail(FieldSince, "%q: %v", s.Since, err)
	}
	if out.Until, err = timearg.Parse(s.Until, now); err != nil {
		return Filter{}, fail(FieldUntil, "%q: %v", s.Until, err)
	}
	if !out.Since.IsZero() && !out.Until.IsZero() && !out.Since.Before(out.Until) {
		return Filter{}, fail(FieldSince, "%s is not before %s %s", jobheader.FormatTime(out.Since), name(FieldUntil), jobheader.FormatTime(out.Until))
	}
	return out, nil
}

func checkListValue(v string, maxBytes int) error {
	if len(v) > maxBytes {
		return fmt.Errorf("longer than %d bytes", maxBytes)
	}
	if strings.ContainsFunc(v, unicode.IsControl) {
		return errors.New("contains a control character")
	}
	return nil
}
