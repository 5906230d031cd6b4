package pgpool

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestTLSWarning(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		sslmode string // PGSSLMODE
		exposed []string
	}{
		{"loopback IPv4, disable", "postgres://u:p@127.0.0.1:5432/db?sslmode=disable", "", nil},
		{"loopback IPv4 range", "postgres://u:p@127.0.0.2/db?sslmode=disable", "", nil},
		{"localhost, disable", "postgres://u:p@localhost/db?sslmode=disable", "", nil},
		{"loopback IPv6, prefer", "postgres://u:p@[::1]:5432/db", "", nil},
		{"unix socket", "host=/var/run/postgresql dbname=db sslmode=disable", "", nil},
		{"remote, disable", "postgres://u:p@db.example.com/db?sslmode=disable", "", []string{"db.example.com"}},
		{"remote, allow", "postgres://u:p@db.example.com/db?sslmode=allow", "", []string{"db.example.com"}},
		{"remote, prefer", "postgres://u:p@db.example.com/db?sslmode=prefer", "", []string{"db.example.com"}},
		{"remote, no sslmode is prefer", "postgres://u:p@db.example.com/db", "", []string{"db.example.com"}},
		{"remote, require", "postgres://u:p@db.example.com/db?sslmode=require", "", nil},
		{"remote, verify-full", "postgres://u:p@db.example.com/db?sslmode=verify-full", "", nil},
		{"private address is not loopback", "postgres://u:p@10.0.0.5/db?sslmode=disable", "", []string{"10.0.0.5"}},
		{"keyword form", "host=db.example.com dbname=db sslmode=disable", "", []string{"db.example.com"}},
		{"PGSSLMODE applies", "postgres://u:p@db.example.com/db", "disable", []string{"db.example.com"}},
		{"PGSSLMODE require", "postgres://u:p@db.example.com/db", "require", nil},
		{"the URL wins over PGSSLMODE", "postgres://u:p@db.example.com/db?sslmode=verify-full", "disable", nil},
		{"several hosts: only the remote one", "postgres://u:p@127.0.0.1,db.example.com,db2.example.com/db?sslmode=disable", "",
			[]string{"db.example.com", "db2.example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PGSSLMODE", tt.sslmode)
			c, err := pgconn.ParseConfig(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			got := TLSWarning(*c)
			if (got == "") != (len(tt.exposed) == 0) {
				t.Fatalf("TLSWarning = %q, want exposed hosts %v", got, tt.exposed)
			}
			for _, h := range tt.exposed {
				if !strings.Contains(got, h) {
					t.Errorf("warning %q does not name %s", got, h)
				}
			}
			if strings.Contains(got, "127.0.0.1") || strings.Contains(got, ":p@") {
				t.Errorf("warning %q names a local host or the credentials", got)
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	pc, warning, err := ParseConfig(Config{URL: "postgres://u:p@127.0.0.1/db?sslmode=disable", MaxConns: 7})
	if err != nil || pc.MaxConns != 7 || warning != "" {
		t.Fatalf("ParseConfig = max %d, warning %q, %v; want 7 connections and no warning", pc.MaxConns, warning, err)
	}
	pc, _, err = ParseConfig(Config{URL: "postgres://u:p@127.0.0.1/db"})
	if err != nil || pc.MaxConns < 4 {
		t.Errorf("ParseConfig without MaxConns = max %d, %v; want pgx's default (at least 4)", pc.MaxConns, err)
	}
	for _, bad := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "URL is required"},
		{Config{URL: "postgres://u@h/db", MaxConns: -1}, "MaxConns -1"},
		{Config{URL: "postgres://u:s3cret@h:notaport/db"}, "parse postgres URL"},
	} {
		_, _, err := ParseConfig(bad.cfg)
		if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseConfig(%q, %d) = %v, want an error with %q and no password", bad.cfg.URL, bad.cfg.MaxConns, err, bad.want)
		}
	}
}

func TestNewLogsTheWarning(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	pool, err := New(t.Context(), Config{URL: "postgres://u:p@db.example.com/db?sslmode=disable", MaxConns: 2}, logger)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "db.example.com") {
		t.Errorf("logs = %q, want a warning naming db.example.com", logs.String())
	}
	logs.Reset()
	pool, err = New(t.Context(), Config{URL: "postgres://u:p@127.0.0.1/db?sslmode=disable"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if logs.Len() != 0 {
		t.Errorf("a loopback database logged %q, want nothing", logs.String())
	}
}

// Regression: a password with an unencoded '/' and a bad '%' reached the
// error through the URL parser's message.
func TestParseErrorsNeverQuoteThePassword(t *testing.T) {
	for _, url := range []string{
		"postgres://postline:AA/BB%@127.0.0.1:5432/postline",
		"postgres://postline:p%zzss@127.0.0.1:5432/postline",
		"postgres://postline:s3cr#t%@db.example.com/postline",
		"host=db user=postline password=%zz/secret dbname=x port=notaport",
	} {
		_, _, err := ParseConfig(Config{URL: url})
		if err == nil {
			t.Errorf("ParseConfig(%q) = nil, want an error", url)
			continue
		}
		for _, piece := range []string{"BB%", "p%zz", "s3cr", "secret", "zzss"} {
			if strings.Contains(err.Error(), piece) {
				t.Errorf("ParseConfig(%q): error %q shows part of the password", url, err)
			}
		}
	}
}
