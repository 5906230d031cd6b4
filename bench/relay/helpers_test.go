package relay_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/emersion/go-smtp"
	"go.uber.org/goleak"

	"github.com/postline/postline/bench/relay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs a relay for the test and closes it at the end.
func start(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// dial connects a go-smtp client and says EHLO; it fails the test on error.
func dial(t *testing.T, r *relay.Relay) *smtp.Client {
	t.Helper()
	c, err := tryDial(r)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tryDial connects and says EHLO, which reads the greeting.
func tryDial(r *relay.Relay) (*smtp.Client, error) {
	c, err := smtp.Dial(r.Addr())
	if err != nil {
		return nil, err
	}
	if err := c.Hello("client.test"); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// send runs one transaction with one recipient. After a rejection that
// leaves the connection usable it resets the transaction.
func send(c *smtp.Client, to string) error {
	err := transact(c, to)
	if err != nil && !dropped(err) {
		_ = c.Reset()
	}
	return err
}

func transact(c *smtp.Client, to string) error {
	if err := c.Mail("sender@example.com", nil); err != nil {
		return fmt.Errorf("mail: %w", err)
	}
	if err := c.Rcpt(to, nil); err != nil {
		return fmt.Errorf("rcpt: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	if _, err := io.WriteString(w, "Subject: relay test\r\n\r\nhello\r\n"); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("end of data: %w", err)
	}
	return nil
}

// reply returns the SMTP reply in err, or code 0.
func reply(err error) (code int, enhanced string, text string) {
	var se *smtp.SMTPError
	if !errors.As(err, &se) {
		return 0, "", ""
	}
	ec := se.EnhancedCode
	if ec == smtp.NoEnhancedCode || ec == smtp.EnhancedCodeNotSet {
		return se.Code, "", se.Message
	}
	return se.Code, fmt.Sprintf("%d.%d.%d", ec[0], ec[1], ec[2]), se.Message
}

// dropped reports whether err means the connection is gone: a 421 or no
// reply at all.
func dropped(err error) bool {
	code, _, _ := reply(err)
	return code == 0 || code == 421
}

// withinBinomial fails the test when k successes in n trials are more than
// 4.5 standard deviations from n*p.
func withinBinomial(t *testing.T, what string, k, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(k)-mean) > 4.5*sd+1 {
		t.Errorf("%s: %d of %d, want %.0f ± %.1f (p=%v)", what, k, n, mean, 4.5*sd+1, p)
	}
}

func rcpt(i int) string { return fmt.Sprintf("user%d@example.com", i) }

func hasPrefix(err error, prefix string) bool {
	return err != nil && strings.HasPrefix(err.Error(), prefix)
}
