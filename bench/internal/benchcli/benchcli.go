// Package benchcli gives the benchmark commands the services' entry point,
// ops.Main: a context that SIGINT and SIGTERM cancel, exit status 1 with
// the error after the command's name, 0 after -h. It owns only the
// harnesses' shape of run, which writes its report to stdout and its
// progress to stderr, and their flags-only command line.
package benchcli

import (
	"context"
	"flag"
	"fmt"
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

// ParseFlags parses args into fs and refuses a positional argument: the
// harnesses take flags only, so a stray word is a mistyped flag.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
