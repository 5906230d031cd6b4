// Command bounce-receiver takes in what comes back after a relay took a
// mail: delivery status notifications and complaint reports sent to the
// per-recipient return paths of the bounce domain (an SMTP server: point the
// domain's MX here), and, when configured, the signed event webhooks of
// Amazon SES (through SNS) and Mailgun. Each report that verifies moves its
// recipient on, with an event on the events topic; hard bounces and
// complaints go on the suppression lists. Run it with the same return path
// keys and rules file as the workers; see docs/configuration.md for the
// settings (or run `bounce-receiver -h`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bounce-receiver:", err)
		os.Exit(1)
	}
}
