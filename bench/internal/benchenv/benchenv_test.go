package benchenv

import (
	"context"
	"flag"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/postline/postline/internal/testenv"
)

func TestRandomHexAndFreeAddr(t *testing.T) {
	a, b := RandomHex(6), RandomHex(6)
	if len(a) != 12 || a == b {
		t.Errorf("RandomHex(6) gave %q then %q: want 12 hex digits, different each time", a, b)
	}
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("FreeAddr gave %s, which cannot be listened on: %v", addr, err)
	}
	l.Close()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("FreeAddr = %s, want a loopback address", addr)
	}
}

func TestCreateSchemaRefusesOtherURLs(t *testing.T) {
	if _, err := CreateSchema(context.Background(), "mysql://x/y", "s"); err == nil {
		t.Error("CreateSchema took a mysql:// URL")
	}
}

func TestCreateAndDropSchema(t *testing.T) {
	testenv.Integration(t, "PostgreSQL")
	base := testenv.DatabaseURL()
	ctx := context.Background()
	schema := "benchenv_" + RandomHex(4)
	u, err := CreateSchema(ctx, base, schema)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	var current string
	err = conn.QueryRow(ctx, "SELECT current_schema()").Scan(&current)
	conn.Close(ctx)
	if err != nil || current != schema {
		t.Errorf("current_schema() through the returned URL = %q (%v), want %q", current, err, schema)
	}
	if err := DropSchema(ctx, base, schema); err != nil {
		t.Fatal(err)
	}
	if err := DropSchema(ctx, base, schema); err == nil {
		t.Error("dropping the schema a second time succeeded: the first drop did not drop it")
	}
}

func TestLogDir(t *testing.T) {
	given := filepath.Join(t.TempDir(), "logs", "run1")
	for _, tc := range []struct {
		name, dir string
		want      func(got string) bool
	}{
		{name: "the given directory, made", dir: given, want: func(got string) bool { return got == given }},
		{name: "a new temporary directory", dir: "", want: func(got string) bool {
			return strings.HasPrefix(filepath.Base(got), "postline-bench-test-")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LogDir(tc.dir, "postline-bench-test-")
			if err != nil || !tc.want(got) {
				t.Fatalf("LogDir(%q) = %q, %v", tc.dir, got, err)
			}
			if tc.dir == "" {
				defer os.RemoveAll(got)
			}
			if fi, err := os.Stat(got); err != nil || !fi.IsDir() {
				t.Fatalf("LogDir(%q) = %q, which is not a directory: %v", tc.dir, got, err)
			}
		})
	}
}

func TestStackFlags(t *testing.T) {
	for _, tc := range []struct {
		name            string
		env             map[string]string
		args            []string
		wantBrokers     []string
		wantDatabaseURL string
	}{
		{name: "the local stack", wantBrokers: []string{DefaultBrokers}, wantDatabaseURL: DefaultDatabaseURL},
		{name: "the environment", env: map[string]string{"POSTLINE_KAFKA_BROKERS": "a:1,b:2", "POSTLINE_DATABASE_URL": "postgres://x/y"},
			wantBrokers: []string{"a:1", "b:2"}, wantDatabaseURL: "postgres://x/y"},
		{name: "the flags over the environment", env: map[string]string{"POSTLINE_KAFKA_BROKERS": "a:1"},
			args: []string{"-brokers", "c:3,d:4", "-database-url", "postgres://z/w"}, wantBrokers: []string{"c:3", "d:4"}, wantDatabaseURL: "postgres://z/w"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("POSTLINE_KAFKA_BROKERS", tc.env["POSTLINE_KAFKA_BROKERS"])
			t.Setenv("POSTLINE_DATABASE_URL", tc.env["POSTLINE_DATABASE_URL"])
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			s := AddStackFlags(fs, "PostgreSQL URL")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Brokers(), tc.wantBrokers) || s.DatabaseURL() != tc.wantDatabaseURL {
				t.Fatalf("brokers %q, database URL %q; want %q, %q", s.Brokers(), s.DatabaseURL(), tc.wantBrokers, tc.wantDatabaseURL)
			}
		})
	}
}

func TestParseMemTotal(t *testing.T) {
	for _, tc := range []struct {
		name, meminfo string
		want          int64
		wantOK        bool
	}{
		{name: "a machine", meminfo: "MemTotal:        8029656 kB\nMemFree:          123456 kB\n", want: 8029656 << 10, wantOK: true},
		{name: "not first", meminfo: "MemFree: 1 kB\nMemTotal: 2048 kB\n", want: 2 << 20, wantOK: true},
		{name: "none", meminfo: "MemFree: 1 kB\n"},
		{name: "another unit", meminfo: "MemTotal: 2 MB\n"},
		{name: "not a number", meminfo: "MemTotal: x kB\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseMemTotal(tc.meminfo)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("parseMemTotal = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
