package templatestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the longest template name.
const MaxNameLen = 64

// NamePattern is the regular expression of a template name, the one the
// database checks; ValidateName accepts exactly the names it matches.
const NamePattern = `^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$`

// Template kinds.
const (
	KindTemplate = "template"
	KindLayout   = "layout"
)

// Label names.
const (
	LabelActive   = "active"
	LabelCanary   = "canary"
	LabelFallback = "fallback"
)

// Errors the store returns (wrapped); test with errors.Is.
var (
	ErrInvalidName      = errors.New("templatestore: invalid template name")
	ErrInvalidDraft     = errors.New("templatestore: invalid draft")
	ErrInvalidLabel     = errors.New("templatestore: invalid label")
	ErrNotFound         = errors.New("templatestore: not found")
	ErrKindMismatch     = errors.New("templatestore: template exists with another kind")
	ErrNoRollbackTarget = errors.New("templatestore: no version to roll back to")
)

// Draft is the content of a version to push, with the template's metadata.
type Draft struct {
	// Name is the template's slug (see ValidateName).
	Name string
	// Kind is KindTemplate or KindLayout. Defaults to KindTemplate.
	Kind string
	// Description and DefaultLocale are the template's metadata: a push
	// updates them but they are not versioned nor part of the content hash.
	Description   string
	DefaultLocale string
	// The versioned content.
	Subject  string
	TextBody string
	HTMLBody string
	// Layout names the layout template the version is wrapped in; "" = none.
	// Push checks the name's form, not that the layout exists (layouts and
	// templates may be pushed in any order).
	Layout string
	// DataSchema, Locales and SampleData are JSON documents, stored as
	// jsonb; empty = none.
	DataSchema json.RawMessage
	Locales    json.RawMessage
	SampleData json.RawMessage
	// CreatedBy says who pushed it (a user, "git:<commit>", ...).
	CreatedBy string
}

// Version is one stored version with its content.
type Version struct {
	Name        string
	Version     int
	Subject     string
	TextBody    string
	HTMLBody    string
	Layout      string
	DataSchema  json.RawMessage // nil = none
	Locales     json.RawMessage // nil = none
	SampleData  json.RawMessage // nil = none
	ContentHash []byte
	CreatedAt   time.Time
	CreatedBy   string
	// DefaultLocale is the template's default locale (its row's, not
	// versioned): the last step of the locale chain before the base parts.
	DefaultLocale string
}

// VersionInfo describes a version without its content.
type VersionInfo struct {
	Version     int
	Subject     string
	Layout      string
	ContentHash []byte
	CreatedAt   time.Time
	CreatedBy   string
}

// Label is one label of a template pointing at a version.
type Label struct {
	Name    string
	Label   string
	Version int
	// Percent is the canary's share of sends (1-100); 0 on other labels.
	Percent   int
	Revision  int64
	UpdatedAt time.Time
	UpdatedBy string
}

// Template is a template's row with its latest version and labels, as
// List returns it.
type Template struct {
	Name          string
	Kind          string
	Description   string
	DefaultLocale string
	LatestVersion int // 0 = no version yet
	Labels        []Label
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Change is one label change. Version 0 means the label was removed.
type Change struct {
	Revision int64
	Name     string
	Label    string
	// From is the version the label pointed at before the change, 0 when it
	// was not set.
	From      int
	Version   int
	Percent   int
	ChangedAt time.Time
	ChangedBy string
	// Reason says why the label moved: the operator's reason, or what
	// moved it along with another label; "" when not said.
	Reason string
}

// Activation is what Activate did: the active label as it is now, and the
// changes it made (none when active already pointed at the version; the
// fallback's first when it moved too).
type Activation struct {
	Active  Label
	Changes []Change
}

// FallbackMoved returns the change of the fallback label the activation
// made, if it made one.
func (a Activation) FallbackMoved() (Change, bool) {
	for _, c := range a.Changes {
		if c.Label == LabelFallback {
			return c, true
		}
	}
	return Change{}, false
}

// MaxReasonBytes is the longest reason a label change records.
const MaxReasonBytes = 500

// ValidateReason checks the reason of a label change: one line of at most
// MaxReasonBytes of UTF-8 without control characters.
func ValidateReason(reason string) error {
	if len(reason) > MaxReasonBytes {
		return fmt.Errorf("%w: reason of %d bytes, longer than %d", ErrInvalidLabel, len(reason), MaxReasonBytes)
	}
	if !utf8.ValidString(reason) || strings.ContainsFunc(reason, unicode.IsControl) {
		return fmt.Errorf("%w: reason is not one line of text", ErrInvalidLabel)
	}
	return nil
}

// Revision identifies the state of all labels: Revision grows by one with
// every label change (in commit order); UpdatedAt is when the last one was
// made.
type Revision struct {
	Revision  int64
	UpdatedAt time.Time
}

// ValidateName reports whether name is a template slug: 1 to MaxNameLen
// lowercase ASCII letters, digits, '-' and '_', starting and ending with a
// letter or digit. The database checks the same pattern.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidName, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0 && i < len(name)-1:
		default:
			return fmt.Errorf("%w: %q: byte %d (%q) is not a lowercase letter or digit, or '-' or '_' inside the name",
				ErrInvalidName, name, i, c)
		}
	}
	return nil
}

// ValidateLabel checks a label change: label is active, canary or fallback;
// version is positive; percent is 1-100 for a canary and 0 for the others.
func ValidateLabel(label string, version, percent int) error {
	switch label {
	case LabelCanary:
		if percent < 1 || percent > 100 {
			return fmt.Errorf("%w: canary percent %d is not within 1-100", ErrInvalidLabel, percent)
		}
	case LabelActive, LabelFallback:
		if percent != 0 {
			return fmt.Errorf("%w: %s takes no percent, got %d", ErrInvalidLabel, label, percent)
		}
	default:
		return fmt.Errorf("%w: %q is not active, canary or fallback", ErrInvalidLabel, label)
	}
	if version < 1 {
		return fmt.Errorf("%w: %s version %d is not positive", ErrInvalidLabel, label, version)
	}
	return nil
}

// validate checks d (after its Kind defaults) and returns d with Kind set.
func (d Draft) validate() (Draft, error) {
	if d.Kind == "" {
		d.Kind = KindTemplate
	}
	if err := ValidateName(d.Name); err != nil {
		return d, err
	}
	if d.Kind != KindTemplate && d.Kind != KindLayout {
		return d, fmt.Errorf("%w: %s: kind %q is not template or layout", ErrInvalidDraft, d.Name, d.Kind)
	}
	if d.Layout != "" {
		if d.Kind == KindLayout {
			return d, fmt.Errorf("%w: %s: a layout cannot have a layout (%q)", ErrInvalidDraft, d.Name, d.Layout)
		}
		if err := ValidateName(d.Layout); err != nil {
			return d, fmt.Errorf("%w: %s: layout: %w", ErrInvalidDraft, d.Name, err)
		}
	}
	for _, f := range []struct {
		field string
		doc   json.RawMessage
	}{{"DataSchema", d.DataSchema}, {"Locales", d.Locales}, {"SampleData", d.SampleData}} {
		if len(f.doc) > 0 && !json.Valid(f.doc) {
			return d, fmt.Errorf("%w: %s: %s is not valid JSON", ErrInvalidDraft, d.Name, f.field)
		}
	}
	return d, nil
}
