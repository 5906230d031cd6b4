package sender

import (
	"bufio"
	"bytes"
	"testing"
)

// States of writeDataPerByte, as net/textproto's DotWriter names them.
const (
	dotBegin = iota
	dotBeginLine
	dotData
	dotCR
)

// writeDataPerByte is writeData as it was before it went from line feed
// to line feed: a state machine over every byte, as DotWriter's. The bulk
// one must equal it byte for byte.
func writeDataPerByte(w *bufio.Writer, b []byte) error {
	state, start := dotBegin, 0
	for i, c := range b {
		switch state {
		case dotBegin, dotBeginLine:
			state = dotData
			if c == '.' {
				_, _ = w.Write(b[start:i]) // a bufio.Writer keeps its first error for Flush
				_ = w.WriteByte('.')
				start = i
			}
			fallthrough
		case dotData:
			if c == '\r' {
				state = dotCR
			}
			if c == '\n' {
				_, _ = w.Write(b[start:i])
				_ = w.WriteByte('\r')
				start = i
				state = dotBeginLine
			}
		case dotCR:
			state = dotData
			if c == '\n' {
				state = dotBeginLine
			}
		}
	}
	if _, err := w.Write(b[start:]); err != nil {
		return err
	}
	switch state {
	case dotBeginLine:
		_, _ = w.WriteString(".\r\n")
	case dotCR:
		_, _ = w.WriteString("\n.\r\n")
	default:
		_, _ = w.WriteString("\r\n.\r\n")
	}
	return nil
}

// writeDataPerLine is dot-stuffing as RFC 5321 section 4.5.2 states it,
// line by line, for content whose every CR starts a CRLF: each line ends
// in CRLF, one that starts with a dot gets another, and the data ends with
// a line holding a single dot (after an empty line for empty content, as
// DotWriter has it).
func writeDataPerLine(b []byte) []byte {
	var out []byte
	lines := bytes.Split(b, []byte("\n"))
	last := len(lines) - 1
	if last > 0 && len(lines[last]) == 0 {
		lines = lines[:last] // b ends with a line break
	}
	for _, line := range lines {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if bytes.HasPrefix(line, []byte(".")) {
			out = append(out, '.')
		}
		out = append(out, line...)
		out = append(out, '\r', '\n')
	}
	return append(out, ".\r\n"...)
}

// FuzzWriteDataMatchesReferences holds the bulk writeData to the per-byte
// one it replaced, byte for byte, and, on content whose CRs all start a
// CRLF, to dot-stuffing done line by line.
func FuzzWriteDataMatchesReferences(f *testing.F) {
	for _, s := range []string{"", ".", "\n", "\r", "a\r\n.\r\n", "\n.\n", "\r\r\n", "\r\r\r\n", "x\r", ".\r.\n.",
		"line\r\n.dot\r\n..\r\nend", "a\n\n.\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := writeDataOutput(t, b)
		var out bytes.Buffer
		w := bufio.NewWriterSize(&out, 16)
		if err := writeDataPerByte(w, b); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, out.Bytes()) {
			t.Fatalf("writeData(%q) = %q, the per-byte one writes %q", b, got, out.Bytes())
		}
		if !bytes.Contains(bytes.ReplaceAll(b, []byte("\r\n"), nil), []byte("\r")) {
			if want := writeDataPerLine(b); !bytes.Equal(got, want) {
				t.Fatalf("writeData(%q) = %q, line by line %q", b, got, want)
			}
		}
	})
}
