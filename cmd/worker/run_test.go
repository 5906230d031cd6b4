package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/config"
)

// Invalid settings must stop the worker before it touches the network, with
// an error that names the setting.
func TestRunRejectsInvalidSettings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unparsable duration", map[string]string{"POSTLINE_LEASE": "soon"}, nil, "POSTLINE_LEASE"},
		{"unparsable integer flag", nil, []string{"--senders", "many"}, "POSTLINE_SENDERS"},
		{"senders out of range", map[string]string{"POSTLINE_SENDERS": "-1"}, nil, "POSTLINE_SENDERS"},
		{"batch size out of range", map[string]string{"POSTLINE_BATCH_SIZE": "-1"}, nil, "POSTLINE_BATCH_SIZE"},
		{"unknown TLS policy", map[string]string{"POSTLINE_SMTP_TLS": "sometimes"}, nil, "POSTLINE_SMTP"},
		{"bad log level", map[string]string{"POSTLINE_LOG_LEVEL": "loud"}, nil, "POSTLINE_LOG_LEVEL"},
		{"bad database URL", map[string]string{"POSTLINE_DATABASE_URL": "postgres://a b@:x/"}, nil, "POSTLINE_DATABASE_URL"},
		{"drain longer than shutdown", map[string]string{"POSTLINE_DRAIN_TIMEOUT": "40s"}, nil, "POSTLINE_DRAIN_TIMEOUT"},
		{"zero shutdown timeout", map[string]string{"POSTLINE_SHUTDOWN_TIMEOUT": "0s"}, nil, "POSTLINE_SHUTDOWN_TIMEOUT"},
		{"no brokers", map[string]string{"POSTLINE_KAFKA_BROKERS": " , "}, nil, "POSTLINE_KAFKA_BROKERS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Should a case pass validation, keep the worker away from any
			// real service and stop it quickly, so the test fails instead
			// of joining a live consumer group.
			env := map[string]string{
				"POSTLINE_KAFKA_BROKERS": "127.0.0.1:1",
				"POSTLINE_DATABASE_URL":  "postgres://nobody@127.0.0.1:1/none",
				"POSTLINE_HTTP_ADDR":     "127.0.0.1:0",
			}
			maps.Copy(env, tt.env)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			var out bytes.Buffer
			err := run(ctx, tt.args, func(k string) string { return env[k] }, &out)
			if err == nil {
				t.Fatalf("run = nil, want an error naming %s", tt.want)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run = %q, want it to name %s", err, tt.want)
			}
		})
	}
}

func TestHelpListsSettings(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run(-h) = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"POSTLINE_KAFKA_BROKERS", "--smtp-host", "POSTLINE_SHUTDOWN_TIMEOUT"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %s", want)
		}
	}
}

// The README's configuration table is the operators' reference: every
// setting must be in it.
func TestREADMEDocumentsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	list, err := config.Settings(&settings{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if !strings.Contains(string(readme), "| `"+s.Env+"` | `--"+s.Flag+"` |") {
			t.Errorf("README.md has no configuration row for %s (--%s)", s.Env, s.Flag)
		}
	}
}
