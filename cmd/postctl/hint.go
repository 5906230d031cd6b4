package main

import (
	"errors"
	"net"
	"strings"

	"github.com/segmentio/kafka-go"
)

// stackHint ends an error that says Kafka or PostgreSQL does not answer on a
// loopback address: there, it is almost always the local stack of
// scripts/stack.sh that is not running.
const stackHint = "(is the local stack running? try: scripts/stack.sh up)"

// hintError is an error with stackHint appended; errors.Is and errors.As see
// through it, so exit codes and callers' checks are unchanged.
type hintError struct{ err error }

func (e hintError) Error() string { return e.err.Error() + " " + stackHint }
func (e hintError) Unwrap() error { return e.err }

// withStackHint appends stackHint to err when err shows that postctl could
// not connect to Kafka or PostgreSQL at a loopback address: a dial error to
// a loopback address anywhere in err's chain, or Kafka's "broker not
// available" (kafka-go reports that without the dial error) while every
// broker of brokers is a loopback address. Errors about remote servers, and
// servers that answered (a refused login, a missing topic), stay as they
// are: there the local stack is not the question.
func withStackHint(err error, brokers []string) error {
	if err == nil || errors.As(err, new(hintError)) {
		return err
	}
	var dial *net.OpError
	if errors.As(err, &dial) && dial.Op == "dial" && dial.Addr != nil && isLoopback(dial.Addr.String()) {
		return hintError{err}
	}
	if errors.Is(err, kafka.BrokerNotAvailable) && len(brokers) > 0 {
		for _, b := range brokers {
			if !isLoopback(b) {
				return err
			}
		}
		return hintError{err}
	}
	return err
}

// isLoopback reports whether addr, "host", "host:port" or "[v6]:port", names
// this machine's loopback interface: localhost or a 127/8 or ::1 address.
func isLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
