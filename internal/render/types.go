package render

import (
	"errors"
	"fmt"
)

// Limits of what Compile accepts and what Render produces.
const (
	// MaxSourceBytes bounds the template sources of one version: subject,
	// text and HTML of the base parts and of every locale, plus its layout.
	MaxSourceBytes = 256 << 10
	// MaxSchemaBytes bounds a version's JSON Schema.
	MaxSchemaBytes = 64 << 10
	// MaxOutputBytes bounds one render: subject, text and HTML together.
	MaxOutputBytes = 2 << 20
	// MaxTemplateDepth bounds the nesting of {{template}} calls.
	MaxTemplateDepth = 10
	// MaxRangeDepth bounds the nesting of {{range}}, across template calls.
	MaxRangeDepth = 3
	// MaxExpandedNodes bounds the nodes of a template once its
	// {{template}} calls are expanded (range bodies counted once), so that
	// templates calling each other many times cannot take exponential time.
	MaxExpandedNodes = 1 << 20
	// MaxFormatWidth bounds widths and precisions in printf formats.
	MaxFormatWidth = 1024
)

// Version is one immutable version of a template.
type Version struct {
	// Template is the template's name.
	Template string
	// Number is the version number, 1 and up.
	Number int
	// Subject, Text and HTML are the base parts. Subject is required, and
	// at least one of Text or HTML.
	Subject, Text, HTML string
	// Layout names the layout that wraps the text and HTML parts; empty for
	// none.
	Layout string
	// Schema is a JSON Schema the data must satisfy; empty for none.
	Schema []byte
	// Locales holds per-locale overrides, keyed by a BCP 47 tag such as
	// "fr" or "fr-CA". An empty part inherits from the next locale of the
	// chain, and finally from the base parts.
	Locales map[string]LocaleParts
	// DefaultLocale is the locale tried after the requested one and its
	// parents, and the one reported when the base parts are used.
	DefaultLocale string
}

// LocaleParts are one locale's overrides of a version's parts.
type LocaleParts struct {
	Subject, Text, HTML string
}

// Layout wraps the text and HTML parts of the versions that name it. Each of
// its non-empty parts must call {{template "content" .}} where the
// version's part goes.
type Layout struct {
	Name string
	HTML string
	Text string
}

// Labels are a template's version labels. A zero version is an unset label.
type Labels struct {
	// Active is the version mails use by default.
	Active int
	// Canary is the version a share of mails use instead of Active.
	Canary int
	// CanaryPercent is the share of mails (0-100) that use Canary.
	CanaryPercent int
	// Fallback is the version tried when the chosen one fails to render.
	Fallback int
}

// Rendered is the result of a render.
type Rendered struct {
	Subject, Text, HTML string
	// Locale is the locale whose overrides were used (as spelled in
	// Version.Locales), or the version's DefaultLocale when only the base
	// parts were used.
	Locale string
}

// Stages of an Error.
const (
	StageSchema  = "schema"
	StageParse   = "parse"
	StageExecute = "execute"
	StageLimit   = "limit"
)

// Reasons of an Error: low-cardinality codes fit for metric labels.
const (
	ReasonInvalidVersion = "invalid_version"
	ReasonInvalidSchema  = "invalid_schema"
	ReasonDataInvalid    = "data_invalid"
	ReasonSyntax         = "syntax"
	ReasonRecursion      = "recursion"
	ReasonTooLarge       = "too_large"
	ReasonOutputTooLarge = "output_too_large"
	ReasonMissingKey     = "missing_key"
	ReasonSubjectNewline = "subject_newline"
	ReasonPanic          = "panic"
	ReasonExecute        = "execute"
	ReasonNotCompiled    = "not_compiled"
	ReasonRenderFailed   = "render_failed"
)

// Sentinel errors wrapped by Error.
var (
	ErrTooLarge       = errors.New("template source over the size limit")
	ErrOutputTooLarge = errors.New("rendered output over the size limit")
	ErrRecursion      = errors.New("template calls nest in a cycle or too deep")
	ErrSubjectNewline = errors.New("rendered subject contains CR or LF")
	ErrPanic          = errors.New("template function panicked")
	ErrNoVersion      = errors.New("no version to render")
)

// Error is a failure to compile or render a version. Its text names the
// template, version, stage and the place in the template, never data values.
type Error struct {
	Template string
	Version  int
	// Locale and Part ("subject", "text", "html", "layout", "schema") say
	// where it failed, when known.
	Locale string
	Part   string
	// Stage is one of StageSchema, StageParse, StageExecute, StageLimit.
	Stage string
	// Reason is one of the Reason constants.
	Reason string
	Err    error
}

func (e *Error) Error() string {
	where := ""
	if e.Part != "" {
		where = " " + e.Part
	}
	if e.Locale != "" {
		where += " (" + e.Locale + ")"
	}
	return fmt.Sprintf("render: template %q version %d%s: %s/%s: %v", e.Template, e.Version, where, e.Stage, e.Reason, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }
