package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/postline/postline/internal/supervisor"
)

// Exit codes of postctl.
const (
	exitFailure = supervisor.ExitFailure // an operation failed, or found what it checks for
	exitUsage   = supervisor.ExitUsage   // the command line or a setting is invalid
)

// usageError is an error in the command line or the settings: the command
// did not start its work.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// ExitCode implements supervisor.ExitCoder.
func (e usageError) ExitCode() int { return exitUsage }

// usagef returns a usageError with a formatted message; like fmt.Errorf it
// wraps a %w operand.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitCode is the process exit code for err (not nil).
func exitCode(err error) int {
	return supervisor.ExitCode(err)
}

// writeTable writes an aligned table: header, then rows, columns separated
// by at least two spaces.
func writeTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// formatAge shows a duration for people: whole seconds under a minute, then
// the two largest units ("45s", "3m20s", "2h5m", "3d4h"). Negative
// durations get a minus sign.
func formatAge(d time.Duration) string {
	if d < 0 {
		return "-" + formatAge(-d)
	}
	d = d.Round(time.Second)
	day := 24 * time.Hour
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", d/time.Minute, d%time.Minute/time.Second)
	case d < day:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	default:
		return fmt.Sprintf("%dd%dh", d/day, d%day/time.Hour)
	}
}

// timePtr is t for a JSON field that is left out when t is zero.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// formatTime shows t in UTC to the second, or "-" when zero.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// seconds is d in seconds, rounded to milliseconds, for JSON.
func seconds(d time.Duration) float64 {
	return d.Round(time.Millisecond).Seconds()
}

// bareMessageID strips the angle brackets of an RFC 5322 msg-id: rows are
// keyed by the bare ID.
func bareMessageID(id string) string {
	id = strings.TrimSpace(id)
	if len(id) >= 2 && id[0] == '<' && id[len(id)-1] == '>' {
		return id[1 : len(id)-1]
	}
	return id
}
