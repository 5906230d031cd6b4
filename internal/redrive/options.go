package redrive

import (
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Rate bounds, in re-drives (records published) a second.
const (
	// DefaultRate is what an operator gets without asking: well under what
	// a small fleet sends, so a re-drive does not crowd out new mail.
	DefaultRate = 100.0
	// MaxRate is the most a re-drive may ask for.
	MaxRate = 10000.0
)

// Bounds of the operator's words on the redriven events.
const (
	MaxNoteBytes  = 1024
	MaxActorBytes = 256
)

// The names of Options' fields in its errors.
const (
	FieldRate  = "rate"
	FieldNote  = "note"
	FieldActor = "actor"
)

// Options are what a Run needs besides the selection.
type Options struct {
	// Rate is how many dead letters a second are published, at most:
	// more than 0 and at most MaxRate. Required.
	Rate float64
	// Note is the operator's reason, on every redriven event; optional.
	Note string
	// Actor names who re-drives (a login, the console's user); optional.
	Actor string
	// Progress, if set, is called with the summary so far after each
	// batch; it must not block for long: the run waits for it.
	Progress func(Summary)
	// Invalid, if set, is called for each selected record that is not a
	// valid job (skipped: a re-drive would only dead-letter it again).
	Invalid func(l DeadLetter, err error)
}

// Validate reports the first invalid option; name names the fields as in
// FilterSpec.Parse (nil: FieldRate and the others).
func (o Options) Validate(name func(field string) string) error {
	if name == nil {
		name = func(field string) string { return field }
	}
	fail := func(field, format string, args ...any) error {
		return &FieldError{Field: field, msg: name(field) + " " + fmt.Sprintf(format, args...)}
	}
	if math.IsNaN(o.Rate) || o.Rate <= 0 || o.Rate > MaxRate {
		return fail(FieldRate, "%g: want more than 0 and at most %g a second", o.Rate, MaxRate)
	}
	for _, t := range []struct {
		field, v string
		max      int
	}{{FieldNote, o.Note, MaxNoteBytes}, {FieldActor, o.Actor, MaxActorBytes}} {
		switch {
		case len(t.v) > t.max:
			return fail(t.field, "is %d bytes: at most %d", len(t.v), t.max)
		case !utf8.ValidString(t.v):
			return fail(t.field, "is not valid UTF-8")
		case strings.ContainsFunc(t.v, unicode.IsControl):
			return fail(t.field, "contains a control character (a line break, a tab): write it on one line")
		}
	}
	return nil
}
