package benchcli

import (
	"flag"
	"io"
	"testing"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		wantN   int
	}{
		{name: "flags only", args: []string{"-n", "3"}, wantN: 3},
		{name: "none", args: nil, wantN: 1},
		{name: "stray argument", args: []string{"-n", "3", "extra", "more"}, wantErr: `unexpected argument "extra"`},
		{name: "unknown flag", args: []string{"-m", "3"}, wantErr: "flag provided but not defined: -m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			n := fs.Int("n", 1, "a number")
			err := ParseFlags(fs, tt.args)
			switch {
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Fatalf("ParseFlags(%q) = %v, want %q", tt.args, err, tt.wantErr)
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ParseFlags(%q) = %v", tt.args, err)
			case tt.wantErr == "" && *n != tt.wantN:
				t.Errorf("ParseFlags(%q): n = %d, want %d", tt.args, *n, tt.wantN)
			}
		})
	}
}
