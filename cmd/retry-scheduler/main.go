// Command retry-scheduler re-injects retry copies of mail jobs from the delay
// topics (mail.retry.<tier>) into mail.jobs once they are due, with
// produce-then-commit, so a crash re-injects a copy twice at worst and never
// loses one. Run one or more replicas with the same consumer group; see the
// README for the settings (or run `retry-scheduler -h`).
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
		fmt.Fprintln(os.Stderr, "retry-scheduler:", err)
		os.Exit(1)
	}
}
