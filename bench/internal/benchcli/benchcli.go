// Package benchcli owns the entry point every benchmark command shares: a
// context that SIGINT and SIGTERM cancel, and how the command's error
// becomes its exit status. What a command does stays in its own run.
package benchcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Run is a command's body: its arguments without the program name, and
// where it writes.
type Run func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Main runs run with the process's arguments and standard streams, under a
// context that SIGINT and SIGTERM cancel, and exits with ExitCode's status.
func Main(name string, run Run) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if code := ExitCode(name, err, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// ExitCode is the exit status for run's error: 0 for none and for
// flag.ErrHelp (the flag set has printed the usage already), otherwise 1
// after writing "name: err" to stderr.
func ExitCode(name string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}
