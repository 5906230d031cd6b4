package job

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// checkDecodeHashMatches fails t unless DecodeHashInto leaves the job,
// the error and the hash that DecodeInto and Hash give for data.
func checkDecodeHashMatches(t *testing.T, data []byte) {
	t.Helper()
	var want, got Job
	wantErr := DecodeInto(&want, data, Limits{})
	wantHash := want.Hash()
	gotHash, gotErr := DecodeHashInto(&got, data, Limits{})
	if !reflect.DeepEqual(gotErr, wantErr) || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeHashInto(%q) = %#v, %v; DecodeInto %#v, %v", data, got, gotErr, want, wantErr)
	}
	if !bytes.Equal(gotHash, wantHash) {
		t.Fatalf("DecodeHashInto(%q) hashes to %x, DecodeInto and Hash to %x", data, gotHash, wantHash)
	}
}

func TestDecodeHashCopiesCanonicalBodies(t *testing.T) {
	marshalled := func(text, html string) string {
		j := validJob()
		j.Text, j.HTML = text, html
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	withBodies := func(text, html string) string {
		return strings.Replace(validDoc, `"text":"Hello"`, `"text":`+text+`,"html":`+html, 1)
	}
	tests := []struct {
		name       string
		doc        string
		text, html bool // copied from the document
	}{
		{"json.Marshal", marshalled("line\n\t\"q\" \\ é\u2028\x01", "<p class=\"x\">A & B</p>\n"), true, true},
		{"no escapes", withBodies(`"plain"`, `"also plain"`), true, true},
		{"raw HTML characters", withBodies(`"a < b"`, `"<p>"`), false, false},
		{"a slash escape", withBodies(`"a\/b"`, `"a/b"`), false, true},
		{"an escape of a letter", withBodies(`"\u0041"`, `"\u003c"`), false, true},
		{"upper-case hex digits", withBodies(`"\u003C"`, `"\u001f"`), false, true},
		{"a surrogate pair", withBodies(`"\ud83d\ude00"`, `"😀"`), false, true},
		{"a raw U+2028", withBodies("\"a\u2028b\"", `"a\u2028b"`), false, true},
		{"escaped U+FFFD", withBodies(`"\ufffd"`, "\"\ufffd\""), false, true},
		{"a long escape of a newline", withBodies(`"a\u000ab"`, `"a\nb"`), false, true},
		{"empty (omitted from the hash)", withBodies(`""`, `"x"`), true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.doc)
			checkDecodeHashMatches(t, data)
			var j Job
			var bodies canonicalBodies
			if err := decodeInto(&j, data, Limits{}, &bodies); err != nil {
				t.Fatal(err)
			}
			if (bodies.text != nil) != tt.text || (bodies.html != nil) != tt.html {
				t.Errorf("copied text %v, html %v; want %v, %v", bodies.text != nil, bodies.html != nil, tt.text, tt.html)
			}
		})
	}
}

// FuzzDecodeHashMatchesHash holds DecodeHashInto, which copies canonical
// bodies from the document into the hash, to DecodeInto and Hash, which
// encode them again, for any document; and, over jobs json.Marshal
// writes, to the reference hash.
func FuzzDecodeHashMatchesHash(f *testing.F) {
	for _, d := range []string{validDoc, `{}`, `not json`,
		strings.Replace(validDoc, `"text":"Hello"`, `"text":"a\u003cb\n\u2028\/\u00e9","html":"\u003cp\u003e"`, 1),
		strings.Replace(validDoc, `"text":"Hello"`, `"text":"<b>","html":"\u003C\u0000"`, 1),
		strings.Replace(validDoc, `"text":"Hello"`, `"text":"x","text":"y"`, 1),
		strings.Replace(validDoc, `"Hi"`, `1`, 1),
	} {
		f.Add([]byte(d), "", "")
	}
	f.Add([]byte(nil), "text & <html>\n", "\u2028\x00\xff")
	f.Fuzz(func(t *testing.T, data []byte, text, html string) {
		checkDecodeHashMatches(t, data)
		j := validJob()
		j.Text, j.HTML = text, html
		marshalled, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		checkDecodeHashMatches(t, marshalled)
		var got Job
		hash, err := DecodeHashInto(&got, marshalled, Limits{})
		if err == nil && !bytes.Equal(hash, referenceHash(got)) {
			t.Fatalf("DecodeHashInto(%s) hash differs from json.Marshal's", marshalled)
		}
	})
}
