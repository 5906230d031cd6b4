package job

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeStringsMatchEncodingJSON holds the bulk string scanning and
// unescaping to encoding/json: for any string literal as the text body of
// a valid job, Decode reads the same string encoding/json reads, and
// rejects the document exactly when encoding/json does or when the literal
// is not UTF-8 (where Decode is stricter). The scanner without Decode's
// UTF-8 check (its other unescaping path) must read what encoding/json
// reads too, invalid bytes replaced the same way.
func FuzzDecodeStringsMatchEncodingJSON(f *testing.F) {
	for _, s := range []string{"", "Hello", `a\"b\\c\/d\b\f\n\r\t`, `\u00e9\u2028\ud83d\ude00`, `\ud800`, `\udc00\ud800x`,
		`\ud800\u0041`, `\ud83d\u`, `\ud83d\uZZZZ`, `\x`, "tab\tin", "\x00", "\xff", "é✓", `\u003cp class=\"x\"\u003e` + strings.Repeat("y", 40),
		strings.Repeat(`abcdefgh\n`, 20), `\`, `"`, "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, literal string) {
		data := []byte(strings.Replace(validDoc, `"text":"Hello"`, `"text":"`+literal+`"`, 1))
		// The literal alone, so that one closing the string early (a","x":"b)
		// is not taken for a text body.
		var want struct{ Text string }
		jsonErr := json.Unmarshal([]byte(`{"Text":"`+literal+`"}`), &want)
		if jsonErr != nil && json.Valid(data) {
			return // not one string: the other fuzz targets cover the document
		}

		var got Job
		err := DecodeInto(&got, data, Limits{})
		var ve *ValidationError
		switch {
		case !utf8.ValidString(literal):
			if err == nil || !errors.As(err, &ve) || ve.Reason != ReasonMalformedJSON {
				t.Fatalf("Decode takes the invalid UTF-8 of %q: %v", literal, err)
			}
		case jsonErr != nil:
			if err == nil || !errors.As(err, &ve) || ve.Reason != ReasonMalformedJSON {
				t.Fatalf("encoding/json rejects %q (%v), Decode says %v", literal, jsonErr, err)
			}
		case errors.As(err, &ve) && ve.Reason == ReasonMalformedJSON:
			t.Fatalf("Decode rejects %q, which encoding/json reads: %v", literal, err)
		case got.Text != want.Text:
			// A job Validate refuses still comes back decoded.
			t.Fatalf("Decode reads %q as %q, encoding/json as %q", literal, got.Text, want.Text)
		}

		var unchecked Job
		s := scanner{data: data, maxDepth: 100, job: &unchecked}
		if docErr := s.document(); (docErr == nil) != (jsonErr == nil) {
			t.Fatalf("the scanner says %v, encoding/json %v, of %q", docErr, jsonErr, literal)
		}
		if jsonErr == nil && unchecked.Text != want.Text {
			t.Fatalf("the scanner reads %q as %q, encoding/json as %q", literal, unchecked.Text, want.Text)
		}
	})
}
