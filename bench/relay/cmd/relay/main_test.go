package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"go.uber.org/goleak"

	"github.com/postline/postline/bench/relay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    relay.Config
		wantErr bool
	}{
		{
			name: "manual run",
			args: []string{"-rate", "200", "-conns", "10"},
			want: relay.Config{Addr: "127.0.0.1:2526", Rate: 200, MaxConns: 10, ThrottleAt: "RCPT",
				ThrottleCode: 450, ThrottleEnhanced: "4.7.1", ThrottleText: relay.DefaultThrottleText, Seed: 1},
		},
		{
			name: "postfix scenario",
			args: []string{"-addr", "127.0.0.1:0", "-hang-up-above", "5", "-drop", "0.01", "-reject", "0.005", "-seed", "9", "-throttle-at", "DATA"},
			want: relay.Config{Addr: "127.0.0.1:0", HangUpAbove: 5, TransientDrop: 0.01, PermanentReject: 0.005, Seed: 9,
				ThrottleAt: "DATA", ThrottleCode: 450, ThrottleEnhanced: "4.7.1", ThrottleText: relay.DefaultThrottleText},
		},
		{
			name: "pipelining over a latency",
			args: []string{"-pipelining", "-round-trip-delay", "5ms"},
			want: relay.Config{Addr: "127.0.0.1:2526", Pipelining: true, RoundTripDelay: 5 * time.Millisecond, ThrottleAt: "RCPT",
				ThrottleCode: 450, ThrottleEnhanced: "4.7.1", ThrottleText: relay.DefaultThrottleText, Seed: 1},
		},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: true},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
		{name: "negative report", args: []string{"-report", "-1s"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := parse(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parse error = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && cfg != tt.want {
				t.Errorf("parse = %+v, want %+v", cfg, tt.want)
			}
		})
	}
	if _, _, err := parse([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h = %v, want flag.ErrHelp", err)
	}
}

// syncBuffer is a bytes.Buffer safe for run's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listening = regexp.MustCompile(`relay listening on (\S+)`)

// TestRun starts the command, sends two messages (one throttled) and stops
// it as SIGINT would, then checks the printed counters.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-rate", "0.5", "-burst", "1"}, &stdout, &stderr)
	}()

	var addr string
	deadline := time.Now().Add(5 * time.Second)
	for addr == "" {
		if m := listening.FindStringSubmatch(stdout.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no address printed; stdout %q stderr %q, run: %v", stdout.String(), stderr.String(), <-done)
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}

	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	msg := "Subject: x\r\n\r\nhello\r\n"
	if err := c.SendMail("a@example.com", []string{"b@example.com"}, strings.NewReader(msg)); err != nil {
		t.Fatalf("first send: %v", err)
	}
	if err := c.SendMail("a@example.com", []string{"c@example.com"}, strings.NewReader(msg)); err == nil {
		t.Fatal("second send within the bucket's refill time succeeded")
	}
	_ = c.Quit()

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	out := stdout.String()
	for _, want := range []string{`accepted\s+1\n`, `throttled\s+1\n`, `attempts\s+2\n`, `deferred share\s+50\.0 %`, `accepted per 1s\s+\[1\]`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output does not match %q:\n%s", want, out)
		}
	}
}
