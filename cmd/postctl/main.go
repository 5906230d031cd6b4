// Command postctl operates Postline: it creates and describes the Kafka
// topics, applies the database migrations, publishes jobs (one from flags, a
// JSON Lines file, or synthetic load), lists and replays dead letters, and
// answers operators' questions: a message's status with its confirmation and
// recipients, the consumer groups' lag, each relay's breaker and send control
// across the fleet, and an audit of every Message-ID's row. It manages the
// suppression lists (suppress), lists mail whose confirmation window passed
// with recipients no report resolved (unconfirmed), and prints the built-in
// reply classification rules or checks an operator's rules file (rules). Run
// `postctl --help` for the commands and settings.
//
// Exit codes: 0 success; 1 failure, or a finding (a message not found, an
// audit that found missing or stuck messages); 2 a usage error (unknown
// command or flag, bad argument or setting).
package main

import (
	"os"

	"github.com/postline/postline/internal/supervisor"
)

func main() {
	ctx, stop := supervisor.SignalContext()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	supervisor.Exit("postctl", err, "Run 'postctl --help' (or 'postctl <command> --help') for usage.")
}
