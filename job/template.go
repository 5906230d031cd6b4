package job

import (
	"encoding/json"
	"regexp"
	"strconv"
)

// templateNamePattern is the regular expression a template job's template
// name matches: 1 to 64 characters of a-z, 0-9, '-' and '_', starting and
// ending with a letter or digit. It is the template store's name rule.
const templateNamePattern = `^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$`

// The template labels a template job's TemplateRef.Version may name instead
// of a version number.
const (
	templateLabelActive   = "active"
	templateLabelCanary   = "canary"
	templateLabelFallback = "fallback"
)

// maxTemplateVersionDigits bounds a version number: 9 digits always fit
// the template store's integer column.
const maxTemplateVersionDigits = 9

// localePattern is the regular expression of TemplateRef.Locale, a loose
// reading of a BCP 47 tag: a language of 2 to 8 letters, then subtags of 1
// to 8 letters or digits after a '-', at most maxLocaleLength characters.
const localePattern = `^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$`

var (
	templateNameRE = regexp.MustCompile(templateNamePattern)
	localeRE       = regexp.MustCompile(localePattern)
)

// validateTemplate checks t. On a template job the name, version and locale
// must be what the renderer can resolve; on a job with bodies the name and
// version are free text kept for audit. Data and locale are checked on
// both. bodyBytes is len(Text)+len(HTML): the encoded data counts toward
// the same limit.
func validateTemplate(t *TemplateRef, templated bool, bodyBytes, maxBodyBytes int) error {
	if t.Name == "" {
		return invalid(ReasonMissingField, "template.name", "required when template is set")
	}
	if err := checkLine("template.name", t.Name, maxTemplateFieldLength); err != nil {
		return err
	}
	if err := checkLine("template.version", t.Version, maxTemplateFieldLength); err != nil {
		return err
	}
	if templated {
		if len(t.Name) > maxTemplateNameLength {
			return invalid(ReasonOversizeField, "template.name", "%d bytes, limit %d", len(t.Name), maxTemplateNameLength)
		}
		if !templateNameRE.MatchString(t.Name) {
			return invalid(ReasonInvalidField, "template.name", "%q is not 1-%d characters of a-z, 0-9, '-' and '_' starting and ending with a letter or digit", truncate(t.Name), maxTemplateNameLength)
		}
		if err := validateTemplateVersion(t.Version); err != nil {
			return err
		}
	}
	if t.Locale != "" {
		if err := checkLine("template.locale", t.Locale, maxLocaleLength); err != nil {
			return err
		}
		if !localeRE.MatchString(t.Locale) {
			return invalid(ReasonInvalidField, "template.locale", "%q is not a language tag such as fr-CA", truncate(t.Locale))
		}
	}
	if len(t.Data) == 0 {
		return nil
	}
	// The data's JSON encoding, as json.Marshal writes it, written by hand
	// into a pooled buffer when it holds only what Decode produces (as Hash
	// does): Marshal's reflection was most of a template job's validation.
	bp := hashBuffers.Get().(*[]byte)
	data, ok := appendAny((*bp)[:0], t.Data, 0)
	if ok && cap(data) <= maxPooledHashBuffer {
		defer func() { *bp = data[:0]; hashBuffers.Put(bp) }()
	}
	if !ok {
		var err error
		if data, err = json.Marshal(t.Data); err != nil {
			return invalid(ReasonInvalidField, "template.data", "not encodable as JSON: %v", err)
		}
	}
	if err := checkDataShape(data); err != nil {
		return err
	}
	if n := bodyBytes + len(data); n > maxBodyBytes {
		return invalid(ReasonOversizeBody, "template.data", "text, html and template data are %d bytes, limit %d", n, maxBodyBytes)
	}
	return nil
}

// validateTemplateVersion checks a template job's version: empty, a label,
// or a version number from 1 without leading zeros.
func validateTemplateVersion(v string) error {
	switch v {
	case "", templateLabelActive, templateLabelCanary, templateLabelFallback:
		return nil
	}
	ok := len(v) <= maxTemplateVersionDigits && v[0] != '0'
	if ok {
		_, err := strconv.ParseUint(v, 10, 32)
		ok = err == nil
	}
	if !ok {
		return invalid(ReasonInvalidField, "template.version", "%q is not a version number, active, canary, fallback or empty", truncate(v))
	}
	return nil
}

// checkDataShape bounds the nesting depth and the key count of data, the
// JSON encoding of template data as json.Marshal writes it (valid and
// compact), so that any Go value a producer puts in Data is measured as it
// will be sent.
func checkDataShape(data []byte) error {
	depth, keys := 0, 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			// Skip the string; a key is a string followed by ':'.
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if i+1 < len(data) && data[i+1] == ':' {
				keys++
				if keys > maxTemplateDataKeys {
					return invalid(ReasonOversizeField, "template.data", "more than %d keys", maxTemplateDataKeys)
				}
			}
		case '{', '[':
			depth++
			if depth > maxTemplateDataDepth {
				return invalid(ReasonTooDeep, "template.data", "objects and arrays nest deeper than %d", maxTemplateDataDepth)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}
