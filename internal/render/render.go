package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// limitWriter writes to w until left bytes are used, then fails.
type limitWriter struct {
	left int
	w    io.Writer
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if len(p) > l.left {
		l.left = 0
		return 0, ErrOutputTooLarge
	}
	l.left -= len(p)
	return l.w.Write(p)
}

// WriteString is Write without converting s to bytes.
func (l *limitWriter) WriteString(s string) (int, error) {
	if len(s) > l.left {
		l.left = 0
		return 0, ErrOutputTooLarge
	}
	l.left -= len(s)
	return io.WriteString(l.w, s)
}

// outputBuffers hold rendered parts until they are copied into strings.
var outputBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledOutput bounds the buffer kept for reuse, so that one large
// rendering does not pin its size in the pool.
const maxPooledOutput = 256 << 10

// putBackOutput empties buf, which held a recipient's rendered mail, and
// returns it to the pool unless it grew large.
func putBackOutput(buf *bytes.Buffer) {
	if buf.Cap() > maxPooledOutput {
		return
	}
	buf.Reset()
	outputBuffers.Put(buf)
}

type executor interface {
	Execute(w io.Writer, data any) error
}

// Render validates data against the version's schema and renders it for
// locale. The locale chain is the requested locale and its parents
// ("fr-CA", then "fr"), then the version's DefaultLocale and its parents,
// then the base parts; each part comes from the first locale of the chain
// that overrides it. The rendered subject is trimmed of surrounding white
// space and may not contain CR or LF.
func (c *Compiled) Render(locale string, data map[string]any) (r Rendered, err error) {
	fail := func(part, loc, stage, reason string, e error) error {
		return &Error{Template: c.template, Version: c.version, Locale: loc, Part: part, Stage: stage, Reason: reason, Err: e}
	}
	defer func() {
		if p := recover(); p != nil {
			r = Rendered{}
			err = fail("", "", StageExecute, ReasonPanic, ErrPanic)
		}
	}()
	if c.schema != nil {
		if e := c.validate(data); e != nil {
			return Rendered{}, fail("schema", "", StageSchema, ReasonDataInvalid, e)
		}
	}
	chain := c.chain(locale)
	r.Locale = c.defaultLocale
	if len(chain) > 0 {
		r.Locale = chain[0].name
	}
	subject, subjLoc := c.base.subject, ""
	text, textLoc := c.base.text, ""
	html, htmlLoc := c.base.html, ""
	for i := len(chain) - 1; i >= 0; i-- {
		p := chain[i].parts
		if p.subject != nil {
			subject, subjLoc = p.subject, chain[i].name
		}
		if p.text != nil {
			text, textLoc = p.text, chain[i].name
		}
		if p.html != nil {
			html, htmlLoc = p.html, chain[i].name
		}
	}
	// The parts are rendered into one pooled buffer and copied out at
	// their size: a builder per part would grow by doubling through
	// template's many small writes, for every mail.
	buf := outputBuffers.Get().(*bytes.Buffer)
	defer putBackOutput(buf)
	w := &limitWriter{left: MaxOutputBytes, w: buf}
	exec := func(part, loc string, t executor, fast *fastTemplate) (string, error) {
		buf.Reset()
		if fast != nil {
			left := w.left
			if fast.Execute(w, data) == nil {
				return buf.String(), nil
			}
			// What the fast render does not do, text/template does,
			// from the start, with its own output and errors.
			buf.Reset()
			w.left = left
		}
		if e := t.Execute(w, data); e != nil {
			if errors.Is(e, ErrOutputTooLarge) {
				return "", fail(part, loc, StageLimit, ReasonOutputTooLarge, fmt.Errorf("%w: limit %d bytes", ErrOutputTooLarge, MaxOutputBytes))
			}
			reason := ReasonExecute
			switch msg := e.Error(); {
			case errors.Is(e, ErrPanic):
				reason = ReasonPanic
			case strings.Contains(msg, "no entry for key"):
				reason = ReasonMissingKey
			}
			return "", fail(part, loc, StageExecute, reason, c.sanitize(e))
		}
		return buf.String(), nil
	}
	if r.Subject, err = exec("subject", subjLoc, subject.template, subject.fast); err != nil {
		return Rendered{}, err
	}
	r.Subject = strings.TrimSpace(r.Subject)
	if strings.ContainsAny(r.Subject, "\r\n") {
		return Rendered{}, fail("subject", subjLoc, StageExecute, ReasonSubjectNewline, ErrSubjectNewline)
	}
	if text != nil {
		if r.Text, err = exec("text", textLoc, text.template, text.fast); err != nil {
			return Rendered{}, err
		}
	}
	if html != nil {
		if r.HTML, err = exec("html", htmlLoc, html.template, html.fast); err != nil {
			return Rendered{}, err
		}
	}
	return r, nil
}

// chain returns the locales that exist for the requested locale, most
// specific first.
func (c *Compiled) chain(locale string) []*compiledLocale {
	var tags []string
	add := func(tag string) {
		for tag = normLocale(tag); tag != ""; {
			if !slices.Contains(tags, tag) {
				tags = append(tags, tag)
			}
			i := strings.LastIndexByte(tag, '-')
			if i < 0 {
				break
			}
			tag = tag[:i]
		}
	}
	add(locale)
	add(c.defaultLocale)
	var out []*compiledLocale
	for _, t := range tags {
		if l, ok := c.locales[t]; ok {
			out = append(out, l)
		}
	}
	return out
}

// sanitize keeps an execution error's text unless it prints a data value
// or carries the error of a function or method whose messages may hold
// data values (a method of a data value, the call builtin); that part is
// replaced.
func (c *Compiled) sanitize(e error) error {
	msg := e.Error()
	// Messages of text/template that print the offending value itself.
	for _, m := range []string{"range can't iterate over ", "if/with can't use ", "can't use "} {
		if i := strings.Index(msg, m); i >= 0 {
			return errors.New(msg[:i+len(m)] + "a value (withheld)")
		}
	}
	const marker = "error calling "
	i := strings.Index(msg, marker)
	if i < 0 {
		return errors.New(msg)
	}
	rest := msg[i+len(marker):]
	name, _, _ := strings.Cut(rest, ":")
	if c.safe[name] {
		if errors.Is(e, ErrPanic) {
			return fmt.Errorf("%s%s: %w", msg[:i], marker+name, ErrPanic)
		}
		return errors.New(msg)
	}
	return fmt.Errorf("%s%s: call failed", msg[:i], marker+name)
}

// jsonShaped reports whether v holds only what decoding JSON makes (maps
// of strings to values, slices of values, strings, bools, nil and numbers),
// which the schema validator takes as they are: a job's data, decoded with
// its numbers as json.Number, needs no re-encoding to be checked.
func jsonShaped(v any, depth int) bool {
	if depth > 64 {
		return false
	}
	switch x := v.(type) {
	case nil, bool, string, json.Number, float64, float32, int, int8, int16, int32, int64,
		uint, uint8, uint16, uint32, uint64:
		return true
	case map[string]any:
		for _, e := range x {
			if !jsonShaped(e, depth+1) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range x {
			if !jsonShaped(e, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// validate checks data against the schema. The error names the schema
// keywords that failed, never the data's values or keys.
func (c *Compiled) validate(data map[string]any) error {
	if data == nil {
		data = map[string]any{}
	}
	var inst any = data
	if !jsonShaped(data, 0) {
		// Go values the validator does not know (a []string, a struct):
		// validate what they encode to, as a producer's JSON would be.
		b, err := json.Marshal(data)
		if err != nil {
			return errors.New("data is not representable as JSON")
		}
		if inst, err = jsonschema.UnmarshalJSON(strings.NewReader(string(b))); err != nil {
			return errors.New("data is not representable as JSON")
		}
	}
	if c.fastSchema != nil && c.fastSchema.accepts(inst) {
		return nil
	}
	err := c.schema.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return errors.New("data does not match the schema")
	}
	var locs []string
	var leaves func(v *jsonschema.ValidationError)
	leaves = func(v *jsonschema.ValidationError) {
		if len(v.Causes) > 0 {
			for _, x := range v.Causes {
				leaves(x)
			}
			return
		}
		if len(locs) >= 10 {
			return
		}
		_, frag, _ := strings.Cut(v.SchemaURL, "#")
		loc := "#" + frag + "/" + strings.Join(v.ErrorKind.KeywordPath(), "/")
		if req, ok := v.ErrorKind.(*kind.Required); ok {
			loc += " (missing " + strings.Join(req.Missing, ", ") + ")"
		}
		locs = append(locs, loc)
	}
	leaves(ve)
	return fmt.Errorf("data does not match the schema at %s", strings.Join(locs, "; "))
}
