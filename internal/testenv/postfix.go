package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Defaults for the Postfix relay started by scripts/stack.sh.
const (
	DefaultPostfix      = "127.0.0.1:2526"
	DefaultPostfixDest  = "127.0.0.1:2527"
	DefaultBounceAddr   = "127.0.0.1:2530"
	DefaultBounceDomain = "bounces.postline.test"
)

// postfixProbeTimeout bounds the check that Postfix greets.
const postfixProbeTimeout = 3 * time.Second

// postfixLockTimeout bounds how long Postfix waits for another test (in this
// or another test binary) to unlock the relay.
const postfixLockTimeout = 5 * time.Minute

// postfixLogTail caps what LogSince returns.
const postfixLogTail = 64 << 10

// PostfixEnv describes the stack's Postfix relay: a real Postfix that accepts
// mail from loopback on Addr, relays every message to DestAddr (where the
// test runs the destination server), and delivers the bounces and delivery
// reports it writes to senders at BounceDomain to BounceAddr (where the test
// runs the bounce receiver). It retries deferred mail every few seconds and
// returns it as undeliverable 30 s after it arrived.
type PostfixEnv struct {
	Addr         string // Postfix's SMTP server, $POSTLINE_TEST_POSTFIX
	DestAddr     string // the relayhost, $POSTLINE_TEST_POSTFIX_DEST
	BounceAddr   string // where mail for BounceDomain goes, $POSTLINE_TEST_BOUNCE_ADDR
	BounceDomain string // $POSTLINE_TEST_BOUNCE_DOMAIN
	// ConfigDir is the instance's configuration directory, for postqueue
	// and postsuper ($POSTLINE_TEST_POSTFIX_CONFIG); "" when unknown, and
	// then the queue helpers return an error.
	ConfigDir string
	// LogFile is Postfix's mail log ($POSTLINE_TEST_POSTFIX_LOG); "" when
	// unknown.
	LogFile string

	logStart int64 // size of LogFile when Postfix returned
}

// QueuedMessage is one message in Postfix's queue, as postqueue -j reports it.
type QueuedMessage struct {
	QueueName   string            `json:"queue_name"` // incoming, active, deferred, hold, maildrop
	QueueID     string            `json:"queue_id"`
	ArrivalTime int64             `json:"arrival_time"` // Unix seconds
	Size        int64             `json:"message_size"`
	Sender      string            `json:"sender"`
	Recipients  []QueuedRecipient `json:"recipients"`
}

// QueuedRecipient is a recipient of a QueuedMessage not yet delivered.
type QueuedRecipient struct {
	Address     string `json:"address"`
	DelayReason string `json:"delay_reason"` // why the last attempt failed, "" before one
}

// Postfix returns the stack's Postfix relay for a test that may use it
// alone. It skips t under -short, and when Postfix does not greet on its
// address: with a skip when the address is the default, with a failure when
// $POSTLINE_TEST_POSTFIX names it (the stack's environment says it runs).
//
// The destination and bounce ports are fixed and the queue is shared, so
// Postfix holds a lock, across test binaries, until t ends: tests that use
// the relay run one after another. Call it once per test, never in a
// subtest of a test that already did (the subtest would wait for its
// parent). Once it holds the lock it deletes whatever an earlier test left
// in the queue (when ConfigDir is known), so that nothing but this test's
// mail reaches its servers.
func Postfix(t testing.TB) PostfixEnv {
	t.Helper()
	Integration(t, "the stack's Postfix relay")
	p := PostfixEnv{
		Addr:         getenv("POSTLINE_TEST_POSTFIX", DefaultPostfix),
		DestAddr:     getenv("POSTLINE_TEST_POSTFIX_DEST", DefaultPostfixDest),
		BounceAddr:   getenv("POSTLINE_TEST_BOUNCE_ADDR", DefaultBounceAddr),
		BounceDomain: getenv("POSTLINE_TEST_BOUNCE_DOMAIN", DefaultBounceDomain),
		ConfigDir:    os.Getenv("POSTLINE_TEST_POSTFIX_CONFIG"),
		LogFile:      os.Getenv("POSTLINE_TEST_POSTFIX_LOG"),
	}
	if err := smtpBanner(context.Background(), p.Addr, postfixProbeTimeout); err != nil {
		msg := fmt.Sprintf("Postfix is not answering on %s: %v (scripts/stack.sh postfix starts it)", p.Addr, err)
		if os.Getenv("POSTLINE_TEST_POSTFIX") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	lockPostfix(t, p.Addr)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if p.ConfigDir != "" {
		if err := p.DeleteQueued(ctx); err != nil {
			t.Fatalf("testenv: empty Postfix's queue before the test: %v", err)
		}
	}
	if p.LogFile != "" {
		if fi, err := os.Stat(p.LogFile); err == nil {
			p.logStart = fi.Size()
		}
	}
	return p
}

// ListenDest listens on DestAddr, where Postfix relays every message, and
// closes the listener when t ends.
func (p PostfixEnv) ListenDest(t testing.TB) net.Listener {
	t.Helper()
	return listenFixed(t, p.DestAddr, "Postfix's relayhost")
}

// ListenBounce listens on BounceAddr, where Postfix delivers mail for
// BounceDomain, and closes the listener when t ends.
func (p PostfixEnv) ListenBounce(t testing.TB) net.Listener {
	t.Helper()
	return listenFixed(t, p.BounceAddr, "Postfix's bounce receiver")
}

// Queue lists the messages in Postfix's queue (postqueue -j).
func (p PostfixEnv) Queue(ctx context.Context) ([]QueuedMessage, error) {
	out, err := p.run(ctx, "postqueue", "-j")
	if err != nil {
		return nil, err
	}
	var msgs []QueuedMessage
	for line := range bytes.Lines(out) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m QueuedMessage
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("postfix queue: decode postqueue -j line: %w", err)
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// WaitQueueEmpty polls until Postfix's queue is empty: every message it
// accepted, and every report it wrote about them, is delivered or deleted.
// On ctx's end it returns an error listing what is still queued.
func (p PostfixEnv) WaitQueueEmpty(ctx context.Context) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	var last []QueuedMessage
	for {
		msgs, err := p.Queue(ctx)
		if err == nil && len(msgs) == 0 {
			return nil
		}
		if err == nil {
			last = msgs
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("postfix queue: still holds %s: %w", describeQueue(last), errors.Join(ctx.Err(), err))
		case <-tick.C:
		}
	}
}

// RetryDeferred asks Postfix to attempt delivery of every queued message now
// (postqueue -f) instead of at the next queue run.
func (p PostfixEnv) RetryDeferred(ctx context.Context) error {
	_, err := p.run(ctx, "postqueue", "-f")
	return err
}

// DeleteQueued deletes every message in Postfix's queue (postsuper -d ALL).
func (p PostfixEnv) DeleteQueued(ctx context.Context) error {
	_, err := p.run(ctx, "postsuper", "-d", "ALL")
	return err
}

// LogSince returns what Postfix wrote to its mail log since Postfix
// returned (at most the last 64 KiB), for failure messages; "" when the log
// is unknown or unreadable.
func (p PostfixEnv) LogSince() string {
	if p.LogFile == "" {
		return ""
	}
	f, err := os.Open(p.LogFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	start := max(p.logStart, fi.Size()-postfixLogTail)
	if start > fi.Size() { // the log was truncated or replaced
		start = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, start, fi.Size()-start))
	if err != nil {
		return ""
	}
	return string(b)
}

// run runs one of Postfix's tools on the instance's configuration directory.
func (p PostfixEnv) run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	if p.ConfigDir == "" {
		return nil, fmt.Errorf("postfix %s: POSTLINE_TEST_POSTFIX_CONFIG is unset (eval \"$(scripts/stack.sh env)\")", tool)
	}
	bin, err := postfixTool(tool)
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"-c", p.ConfigDir}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("postfix %s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// postfixTool finds one of Postfix's administration tools, which Debian
// installs into /usr/sbin (not always in a test's PATH).
func postfixTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("postfix %s: not in PATH or /usr/sbin (scripts/stack.sh postfix installs it): %w", name, err)
	}
	return p, nil
}

func describeQueue(msgs []QueuedMessage) string {
	if len(msgs) == 0 {
		return "(unknown)"
	}
	parts := make([]string, 0, len(msgs))
	for _, m := range msgs {
		rcpts := make([]string, 0, len(m.Recipients))
		for _, r := range m.Recipients {
			rcpts = append(rcpts, fmt.Sprintf("%s (%s)", r.Address, r.DelayReason))
		}
		parts = append(parts, fmt.Sprintf("%s %s from <%s> to %s", m.QueueName, m.QueueID, m.Sender, strings.Join(rcpts, ", ")))
	}
	return strings.Join(parts, "; ")
}

// lockPostfix takes an exclusive lock named after addr, dropped when t
// ends. flock locks belong to an open file, so the lock excludes other
// tests of this binary as well as other binaries.
func lockPostfix(t testing.TB, addr string) {
	t.Helper()
	name := "postline-postfix-" + strings.NewReplacer(":", "_", "/", "_").Replace(addr) + ".lock"
	path := filepath.Join(os.TempDir(), name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("testenv: open Postfix lock %s: %v", path, err)
	}
	deadline := time.Now().Add(postfixLockTimeout)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if td, ok := d.Deadline(); ok && td.Before(deadline) {
			deadline = td
		}
	}
	start := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			t.Fatalf("testenv: lock %s: %v", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			t.Fatalf("testenv: another test held the Postfix relay (%s) for %s", path, time.Since(start).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond) // polling a lock another process holds: no event to wait on
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("testenv: waited %s for another test to unlock the Postfix relay", waited.Round(100*time.Millisecond))
	}
	t.Cleanup(func() { _ = f.Close() }) // closing the file drops the lock
}

// listenFixed listens on addr, a fixed port that Postfix delivers to.
func listenFixed(t testing.TB, addr, what string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("testenv: listen on %s (%s): %v", addr, what, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// smtpBanner dials addr and reads a 220 greeting within timeout, or until
// ctx ends. Postfix's and Mailpit's readiness checks share it.
func smtpBanner(ctx context.Context, addr string, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read SMTP banner: %w", err)
	}
	if !strings.HasPrefix(line, "220") {
		return fmt.Errorf("unexpected SMTP banner %q", strings.TrimSpace(line))
	}
	_, _ = conn.Write([]byte("QUIT\r\n"))
	return nil
}
