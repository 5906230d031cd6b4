package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/postline/postline/internal/testkit"
)

func TestFormatAge(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1400 * time.Millisecond, "1s"},
		{59 * time.Second, "59s"},
		{200 * time.Second, "3m20s"},
		{2*time.Hour + 5*time.Minute + 10*time.Second, "2h5m"},
		{76 * time.Hour, "3d4h"},
		{-90 * time.Second, "-1m30s"},
	}
	for _, tt := range tests {
		if got := formatAge(tt.d); got != tt.want {
			t.Errorf("formatAge(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestBareMessageID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a@b", "a@b"},
		{"<a@b>", "a@b"},
		{"  <a@b> ", "a@b"},
		{"<a@b", "<a@b"},
		{"<>", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := bareMessageID(tt.in); got != tt.want {
			t.Errorf("bareMessageID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestExitCodes checks which errors are usage errors (exit 2): all of them
// fail before anything is contacted (nothing listens on port 1).
func TestExitCodes(t *testing.T) {
	env := map[string]string{"POSTLINE_KAFKA_BROKERS": "127.0.0.1:1", "POSTLINE_DATABASE_URL": "postgres://u:p@127.0.0.1:1/db?connect_timeout=2"}
	tests := []struct {
		name     string
		env      map[string]string // nil: env
		args     []string
		wantCode int
		want     string
	}{
		{"unknown command", nil, []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"unknown flag", nil, []string{"lag", "--bogus"}, exitUsage, "unknown flag: --bogus"},
		{"bad output", nil, []string{"-o", "yaml", "lag"}, exitUsage, `--output "yaml"`},
		{"status without IDs", nil, []string{"status"}, exitUsage, "at least one Message-ID"},
		{"status with an empty ID", nil, []string{"status", "<>"}, exitUsage, `empty Message-ID "<>"`},
		{"lag takes no arguments", nil, []string{"lag", "extra"}, exitUsage, "unknown command"},
		{"lag empty group", nil, []string{"lag", "--group", " "}, exitUsage, "--group is empty"},
		{"lag empty scheduler group", nil, []string{"lag", "--scheduler-group", ""}, exitUsage, "--scheduler-group is empty"},
		{"lag bad tiers", nil, []string{"--retry-tiers", "soon", "lag"}, exitUsage, `--retry-tiers "soon"`},
		{"audit zero max age", nil, []string{"audit", "--max-age", "0"}, exitUsage, "--max-age 0s"},
		{"audit negative grace", nil, []string{"audit", "--lease-grace", "-1s"}, exitUsage, "--lease-grace -1s"},
		{"audit zero limit", nil, []string{"audit", "--limit", "0"}, exitUsage, "--limit 0"},
		{"audit bad duration", nil, []string{"audit", "--max-age", "soon"}, exitUsage, `invalid argument "soon"`},
		{"audit missing file", nil, []string{"audit", "--published", "/nonexistent/ids.jsonl"}, exitUsage, "--published: open /nonexistent/ids.jsonl"},
		{"publish count zero", nil, []string{"publish", "--count", "0"}, exitUsage, "--count 0"},
		{"dlq ls bad since", nil, []string{"dlq", "ls", "--since", "yesterday"}, exitUsage, `--since "yesterday"`},
		{"topics create partitions", nil, []string{"topics", "create", "--partitions", "0"}, exitUsage, "--partitions 0"},
		{"bad setting from the environment", map[string]string{"POSTLINE_RETRY_TIERS": "x"}, []string{"lag"}, exitUsage, `--retry-tiers "x"`},
		{"status database down", nil, []string{"status", "a@b"}, exitFailure, "--database-url: connect"},
		{"audit database down", nil, []string{"audit"}, exitFailure, "--database-url: connect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env == nil {
				tt.env = env
			}
			_, _, err := postctl(t, tt.env, "", tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if got := exitCode(err); got != tt.wantCode {
				t.Fatalf("exit code %d for %v, want %d", got, err, tt.wantCode)
			}
		})
	}
	if exitCode(errors.New("x")) != exitFailure || exitCode(usagef("wrapped: %w", errors.New("x"))) != exitUsage {
		t.Fatal("exitCode does not tell failures from usage errors")
	}
}

func TestShortOutputFlag(t *testing.T) {
	brokers := strings.Join(testkit.FakeKafka(t, kfake.SeedTopics(2, "mail.jobs")), ",")
	out, _, err := postctl(t, nil, "", "--brokers", brokers, "-o", "json", "topics", "describe", "mail.jobs")
	if err != nil {
		t.Fatal(err)
	}
	var got []topicSummary
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 || got[0].Partitions != 2 || len(got[0].PartitionDetails) != 2 {
		t.Fatalf("output %q: %+v, %v", out, got, err)
	}
}
