package job

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeReportsInvalidUTF8First holds Decode to its first check: a
// document within the size limit that is not valid UTF-8 is rejected for
// that, at its first bad byte, whatever else is wrong with it and wherever
// the bad byte is (a string, a key, between tokens, after a syntax error
// or nesting too deep), although the scanner checks only the strings it
// reads and the whole document only once it is rejected.
func FuzzDecodeReportsInvalidUTF8First(f *testing.F) {
	for _, s := range []string{
		validDoc,
		strings.Replace(validDoc, `"Hello"`, "\"H\xffello\"", 1),
		strings.Replace(validDoc, `"Hello"`, "\"H\\n\xc3(\"", 1),
		strings.Replace(validDoc, `"Hello"`, "\"caf\xc3\xa9\\u003c\"", 1),
		strings.Replace(validDoc, `"text"`, "\"te\xe2\x82xt\"", 1),
		"{\"version\":1,\xff}",
		"{\"version\":1,\"x\":tru\xff}",
		"{\"version\":1,\"subject\":\"\\x\xff\"}",
		"{\"version\":1,\"to\":" + strings.Repeat("[", 200) + "\"\xff\"" + strings.Repeat("]", 200) + "}",
		"{\"version\":2,\"subject\":\"\xed\xa0\x80\"}",
		"\xef\xbb\xbf{}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var j Job
		err := DecodeInto(&j, data, Limits{})
		if utf8.Valid(data) || len(data) > (Limits{}).WithDefaults().MaxMessageBytes {
			return
		}
		want := fmt.Sprintf("not valid UTF-8 at byte %d", firstInvalidUTF8(data))
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Reason != ReasonMalformedJSON || ve.Field != "" || ve.Detail != want {
			t.Fatalf("Decode(%q) = %v, want malformed_json: %s", data, err, want)
		}
		if j.MessageID != "" || j.Text != "" || j.To != nil {
			t.Fatalf("Decode(%q) leaves a job behind: %+v", data, j)
		}
	})
}
