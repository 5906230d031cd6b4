package relay

import "time"

// Stats counts what the relay did since Start or the last Reset.
//
// With one recipient per message and a client that tries a transaction on
// every connection it opens, each send attempt ends in exactly one of
// Accepted, Throttled, TransientDrops, TransientReplies, PermanentRejects,
// Refused and HungUp,
// so their sum (Attempts) is the number of attempts.
type Stats struct {
	// Since is when counting started (Start or Reset).
	Since time.Time
	// Connections counts TCP connections accepted, refused ones included.
	Connections int64
	// Refused counts connections answered 421 at the greeting (MaxConns).
	Refused int64
	// HungUp counts sessions hung up with 421 at MAIL (HangUpAbove).
	HungUp int64
	// Open is the number of connections open now.
	Open int
	// PeakOpen is the most connections open at once.
	PeakOpen int
	// Accepted counts messages accepted (250 to the final dot).
	Accepted int64
	// Throttled counts commands answered with the throttle reply.
	Throttled int64
	// TransientDrops counts transactions dropped with 421 4.4.2.
	TransientDrops int64
	// TransientReplies counts transactions answered with the transient
	// reply (451 4.3.0) at the end of DATA, the connection kept.
	TransientReplies int64
	// PermanentRejects counts recipients answered 550 5.1.1.
	PermanentRejects int64
	// AcceptedAt holds the time of each accepted message, in order.
	AcceptedAt []time.Time
	// ThrottledAt holds the time of each throttle reply, in order.
	ThrottledAt []time.Time
	// RefusedAt holds the time of each connection refused at the greeting
	// (MaxConns), in order.
	RefusedAt []time.Time
	// RateChanges lists the SetRate calls, in order.
	RateChanges []RateChange
	// Transactions counts MAIL FROM commands, accepted or not.
	Transactions int64
	// EnvelopeCommands counts the MAIL FROM, RCPT TO and DATA commands
	// the relay got past the protocol's checks (a DATA only when it had a
	// recipient to deliver to).
	EnvelopeCommands int64
	// ReplyWrites counts writes of replies to a connection: each is a
	// round trip its client waited for (the greeting, EHLO and QUIT
	// included), one per command for a client that does not pipeline.
	ReplyWrites int64
	// Reads counts reads from connections that returned data: a client's
	// writes, as far as TCP kept them apart.
	Reads int64
	// AcceptedIDs holds the Message-ID (without angle brackets) of each
	// accepted message, parallel to AcceptedAt; "" for one without.
	AcceptedIDs []string
}

// RateChange is one change of the token bucket by SetRate.
type RateChange struct {
	At    time.Time
	Rate  float64 // messages/s; 0 = unlimited
	Burst int
}

// Deferred counts the attempts that were refused for the moment: the
// throttle reply (450 4.7.1 by default, whatever ThrottleCode is), a
// dropped transaction, the transient reply, refused at the greeting or
// hung up.
func (s Stats) Deferred() int64 {
	return s.Throttled + s.TransientDrops + s.TransientReplies + s.Refused + s.HungUp
}

// Attempts counts every outcome: Accepted, Deferred and PermanentRejects.
func (s Stats) Attempts() int64 { return s.Accepted + s.Deferred() + s.PermanentRejects }

// AcceptedPer returns the number of messages accepted in each interval of
// width since Since (index 0 is [Since, Since+width)), for plotting
// throughput over time. It returns nil for a width that is not positive.
func (s Stats) AcceptedPer(width time.Duration) []int {
	if width <= 0 || len(s.AcceptedAt) == 0 {
		return nil
	}
	last := s.AcceptedAt[len(s.AcceptedAt)-1]
	out := make([]int, int(max(0, last.Sub(s.Since))/width)+1)
	for _, t := range s.AcceptedAt {
		out[int(max(0, t.Sub(s.Since))/width)]++
	}
	return out
}

// PerTransaction returns n per transaction (Transactions), 0 without any:
// ReplyWrites, Reads or EnvelopeCommands per mail for a client that sends
// one transaction per mail, its connection setup spread over its mails.
func (s Stats) PerTransaction(n int64) float64 {
	if s.Transactions == 0 {
		return 0
	}
	return float64(n) / float64(s.Transactions)
}
