package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// runSource runs smtp-source into the sink: jobs mails over senders
// sessions, with a new connection per mail or (reuse) -d.
func runSource(ctx context.Context, o options, reuse bool, run int, stderr io.Writer) (result, error) {
	name := variantSource
	argv := []string{o.smtpSource, "-s", strconv.Itoa(o.senders), "-m", strconv.Itoa(o.jobs), "-l", strconv.Itoa(o.bodyBytes)}
	if reuse {
		name = variantSourceD
		argv = append(argv, "-d")
	}
	argv = append(argv, o.smtpAddr)
	fmt.Fprintf(stderr, "bench: %s: %s\n", name, strings.Join(argv, " "))
	cs := o.sinkComponent()
	before, err := sampleComponents(cs)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	p, err := startProc(o.timeBin, o.logDir, fmt.Sprintf("%s-run%d", name, run), argv,
		[]string{"LD_LIBRARY_PATH=" + o.smtpSourceLib})
	if err != nil {
		return result{}, err
	}
	if !p.Wait(o.timeout) {
		p.Kill()
		return result{}, fmt.Errorf("%s did not finish in %s", name, o.timeout)
	}
	wall := time.Since(start)
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	after, err := sampleComponents(cs)
	if err != nil {
		return result{}, err
	}
	u, err := p.usage()
	if err != nil {
		return result{}, err
	}
	if u.ExitStatus != 0 {
		return result{}, fmt.Errorf("%s exited with status %d:\n%s", name, u.ExitStatus, p.LogTail(20))
	}
	return result{Variant: name, Mails: o.jobs, Span: wall, CPU: u.CPU(), PeakRSSBytes: u.MaxRSSBytes,
		Stack: stackCPU{Measured: true, Own: u.CPU(), Sink: after.since(before)["sink"]}}, nil
}
