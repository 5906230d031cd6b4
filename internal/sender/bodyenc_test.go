package sender

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime/quotedprintable"
	"strings"
	"testing"
)

func TestAppendBodyPartPicksTheLightestEncoding(t *testing.T) {
	long := strings.Repeat("x", maxLineOctets)
	tests := []struct {
		name string
		body string
		want transferEncoding
	}{
		{"empty", "", enc7bit},
		{"ASCII, short lines", "Hello,\nthe order ships today.\n", enc7bit},
		{"CRLF line ends", "one\r\ntwo\r\n", enc7bit},
		{"HTML with attributes", "<p class=\"a\"><a href=\"https://x.test/?a=1&b=2\">link</a></p>\n", enc7bit},
		{"tabs inside lines", "a\tb\n\tc\n", enc7bit},
		{"a line of 998 octets", long + "\n" + long, enc7bit},
		{"a line of 999 octets", long + "x\nshort\n", encQuotedPrintable},
		{"a space ending a line", "trailing \nspace\n", encQuotedPrintable},
		{"a tab ending the body", "trailing\t", encQuotedPrintable},
		{"a bare CR", "a\rb\n", encQuotedPrintable},
		{"a NUL", "a line of text with a NUL: \x00.\n", encQuotedPrintable},
		{"a control character", "bell\a\n", encQuotedPrintable},
		{"DEL", "a line of text with a DEL: \x7f.\n", encQuotedPrintable},
		{"a short body with a NUL", "a\x00b", encBase64},
		{"some non-ASCII", "Grüße from the team, see you soon!\n", encQuotedPrintable},
		{"mostly non-ASCII", "Здравствуйте, ваш заказ отправлен.\n", encBase64},
		{"binary", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", encBase64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, got := appendBodyPart([]byte("prefix"), tt.body)
			if got != tt.want {
				t.Errorf("encoding %s, want %s", got, tt.want)
			}
			if !bytes.HasPrefix(out, []byte("prefix")) {
				t.Fatalf("the prefix was overwritten: %q", out)
			}
			if dec := decodePart(t, got, out[len("prefix"):]); dec != canonicalLines(tt.body, got) {
				t.Errorf("decodes to %q, want %q", dec, canonicalLines(tt.body, got))
			}
		})
	}
}

// decodePart decodes a part's body as a receiving MUA does.
func decodePart(t *testing.T, enc transferEncoding, body []byte) string {
	t.Helper()
	var r io.Reader = bytes.NewReader(body)
	switch enc {
	case encQuotedPrintable:
		r = quotedprintable.NewReader(r)
	case encBase64:
		r = base64.NewDecoder(base64.StdEncoding, r)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decoding %s: %v: %q", enc, err, body)
	}
	return string(out)
}

// canonicalLines is what a text part of s decodes to in any encoding: its
// line breaks CRLF, a bare CR being a line break too, as
// mime/quotedprintable writes it.
func canonicalLines(s string, _ transferEncoding) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

// referenceQuotedPrintable is mime/quotedprintable's encoding of s, as
// go-mail writes a part.
func referenceQuotedPrintable(s string) []byte {
	var buf bytes.Buffer
	w := quotedprintable.NewWriter(&buf)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return buf.Bytes()
}

// FuzzBodyEncodings holds each encoder to its reference: quoted-printable
// to mime/quotedprintable byte for byte, base64 to encoding/base64 once the
// lines are joined, 7bit to the body with CRLF line ends, each within its
// line limit; and every encoding to the body when decoded.
func FuzzBodyEncodings(f *testing.F) {
	for _, s := range []string{"", "plain\n", "a=b \t\r\n", "\r=\n", "\r\r\n\n", strings.Repeat("y", 80) + "=é\n",
		strings.Repeat("a ", 38) + "\n", strings.Repeat("=", 30), "\xff\x00\x7f", strings.Repeat("long line ", 120)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := appendQuotedPrintable(nil, s), referenceQuotedPrintable(s); !bytes.Equal(got, want) {
			t.Fatalf("quoted-printable of %q:\n got  %q\n want %q", s, got, want)
		}
		b64 := appendBase64Lines(nil, s)
		for _, line := range bytes.SplitAfter(b64, []byte("\r\n")) {
			if len(line) > 78 || len(line) > 0 && !bytes.HasSuffix(line, []byte("\r\n")) {
				t.Fatalf("base64 line %q of %q", line, s)
			}
		}
		if got := string(bytes.ReplaceAll(b64, []byte("\r\n"), nil)); got != base64.StdEncoding.EncodeToString([]byte(s)) {
			t.Fatalf("base64 of %q: %q", s, got)
		}
		out, enc := appendBodyPart(nil, s)
		if enc == enc7bit {
			if want := canonicalLines(s, enc7bit); string(out) != want {
				t.Fatalf("7bit of %q: %q, want %q", s, out, want)
			}
			for _, line := range strings.Split(string(out), "\r\n") {
				if len(line) > maxLineOctets || strings.ContainsAny(line, "\r\n\x00") || strings.HasSuffix(line, " ") {
					t.Fatalf("7bit line %q of %q", line, s)
				}
			}
			for _, c := range out {
				if c >= 0x80 {
					t.Fatalf("7bit part of %q holds byte %#x", s, c)
				}
			}
		}
		// The Writer drops an LF after a CR when only escaped bytes came
		// between (see appendQuotedPrintable): such a body does not decode
		// back, there or here.
		if enc != encQuotedPrintable || !strings.Contains(s, "\r") {
			if dec := decodePart(t, enc, out); dec != canonicalLines(s, enc) {
				t.Fatalf("%s of %q decodes to %q", enc, s, dec)
			}
		}
	})
}

func BenchmarkQuotedPrintable(b *testing.B) {
	for _, tc := range []struct{ name, body string }{
		{"ascii", benchBody(100 << 10)},
		{"non-ascii", strings.ReplaceAll(benchBody(100<<10), "fox", "föx")},
	} {
		b.Run(tc.name+"/bulk", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			var out []byte
			for b.Loop() {
				out = appendQuotedPrintable(out[:0], tc.body)
			}
		})
		b.Run(tc.name+"/mime-quotedprintable", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				w := quotedprintable.NewWriter(&buf)
				_, _ = w.Write([]byte(tc.body))
				_ = w.Close()
			}
		})
	}
}

func BenchmarkAppendBodyPart(b *testing.B) {
	for _, tc := range []struct{ name, body string }{
		{"text-7bit", benchBody(100<<10 - 16)}, // whole lines
		{"html-7bit", benchHTML(100 << 10)},
		{"text-quoted-printable", strings.ReplaceAll(benchBody(100<<10), "fox", "föx")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			var out []byte
			for b.Loop() {
				out, _ = appendBodyPart(out[:0], tc.body)
			}
		})
	}
}
