package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mailpitStartTimeout bounds how long StartMailpit waits for the SMTP banner
// and the API of a fresh process.
const mailpitStartTimeout = 30 * time.Second

// mailpitPageSize is the page size MessageIDs asks the API for.
const mailpitPageSize = 500

// Mailpit is a private Mailpit process serving one test: an SMTP server that
// accepts any (or no) authentication and stores every message, and an HTTP
// API to inspect what arrived. Its methods are safe for concurrent use.
type Mailpit struct {
	host     string
	smtpPort int
	apiURL   string
	client   *http.Client
}

// MailpitOption configures StartMailpit.
type MailpitOption func(*mailpitOptions)

type mailpitOptions struct {
	args []string
}

// WithMailpitArgs appends args to Mailpit's command line, for example
// "--enable-chaos", "--chaos-triggers", "Recipient:451:30" to make its SMTP
// server fail at random (see mailpit --help).
func WithMailpitArgs(args ...string) MailpitOption {
	return func(o *mailpitOptions) { o.args = append(o.args, args...) }
}

// StartMailpit starts a Mailpit process on free loopback ports with a fresh
// database in t.TempDir, waits until its SMTP server greets and its API
// answers, and kills it when the test ends. The binary is
// $POSTLINE_TEST_MAILPIT_BIN, else mailpit in PATH, else
// ${POSTLINE_CACHE:-$HOME/.cache/postline}/bin/mailpit (scripts/stack.sh
// builds it there). It skips t under -short.
func StartMailpit(t testing.TB, opts ...MailpitOption) *Mailpit {
	t.Helper()
	Integration(t, "a mailpit binary")
	var o mailpitOptions
	for _, opt := range opts {
		opt(&o)
	}

	bin, err := mailpitBinary()
	if err != nil {
		t.Fatalf("start mailpit: %v", err)
	}
	ports := freePorts(t, 2)
	smtpPort, httpPort := ports[0], ports[1]
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "mailpit.log"))
	if err != nil {
		t.Fatalf("start mailpit: %v", err)
	}
	args := []string{
		"--disable-version-check",
		"--smtp", net.JoinHostPort("127.0.0.1", strconv.Itoa(smtpPort)),
		"--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		"--database", filepath.Join(dir, "mailpit.db"),
		"--smtp-auth-accept-any", "--smtp-auth-allow-insecure",
		"--max", "0",
	}
	cmd := exec.Command(bin, append(args, o.args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start mailpit %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		log.Close()
	})

	m := &Mailpit{
		host:     "127.0.0.1",
		smtpPort: smtpPort,
		apiURL:   "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		client:   &http.Client{Timeout: 10 * time.Second},
	}
	ctx, cancel := context.WithTimeout(context.Background(), mailpitStartTimeout)
	defer cancel()
	if err := m.waitReady(ctx, exited); err != nil {
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("start mailpit: %v\n%s", err, out)
	}
	return m
}

// SMTPHost returns the host of the SMTP server.
func (m *Mailpit) SMTPHost() string { return m.host }

// SMTPPort returns the port of the SMTP server.
func (m *Mailpit) SMTPPort() int { return m.smtpPort }

// SMTPAddr returns the SMTP server as host:port.
func (m *Mailpit) SMTPAddr() string { return net.JoinHostPort(m.host, strconv.Itoa(m.smtpPort)) }

// APIURL returns the base URL of the HTTP API, without a trailing slash.
func (m *Mailpit) APIURL() string { return m.apiURL }

// messagesPage is the part of GET /api/v1/messages that the helpers read.
type messagesPage struct {
	Total    int `json:"total"`
	Messages []struct {
		MessageID string `json:"MessageID"`
	} `json:"messages"`
}

// Count returns the number of messages stored.
func (m *Mailpit) Count(ctx context.Context) (int, error) {
	page, err := m.messages(ctx, 0, 1)
	if err != nil {
		return 0, err
	}
	return page.Total, nil
}

// MessageIDs returns the Message-ID of every stored message, newest first,
// without angle brackets (Mailpit strips them).
func (m *Mailpit) MessageIDs(ctx context.Context) ([]string, error) {
	var ids []string
	for start := 0; ; {
		page, err := m.messages(ctx, start, mailpitPageSize)
		if err != nil {
			return nil, err
		}
		for _, msg := range page.Messages {
			ids = append(ids, msg.MessageID)
		}
		start += len(page.Messages)
		if len(page.Messages) == 0 || start >= page.Total {
			return ids, nil
		}
	}
}

// WaitCount polls until at least n messages are stored. On ctx's end it
// returns an error with the last count seen.
func (m *Mailpit) WaitCount(ctx context.Context, n int) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last, lastErr := 0, error(nil)
	for {
		c, err := m.Count(ctx)
		if err == nil && c >= n {
			return nil
		}
		if err == nil {
			last = c
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("mailpit: waiting for %d messages, last count %d: %w", n, last, errors.Join(ctx.Err(), lastErr))
		case <-tick.C:
		}
	}
}

func (m *Mailpit) messages(ctx context.Context, start, limit int) (messagesPage, error) {
	var page messagesPage
	q := url.Values{"start": {strconv.Itoa(start)}, "limit": {strconv.Itoa(limit)}}
	if err := m.getJSON(ctx, "/api/v1/messages?"+q.Encode(), &page); err != nil {
		return messagesPage{}, err
	}
	return page, nil
}

func (m *Mailpit) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.apiURL+path, nil)
	if err != nil {
		return fmt.Errorf("mailpit GET %s: %w", path, err)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return fmt.Errorf("mailpit GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("mailpit GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("mailpit GET %s: decode: %w", path, err)
	}
	return nil
}

// waitReady polls until the SMTP server greets with 220 and the API answers,
// failing early if the process exits.
func (m *Mailpit) waitReady(ctx context.Context, exited <-chan error) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		last = m.smtpGreets(ctx)
		if last == nil {
			var info map[string]any
			last = m.getJSON(ctx, "/api/v1/info", &info)
			if last == nil {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("mailpit exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("mailpit not ready: %w", errors.Join(ctx.Err(), last))
		case <-tick.C:
		}
	}
}

func (m *Mailpit) smtpGreets(ctx context.Context) error {
	return smtpBanner(ctx, m.SMTPAddr(), 2*time.Second)
}

// mailpitBinary finds the mailpit executable (see StartMailpit).
func mailpitBinary() (string, error) {
	if p := os.Getenv("POSTLINE_TEST_MAILPIT_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("mailpit"); err == nil {
		return p, nil
	}
	cache := os.Getenv("POSTLINE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find mailpit: %w", err)
		}
		cache = filepath.Join(home, ".cache", "postline")
	}
	candidates := []string{filepath.Join(cache, "bin", "mailpit")}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		candidates = append(candidates, filepath.Join(strings.TrimSpace(string(gopath)), "bin", "mailpit"))
	}
	for _, p := range candidates {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("find mailpit: not in POSTLINE_TEST_MAILPIT_BIN, PATH or %s (scripts/stack.sh up builds it)",
		strings.Join(candidates, ", "))
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. All listeners stay open until every port is picked so that the kernel
// cannot hand out the same port twice.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
