package benchstats

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// WriteHeader writes the lines benchstat reads as configuration: goos,
// goarch, pkg and, when known, cpu.
func WriteHeader(w io.Writer, pkg, cpu string) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: %s\n", runtime.GOOS, runtime.GOARCH, pkg)
	if cpu != "" {
		fmt.Fprintf(w, "cpu: %s\n", cpu)
	}
}

// WriteFile writes a benchstat file to path, making its directory: the
// header of pkg and cpu, then lines, one result line each.
func WriteFile(path, pkg, cpu string, lines string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	WriteHeader(&b, pkg, cpu)
	b.WriteString(lines)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// MailsLine starts a Go benchmark result line for mails delivered over
// span: one "op" is one mail, so ns/op is the wall time per mail, followed
// by the rate in mails/s. The harness appends its own metrics.
func MailsLine(name string, mails int, span time.Duration) *strings.Builder {
	var b strings.Builder
	nsPerMail, rate := 0.0, 0.0
	if mails > 0 {
		nsPerMail = float64(span) / float64(mails)
	}
	if span > 0 {
		rate = float64(mails) / span.Seconds()
	}
	fmt.Fprintf(&b, "%s %d %.0f ns/op %.1f mails/s", name, mails, nsPerMail, rate)
	return &b
}
