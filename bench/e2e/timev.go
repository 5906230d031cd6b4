package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// usage is what GNU `/usr/bin/time -v` reports about one process.
type usage struct {
	User, System time.Duration
	Elapsed      time.Duration
	MaxRSSBytes  int64
	ExitStatus   int
	// Signal is the signal that ended the process ("Command terminated by
	// signal N"), 0 when it exited; time then reports Exit status 0.
	Signal int
}

// Code is the exit status as a shell reports it: 128+signal for a
// process ended by a signal (137 for the OOM killer's SIGKILL).
func (u usage) Code() int {
	if u.Signal > 0 {
		return 128 + u.Signal
	}
	return u.ExitStatus
}

// CPU is user plus system time.
func (u usage) CPU() time.Duration { return u.User + u.System }

// parseTimeV reads the report of `/usr/bin/time -v`. User time, system time
// and the maximum resident set size are required; the elapsed time and the
// exit status are read when present. Lines it does not know (such as
// "Command exited with non-zero status 1" or the child's own output, when
// time writes to the same stream) are skipped.
func parseTimeV(report string) (usage, error) {
	var u usage
	var haveUser, haveSys, haveRSS bool
	sc := bufio.NewScanner(strings.NewReader(report))
	for sc.Scan() {
		if sig, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Command terminated by signal "); ok {
			n, err := strconv.Atoi(sig)
			if err != nil || n <= 0 {
				return usage{}, fmt.Errorf("time -v: bad signal line %q", sc.Text())
			}
			u.Signal = n
			continue
		}
		key, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ": ")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		var err error
		switch key {
		case "User time (seconds)":
			u.User, err = parseSeconds(value)
			haveUser = true
		case "System time (seconds)":
			u.System, err = parseSeconds(value)
			haveSys = true
		case "Maximum resident set size (kbytes)":
			var kib int64
			kib, err = strconv.ParseInt(value, 10, 64)
			u.MaxRSSBytes = kib << 10
			haveRSS = true
		case "Elapsed (wall clock) time (h:mm:ss or m:ss)":
			u.Elapsed, err = parseClock(value)
		case "Exit status":
			u.ExitStatus, err = strconv.Atoi(value)
		}
		if err != nil {
			return usage{}, fmt.Errorf("time -v: %s: %w", key, err)
		}
	}
	switch {
	case !haveUser:
		return usage{}, fmt.Errorf("time -v: no %q line", "User time (seconds)")
	case !haveSys:
		return usage{}, fmt.Errorf("time -v: no %q line", "System time (seconds)")
	case !haveRSS:
		return usage{}, fmt.Errorf("time -v: no %q line", "Maximum resident set size (kbytes)")
	}
	return u, nil
}

// readTimeV parses the report `/usr/bin/time -v -o path` wrote.
func readTimeV(path string) (usage, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return usage{}, err
	}
	u, err := parseTimeV(string(b))
	if err != nil {
		return usage{}, fmt.Errorf("%s: %w", path, err)
	}
	return u, nil
}

func parseSeconds(s string) (time.Duration, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("bad seconds %q", s)
	}
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

// parseClock reads "m:ss.ss" or "h:mm:ss".
func parseClock(s string) (time.Duration, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, fmt.Errorf("bad clock %q", s)
	}
	var total float64
	for i, p := range parts {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f < 0 || (i > 0 && f >= 60) {
			return 0, fmt.Errorf("bad clock %q", s)
		}
		total = total*60 + f
	}
	return time.Duration(math.Round(total * float64(time.Second))), nil
}
