// Package configerr owns the error a component returns when one field of
// its Config is invalid. The error names the field in its type, not only in
// its text, so that a binary can tell the operator which setting to change
// (internal/config.NameSetting) without reading the message.
package configerr

import (
	"errors"
	"fmt"
)

// FieldError is an invalid Config field. Its message is the component's
// own (it names the field and says why, never a secret); Field names the
// field as the Config spells it: "Lease", "Schedule.Delays" for a nested
// struct's field.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// New returns a FieldError for field with the message err.
func New(field string, err error) error {
	return &FieldError{Field: field, Err: err}
}

// Errorf returns a FieldError for field with a message formatted like
// fmt.Errorf (a %w operand is wrapped).
func Errorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Within returns err as the error of a nested Config: every FieldError in
// it is reported under parent ("Schedule" makes "Delays" "Schedule.Delays"),
// with message, the nested error wrapped as %w, as its text.
func Within(parent string, message func(error) error, err error) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		return message(err)
	}
	return &FieldError{Field: parent + "." + fe.Field, Err: message(err)}
}

// Fields returns the FieldErrors in err's tree, in the order errors.As
// would meet them (depth first, joined errors in order).
func Fields(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}
