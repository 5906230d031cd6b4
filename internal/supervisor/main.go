package supervisor

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

// Exit statuses of the Postline binaries.
const (
	ExitFailure = 1 // the service failed, or a command failed or found what it checks for
	ExitUsage   = 2 // the command line or a setting is invalid (commands that tell it apart)
)

// An ExitCoder is an error that carries the exit status it ends the process
// with.
type ExitCoder interface {
	error
	ExitCode() int
}

// ExitCode is the exit status for a run's result: 0 for nil or a -h that
// printed the settings (flag.ErrHelp), the status of the first ExitCoder
// in err's tree, else ExitFailure.
func ExitCode(err error) int {
	var coder ExitCoder
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &coder):
		return coder.ExitCode()
	default:
		return ExitFailure
	}
}

// SignalContext returns a context that SIGINT or SIGTERM cancels: the start
// of a graceful shutdown.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// Exit ends the process for a run's result: it returns for a status of 0,
// else it writes err prefixed by the binary's name to stderr, then usage
// when the status is ExitUsage and usage is not empty, and exits.
func Exit(name string, err error, usage string) {
	code := ExitCode(err)
	if code == 0 {
		return
	}
	fmt.Fprintln(os.Stderr, name+":", err)
	if code == ExitUsage && usage != "" {
		fmt.Fprintln(os.Stderr, usage)
	}
	os.Exit(code)
}

// Main is a service binary's main: it runs run with the process's arguments
// and environment and a context that SIGINT or SIGTERM cancels, then Exit.
func Main(name string, run func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error) {
	ctx, stop := SignalContext()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	Exit(name, err, "")
}
