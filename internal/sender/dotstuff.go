package sender

import "bufio"

// States of writeData, as net/textproto's DotWriter names them.
const (
	dotBegin = iota
	dotBeginLine
	dotData
	dotCR
)

// writeData buffers b as the content of a DATA command and its end, the
// line with the single dot, for the caller to flush: byte for byte what
// net/textproto's DotWriter writes (a dot that starts a line doubled, a
// bare LF sent as CRLF, CRLF added before the final dot when the content
// does not end with one). DotWriter goes through the buffer a byte at a
// time, which was a tenth of the worker's CPU; this copies the runs
// between the bytes it changes. The error is a failed write of the content
// (the relay cannot have taken the message); a failed write of the end,
// which the caller's flush does, is left to show in the reply that does
// not come, as go-mail does.
func writeData(w *bufio.Writer, b []byte) error {
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
