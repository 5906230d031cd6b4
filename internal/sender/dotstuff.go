package sender

import (
	"bufio"
	"bytes"
)

// writeData buffers b as the content of a DATA command and its end, the
// line with the single dot, for the caller to flush: byte for byte what
// net/textproto's DotWriter writes (a dot that starts a line doubled, a
// bare LF sent as CRLF, CRLF added before the final dot when the content
// does not end with one). DotWriter goes through the content a byte at a
// time, which was a tenth of the worker's CPU; this goes from line feed to
// line feed (bytes.IndexByte), looks at the bytes either side of each, and
// copies the runs between the bytes it adds. The error is a failed write
// of the content (the relay cannot have taken the message); a failed
// write of the end, which the caller's flush does, is left to show in the
// reply that does not come, as go-mail does.
func writeData(w *bufio.Writer, b []byte) error {
	start := 0 // of the content not yet written
	if len(b) > 0 && b[0] == '.' {
		_ = w.WriteByte('.') // a bufio.Writer keeps its first error for Flush
	}
	for i := 0; ; {
		k := bytes.IndexByte(b[i:], '\n')
		if k < 0 {
			break
		}
		lf := i + k
		if !endsInCR(b[:lf]) {
			_, _ = w.Write(b[start:lf])
			_ = w.WriteByte('\r')
			start = lf
		}
		if lf+1 < len(b) && b[lf+1] == '.' {
			_, _ = w.Write(b[start : lf+1])
			_ = w.WriteByte('.')
			start = lf + 1
		}
		i = lf + 1
	}
	if _, err := w.Write(b[start:]); err != nil {
		return err
	}
	switch {
	case len(b) > 0 && b[len(b)-1] == '\n':
		_, _ = w.WriteString(".\r\n")
	case endsInCR(b):
		_, _ = w.WriteString("\n.\r\n")
	default:
		_, _ = w.WriteString("\r\n.\r\n")
	}
	return nil
}

// endsInCR reports whether DotWriter, having read b, waits for the LF of a
// CRLF: b ends in a CR that does not itself follow such a CR, which is an
// odd run of CRs (DotWriter takes the second CR of "\r\r" for content, so
// an LF after it is bare).
func endsInCR(b []byte) bool {
	n := 0
	for n < len(b) && b[len(b)-1-n] == '\r' {
		n++
	}
	return n%2 == 1
}
