package sender

import (
	"bufio"
	"errors"
	"strings"
)

// The envelope of a transaction with a relay that advertises PIPELINING
// (RFC 2920) goes out in one write: MAIL FROM, every RCPT TO and DATA, the
// replies read afterwards in order. That takes a transaction from 3+n round
// trips (MAIL, n RCPTs, DATA, the final dot) to 2 (the envelope, the final
// dot), which is what bounds one connection's rate against a relay far away.
// go-mail still composes the message; only the envelope commands are
// written here, through go-mail's connection (smtp.Client.Text), and the
// content is dot-stuffed exactly as the DotWriter go-mail's Data uses
// would (writeData).
//
// Not pipelined, on purpose:
//   - the next transaction's MAIL FROM after a final dot (several return
//     paths in one send): DATA must end a group, so the next envelope's
//     DATA would already have its 354 when the previous dot's reply turns
//     out to be a refusal, and the only way out of DATA without sending a
//     message is to drop the connection;
//   - RSET before the next MAIL: it is only sent after a failed
//     transaction, and waiting for its reply is what tells a connection
//     still fit for the next message from one to drop.

// errLineBreak refuses an address that would smuggle a second command into
// the envelope; go-mail's Mail and Rcpt refuse it the same way.
var errLineBreak = errors.New("smtp: a line must not contain CR or LF")

// pipelining reports whether the envelope goes out grouped: the relay of
// the open connection advertised PIPELINING in its EHLO reply, and its
// config does not turn pipelining off.
func (s *Session) pipelining() bool {
	if s.relay.cfg.NoPipelining {
		return false
	}
	ok, _ := s.sc.Extension("PIPELINING")
	return ok
}

// mailCommand is the MAIL FROM command go-mail's Client.Mail would send:
// BODY=8BITMIME, SMTPUTF8 and RET= follow the relay's extensions the same
// way.
func (s *Session) mailCommand(from string) string {
	cmd := "MAIL FROM:<" + from + ">"
	if ok, _ := s.sc.Extension("8BITMIME"); ok {
		cmd += " BODY=8BITMIME"
	}
	if ok, _ := s.sc.Extension("SMTPUTF8"); ok {
		cmd += " SMTPUTF8"
	}
	if ok, _ := s.sc.Extension("DSN"); ok && s.relay.cfg.Notify != "" {
		cmd += " RET=HDRS" // as dial sets it with SetDSNMailReturnOption
	}
	return cmd
}

// rcptCommand is the RCPT TO command go-mail's Client.Rcpt would send.
func (s *Session) rcptCommand(to string) string {
	cmd := "RCPT TO:<" + to + ">"
	if ok, _ := s.sc.Extension("DSN"); ok && s.relay.cfg.Notify != "" {
		cmd += " NOTIFY=" + s.relay.cfg.Notify
	}
	return cmd
}

// exchangePipelined is exchange for a relay that advertised PIPELINING,
// with the same results: a refused RCPT refuses that recipient only, a
// refused MAIL FROM refuses the transaction, 421 or no reply ends it and
// drops the connection. When the relay refused every recipient, the reply to
// DATA (503 or 554) is read and the transaction is reset by transact, as
// after exchange.
func (s *Session) exchangePipelined(body []byte, from string, to []string) (accepted []int, refused []Refusal, e *Error) {
	name := s.relay.cfg.Name
	if strings.ContainsAny(from, "\r\n") {
		return nil, nil, replyError(name, StageMail, errLineBreak)
	}
	for _, addr := range to {
		if strings.ContainsAny(addr, "\r\n") {
			return nil, nil, replyError(name, StageRcpt, errLineBreak)
		}
	}
	text := s.sc.Text
	envelope := text.W
	if err := writeLines(envelope, s.mailCommand(from), to, s.rcptCommand); err != nil {
		// Nothing was read yet: on a kept connection this is how a peer
		// that went away shows up, and staleConnection redials for it.
		return nil, nil, replyError(name, StageMail, err)
	}

	// Replies come in the order of the commands; each must be read before
	// the next, or it would be taken for the next one's.
	if _, _, err := text.ReadResponse(250); err != nil {
		e := replyError(name, StageMail, err)
		if !e.dropsConnection() {
			s.drainRefusedEnvelope(len(to))
		}
		return nil, nil, e
	}
	for i := range to {
		_, _, err := text.ReadResponse(25)
		if err == nil {
			accepted = append(accepted, i)
			continue
		}
		re := replyError(name, StageRcpt, err)
		if re.dropsConnection() {
			// As in exchange: 421 or no reply is about the relay, the
			// replies after it will not come, and the recipients taken so
			// far never got the message.
			return nil, refused, re
		}
		refused = append(refused, Refusal{Index: i, Err: re})
	}
	_, _, dataErr := text.ReadResponse(354)
	if len(accepted) == 0 {
		if dataErr == nil {
			// A relay that takes DATA without a recipient waits for
			// content; the only way out without sending any is to hang up.
			s.closeConn()
		}
		return nil, refused, nil
	}
	if dataErr != nil {
		return nil, refused, replyError(name, StageData, dataErr)
	}

	if err := writeData(text.W, body); err != nil {
		return nil, refused, replyError(name, StageBody, err)
	}
	if _, _, err := text.ReadResponse(250); err != nil {
		e := replyError(name, StageBody, err)
		e.dataEnd = true
		return nil, refused, e
	}
	return accepted, refused, nil
}

// writeLines writes the envelope, MAIL FROM, one RCPT TO per address and
// DATA, and flushes it in one write (as long as it fits the connection's
// 4 KiB buffer: about 60 recipients).
func writeLines(w *bufio.Writer, mail string, to []string, rcpt func(string) string) error {
	_, _ = w.WriteString(mail + "\r\n") // a bufio.Writer keeps its first error for Flush
	for _, addr := range to {
		_, _ = w.WriteString(rcpt(addr) + "\r\n")
	}
	_, _ = w.WriteString("DATA\r\n")
	return w.Flush()
}

// drainRefusedEnvelope reads the replies to the RCPTs and the DATA that
// followed a refused MAIL FROM (503 bad sequence, from any relay that
// follows RFC 2920), so that they are not taken for the replies to the
// next commands. A connection whose replies do not come, or that took the
// DATA anyway, is closed.
func (s *Session) drainRefusedEnvelope(rcpts int) {
	text := s.sc.Text
	for range rcpts {
		if _, _, err := text.ReadResponse(25); err != nil && noReplyOr421(err) {
			s.closeConn()
			return
		}
	}
	_, _, err := text.ReadResponse(354)
	if err == nil || noReplyOr421(err) {
		s.closeConn()
	}
}

// noReplyOr421 reports whether err, from reading a reply, leaves the
// connection unusable (see Error.dropsConnection).
func noReplyOr421(err error) bool {
	return replyError("", "", err).dropsConnection()
}
