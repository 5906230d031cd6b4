// Command postctl operates Postline: it creates the Kafka topics, applies the
// database migrations, publishes jobs (one from flags, a JSON Lines file, or
// synthetic load), and lists and replays dead letters. Run `postctl --help`
// for the commands and settings.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "postctl:", err)
		os.Exit(1)
	}
}
