package sender

import (
	"bufio"
	"errors"
	"slices"
	"strings"

	"github.com/postline/postline/job"
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
// With SendToThen the next mail's envelope goes out in the same write as
// this message and its final dot: one write and one round trip a mail. The
// relay ends a transaction at the final dot whatever it replies, so the
// envelope behind it starts a new one and its replies follow the dot's.
// A mail with several return paths is not chained: its transactions go one
// after the other as before.
//
// Not sent with PIPELINING, on purpose: RSET before the next MAIL. It is only sent
// after a failed transaction, and waiting for its reply is what tells a
// connection still fit for the next message from one to drop.

// envelope is a transaction's MAIL FROM and RCPT TO addresses, written
// ahead of its turn behind the previous message (see SendToThen).
type envelope struct {
	messageID string
	from      string
	to        []string
}

// matches reports whether the one transaction of txs, for message
// messageID and rcpts, is the envelope e.
func (e *envelope) matches(messageID string, txs []transaction, rcpts []Recipient) bool {
	if messageID != e.messageID || len(txs) != 1 || txs[0].from != e.from || len(txs[0].indexes) != len(e.to) {
		return false
	}
	for i, k := range txs[0].indexes {
		if rcpts[k].Address != e.to[i] {
			return false
		}
	}
	return true
}

// Chainable reports whether SendToThen can chain j to rcpts behind another
// mail: one return path and one set of List-Unsubscribe URIs for all of
// them (one transaction), and no line break its own send would refuse. It allocates nothing: callers ask it of every mail.
func Chainable(j *job.Job, rcpts []Recipient) bool {
	if len(rcpts) == 0 || strings.ContainsAny(j.From, "\r\n") {
		return false
	}
	path := rcpts[0].ReturnPath
	for _, r := range rcpts {
		if r.ReturnPath != path || strings.ContainsAny(r.Address, "\r\n") || !slices.Equal(r.ListUnsubscribe, rcpts[0].ListUnsubscribe) {
			return false
		}
	}
	return !strings.ContainsAny(path, "\r\n")
}

// chainedEnvelope is the envelope of j to rcpts when it can be chained.
func chainedEnvelope(j *job.Job, rcpts []Recipient) (*envelope, bool) {
	if !Chainable(j, rcpts) {
		return nil, false
	}
	txs := transactions(rcpts, j.From)
	if len(txs) != 1 {
		return nil, false // not after Chainable; a guard, since the envelope names one MAIL FROM
	}
	return &envelope{messageID: j.MessageID, from: txs[0].from, to: txs[0].addrs(rcpts)}, true
}

// nextEnvelope asks then for the mail to chain behind the message being
// sent and returns its envelope when it can go out now: the connection may
// carry one more transaction, and the mail is Chainable.
func (s *Session) nextEnvelope(then Then) (*envelope, bool) {
	if limit := s.relay.cfg.MaxMessagesPerConn; limit > 0 && s.sent+1 >= limit {
		return nil, false // this message is the connection's last
	}
	j, rcpts, ok := then()
	if !ok {
		return nil, false
	}
	return chainedEnvelope(j, rcpts)
}

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

// exchangeWithPipelining is exchange for a relay that advertised PIPELINING,
// with the same results: a refused RCPT refuses that recipient only, a
// refused MAIL FROM refuses the transaction, 421 or no reply ends it and
// drops the connection. When the relay refused every recipient, the reply to
// DATA (503 or 554) is read and the transaction is reset by transact, as
// after exchange. The envelope is already on the wire when it was chained
// behind the previous message (s.ahead); next, when set, is asked for the
// mail to chain behind this one.
func (s *Session) exchangeWithPipelining(body []byte, from string, to []string, next Then) (accepted []int, refused []Refusal, e *Error) {
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
	if s.ahead != nil {
		s.ahead = nil // its replies are read below
	} else {
		writeEnvelope(text.W, s.mailCommand(from), to, s.rcptCommand)
		if err := text.W.Flush(); err != nil {
			// Nothing was read yet: on a kept connection this is how a peer
			// that went away shows up, and staleConnection redials for it.
			return nil, nil, replyError(name, StageMail, err)
		}
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
	accepted, refused, e = rcptReplies(name, len(to), func(int) error {
		_, _, err := text.ReadResponse(25)
		return err
	})
	if e != nil {
		return nil, refused, e
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
	if next != nil {
		if env, ok := s.nextEnvelope(next); ok {
			writeEnvelope(text.W, s.mailCommand(env.from), env.to, s.rcptCommand)
			s.ahead = env
			s.relay.metrics.chained.Inc()
		}
	}
	// A failed write of the final dot shows in the reply that does not
	// come, as go-mail leaves it (see writeData).
	_ = text.W.Flush()
	if _, _, err := text.ReadResponse(250); err != nil {
		e := replyError(name, StageBody, err)
		e.dataEnd = true
		return nil, refused, e
	}
	return accepted, refused, nil
}

// writeEnvelope buffers the envelope, MAIL FROM, one RCPT TO per address
// and DATA; the caller flushes it, in one write as long as it fits the
// connection's 4 KiB buffer (about 60 recipients). A bufio.Writer keeps its
// first error for Flush.
func writeEnvelope(w *bufio.Writer, mail string, to []string, rcpt func(string) string) {
	_, _ = w.WriteString(mail + "\r\n")
	for _, addr := range to {
		_, _ = w.WriteString(rcpt(addr) + "\r\n")
	}
	_, _ = w.WriteString("DATA\r\n")
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
