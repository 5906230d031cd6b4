// Package benchcli gives the benchmark commands the services' entry point,
// ops.Main: a context that SIGINT and SIGTERM cancel, exit status 1 with
// the error after the command's name, 0 after -h. It owns only the
// harnesses' shape of run, which writes its report to stdout and its
// progress to stderr.
package benchcli

import (
	"context"
	"io"
	"os"

	"github.com/postline/postline/internal/supervisor"
)

// Run is a command's body: its arguments without the program name, and
// where it writes its report (stdout) and its progress (stderr).
type Run func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Main runs run as ops.Main runs a service, with the process's standard
// error as stderr.
func Main(name string, run Run) {
	supervisor.Main(name, func(ctx context.Context, args []string, _ func(string) string, stdout io.Writer) error {
		return run(ctx, args, stdout, os.Stderr)
	})
}
