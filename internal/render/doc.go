// Package render owns the pure rendering core of versioned mail templates:
// it compiles a template version (subject, text and HTML parts, an optional
// layout, per-locale overrides and a JSON Schema for the data), renders it
// with bounded output, picks the version a mail uses (active, canary or a
// requested one) with a stable hash of its Message-ID, and renders a plan of
// versions in order so that a mail still goes out when one version breaks.
//
// The package does no I/O: values in, results out. Storage of versions and
// labels, and the metrics of which version rendered, belong to its callers.
//
// # Template language
//
// Subjects and text parts use text/template, HTML parts use html/template
// (contextual escaping on). A key missing from the data is an error. Besides
// the built-in functions of text/template, templates may call:
//
//	upper S          S in upper case
//	lower S          S in lower case
//	default D V      V, or D when V is empty (nil, "", 0, false, empty list or map);
//	                 an absent key is still an error: write (index . "key") to allow it
//	join SEP LIST    the elements of LIST (a list of any) joined by SEP
//	date LAYOUT T    T formatted with the Go time layout LAYOUT; T is a time.Time,
//	                 an RFC 3339 string or Unix seconds (number)
//	truncate N S     S cut to at most N runes, the last one "…" when cut
//	printf F ARGS    fmt.Sprintf, refusing '*' and widths or precisions over 1024
//
// # Limits
//
// A version's sources are refused over MaxSourceBytes and its schema over
// MaxSchemaBytes. Templates may not call themselves (directly or through
// others), nest template calls deeper than MaxTemplateDepth, nest range
// deeper than MaxRangeDepth, range over a number literal, or expand (with
// their calls) to more than MaxExpandedNodes nodes. A render writes at most
// MaxOutputBytes over all its parts; text/template cannot be interrupted, so
// these bounds are what keeps a render short. Loops over the data take time
// in proportion to its size (to the power of the range nesting): bounding
// the data is the caller's job.
//
// # Speed
//
// Parts that use only text, field chains, {{.}}, plain {{range}} and
// {{template "name" .}} render straight from their parse trees when the
// values are strings or JSON numbers (fastexec.go), and schemas of only
// type, required, properties and items accept data without the validator
// (fastschema.go); anything else, and every failure, goes the slow way,
// so output and errors are those of text/template, html/template and the
// validator (testdata/golden holds renders from before these paths).
package render
