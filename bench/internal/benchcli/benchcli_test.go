package benchcli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantCode   int
		wantStderr string
	}{
		{name: "success", err: nil, wantCode: 0, wantStderr: ""},
		{name: "help was printed by the flag set", err: flag.ErrHelp, wantCode: 0, wantStderr: ""},
		{name: "wrapped help", err: fmt.Errorf("parse: %w", flag.ErrHelp), wantCode: 0, wantStderr: ""},
		{name: "failure", err: errors.New("-jobs: 0 must be at least 1"), wantCode: 1, wantStderr: "bench/e2e: -jobs: 0 must be at least 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			if got := ExitCode("bench/e2e", tc.err, &stderr); got != tc.wantCode {
				t.Errorf("ExitCode = %d, want %d", got, tc.wantCode)
			}
			if stderr.String() != tc.wantStderr {
				t.Errorf("stderr = %q, want %q", stderr.String(), tc.wantStderr)
			}
		})
	}
}
