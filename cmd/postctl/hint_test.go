package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// closedPort returns a loopback TCP port nothing listens on, so that a dial
// to it is refused at once.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

func TestWithStackHint(t *testing.T) {
	port := closedPort(t)
	_, refused := net.Dial("tcp", "127.0.0.1:"+port)
	if refused == nil {
		t.Fatalf("dial 127.0.0.1:%s: nothing should listen there", port)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, pgRefused := pgx.Connect(ctx, "postgres://u:p@localhost:"+port+"/db?connect_timeout=5")
	if pgRefused == nil {
		t.Fatalf("pgx.Connect to localhost:%s: nothing should listen there", port)
	}
	remoteDial := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9092}, Err: syscall.ECONNREFUSED}
	loopbackRead := &net.OpError{Op: "read", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv6loopback, Port: 5432}, Err: syscall.ECONNRESET}
	v6Dial := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv6loopback, Port: 5432}, Err: syscall.ECONNREFUSED}

	loopback := []string{"127.0.0.1:9092"}
	tests := []struct {
		name     string
		err      error
		brokers  []string
		wantHint bool
	}{
		{"no error", nil, loopback, false},
		{"kafka dial refused on loopback", fmt.Errorf("describe topics: kafka.(*Client).Metadata: %w", refused), loopback, true},
		{"postgres refused on localhost (pgx)", fmt.Errorf("--database-url: connect: %w", pgRefused), loopback, true},
		{"dial refused on ::1", fmt.Errorf("migrate: %w", v6Dial), loopback, true},
		{"dial refused on a remote host", fmt.Errorf("describe topics: %w", remoteDial), []string{"10.1.2.3:9092"}, false},
		{"a broken connection, not a dial", fmt.Errorf("status: %w", loopbackRead), loopback, false},
		{"broker not available, loopback brokers", fmt.Errorf("create topics: context deadline exceeded (last error: %w)", kafka.BrokerNotAvailable), []string{"localhost:9092", "127.0.0.2:9093"}, true},
		{"broker not available, one remote broker", fmt.Errorf("create topics: %w", kafka.BrokerNotAvailable), []string{"127.0.0.1:9092", "kafka-1.kafka:9092"}, false},
		{"a server that answered", errors.New(`--database-url: connect: password authentication failed for user "postline"`), loopback, false},
		{"a missing topic", fmt.Errorf("describe: %w", kafka.UnknownTopicOrPartition), loopback, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withStackHint(tt.err, tt.brokers)
			if tt.err == nil {
				if got != nil {
					t.Fatalf("withStackHint(nil) = %v", got)
				}
				return
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("the hinted error no longer wraps the original: %v", got)
			}
			hinted := strings.HasSuffix(got.Error(), " "+stackHint)
			if hinted != tt.wantHint {
				t.Errorf("withStackHint(%q) = %q; hint appended %v, want %v", tt.err, got, hinted, tt.wantHint)
			}
			if tt.wantHint && got.Error() != tt.err.Error()+" "+stackHint {
				t.Errorf("the message changed beyond the hint: %q", got)
			}
			if again := withStackHint(got, tt.brokers); again.Error() != got.Error() {
				t.Errorf("hinted twice: %q", again)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:9092", true},
		{"127.0.0.53", true},
		{"[::1]:5432", true},
		{"::1", true},
		{"localhost:9092", true},
		{"LOCALHOST", true},
		{"kafka.localhost:9092", true},
		{"10.0.0.5:9092", false},
		{"kafka-0.kafka:9092", false},
		{"[2001:db8::1]:5432", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := isLoopback(tt.addr); got != tt.want {
			t.Errorf("isLoopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

// TestConnectionErrorsSuggestTheStack runs postctl against loopback ports
// nothing listens on: both Kafka's and PostgreSQL's errors end with the
// hint, and the exit code stays a failure (1), not a usage error.
func TestConnectionErrorsSuggestTheStack(t *testing.T) {
	port := closedPort(t)
	tests := [][]string{
		{"topics", "describe", "--brokers", "127.0.0.1:" + port},
		{"status", "some-id@example.com", "--database-url", "postgres://postline:postline@127.0.0.1:" + port + "/postline?sslmode=disable&connect_timeout=5"},
	}
	for _, args := range tests {
		_, _, err := postctl(t, nil, "", args...)
		if err == nil {
			t.Fatalf("postctl %q: no error against a closed port", args)
		}
		if !strings.HasSuffix(err.Error(), stackHint) {
			t.Errorf("postctl %q: %q does not end with %q", args, err, stackHint)
		}
		if code := exitCode(err); code != exitFailure {
			t.Errorf("postctl %q: exit code %d, want %d", args, code, exitFailure)
		}
	}
}
