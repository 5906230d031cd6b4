package sender

import (
	"bufio"
	"bytes"
	"net/textproto"
	"testing"
)

// dotWriterOutput is what net/textproto's DotWriter writes for b.
func dotWriterOutput(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := textproto.NewWriter(bufio.NewWriter(&out)).DotWriter()
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func writeDataOutput(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := bufio.NewWriterSize(&out, 16)
	if err := writeData(w, b); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestWriteData(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", "", "\r\n.\r\n"},
		{"canonical", "Subject: x\r\n\r\nbody\r\n", "Subject: x\r\n\r\nbody\r\n.\r\n"},
		{"no final line break", "body", "body\r\n.\r\n"},
		{"leading dot", ".hidden\r\n", "..hidden\r\n.\r\n"},
		{"dot lines", "a\r\n.\r\n..\r\nb.\r\n", "a\r\n..\r\n...\r\nb.\r\n.\r\n"},
		{"bare LF", "a\nb\n.c\n", "a\r\nb\r\n..c\r\n.\r\n"},
		{"ends with CR", "a\r", "a\r\n.\r\n"},
		{"bare CR", "a\rb\r\n", "a\rb\r\n.\r\n"},
		{"CR CR LF", "a\r\r\n", "a\r\r\r\n.\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := writeDataOutput(t, []byte(tc.in))
			if string(got) != tc.want {
				t.Errorf("writeData(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if ref := dotWriterOutput(t, []byte(tc.in)); !bytes.Equal(got, ref) {
				t.Errorf("writeData(%q) = %q, DotWriter writes %q", tc.in, got, ref)
			}
		})
	}
}

// FuzzWriteData holds writeData to net/textproto's DotWriter byte for byte,
// and checks that the content reads back unchanged through DotReader when it
// is in canonical form (CRLF line ends, ending with one).
func FuzzWriteData(f *testing.F) {
	for _, s := range []string{"", ".", "a\r\n.\r\n", "\n.\n", "\r\r\n", "x\r", ".\r.\n."} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := writeDataOutput(t, b)
		if ref := dotWriterOutput(t, b); !bytes.Equal(got, ref) {
			t.Fatalf("writeData(%q) = %q, DotWriter writes %q", b, got, ref)
		}
		if !bytes.HasSuffix(got, []byte("\r\n.\r\n")) && !bytes.Equal(got, []byte(".\r\n")) {
			t.Fatalf("writeData(%q) = %q does not end the data with CRLF.CRLF", b, got)
		}
	})
}

func BenchmarkWriteData(b *testing.B) {
	body := bytes.Repeat([]byte("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do.\r\n"), 24)
	w := bufio.NewWriter(nopWriter{})
	b.Run("writeData", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			_ = writeData(w, body)
			_ = w.Flush()
		}
	})
	b.Run("DotWriter", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		tw := textproto.NewWriter(w)
		for b.Loop() {
			d := tw.DotWriter()
			_, _ = d.Write(body)
			_ = d.Close()
		}
	})
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
