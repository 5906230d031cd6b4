package benchstats

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestMailsLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mails int
		span  time.Duration
		want  string
	}{
		{name: "a run", mails: 2000, span: 4 * time.Second, want: "BenchmarkX/a 2000 2000000 ns/op 500.0 mails/s"},
		{name: "no mails", mails: 0, span: time.Second, want: "BenchmarkX/a 0 0 ns/op 0.0 mails/s"},
		{name: "no span", mails: 10, span: 0, want: "BenchmarkX/a 10 0 ns/op 0.0 mails/s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MailsLine("BenchmarkX/a", tc.mails, tc.span).String(); got != tc.want {
				t.Errorf("MailsLine = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	for _, tc := range []struct {
		name, cpu, want string
	}{
		{name: "a known CPU", cpu: "Test CPU @ 2.0GHz",
			want: "goos: " + runtime.GOOS + "\ngoarch: " + runtime.GOARCH + "\npkg: example.com/p\ncpu: Test CPU @ 2.0GHz\nBenchmarkX 1 2 ns/op\n"},
		{name: "no CPU line when it is unknown", cpu: "",
			want: "goos: " + runtime.GOOS + "\ngoarch: " + runtime.GOARCH + "\npkg: example.com/p\nBenchmarkX 1 2 ns/op\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "new", "dir", "bench.txt")
			if err := WriteFile(path, "example.com/p", tc.cpu, "BenchmarkX 1 2 ns/op\n"); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != tc.want {
				t.Fatalf("file = %q, %v; want %q", b, err, tc.want)
			}
		})
	}
}
