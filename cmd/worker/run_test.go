package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/job"
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
		// Named by the field in the component's error, not by its text: the
		// message of the max cooldown's error also mentions BaseCooldown.
		{"max cooldown below cooldown", map[string]string{"POSTLINE_CIRCUIT_MAX_COOLDOWN": "1s"}, nil, "POSTLINE_CIRCUIT_MAX_COOLDOWN"},
		{"lease under 1ms", map[string]string{"POSTLINE_LEASE": "500us"}, nil, "setting POSTLINE_LEASE"},
		{"negative lag interval", map[string]string{"POSTLINE_LAG_INTERVAL": "-1s"}, nil, "setting POSTLINE_LAG_INTERVAL"},
		{"unknown Kafka TLS mode", map[string]string{"POSTLINE_KAFKA_TLS": "maybe"}, nil, "setting POSTLINE_KAFKA_TLS"},
		{"heartbeat past the session", map[string]string{"POSTLINE_HEARTBEAT_INTERVAL": "20s"}, nil, "setting POSTLINE_HEARTBEAT_INTERVAL"},
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

// The worker's table in docs/configuration.md is the operators' reference:
// every setting must have its row there, under "## worker" (a row that only
// the scheduler's table holds does not count).
func TestConfigurationDocListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	missing, err := config.Undocumented(&settings{}, doc, "worker")
	if err != nil {
		t.Fatalf("docs/configuration.md: %v", err)
	}
	for _, m := range missing {
		t.Errorf(`docs/configuration.md has no row for %s in its "## worker" table`, m)
	}
}

func TestRetryPolicySetting(t *testing.T) {
	tests := []struct {
		policy, budgets string
		wantType        string
		wantControl     bool
		wantNormal      adaptive.Bucket
		wantErr         string
	}{
		{policy: "adaptive", budgets: "urgent=100+5/s,normal=30+1/s,bulk=5+0.2/s", wantType: "*adaptive.Adaptive", wantControl: true,
			wantNormal: adaptive.Bucket{Burst: 30, PerSecond: 1}},
		{policy: "adaptive", budgets: "urgent=1+1/s, normal = 7+0.5/s ,bulk=1+1/s", wantType: "*adaptive.Adaptive", wantControl: true,
			wantNormal: adaptive.Bucket{Burst: 7, PerSecond: 0.5}},
		{policy: "adaptive", budgets: "urgent=100+5/s+20%,normal=30+1/s+12.5%,bulk=5+0.2/s+5%", wantType: "*adaptive.Adaptive", wantControl: true,
			wantNormal: adaptive.Bucket{Burst: 30, PerSecond: 1, Share: 0.125}},
		{policy: "adaptive", budgets: "urgent=1+1/s,normal=30+1/s+100%,bulk=1+1/s", wantErr: `share "100%" must be a percentage in [0, 100)`},
		{policy: "adaptive", budgets: "urgent=1+1/s,normal=30+1/s+10,bulk=1+1/s", wantErr: `share "10" must be a percentage`},
		{policy: "adaptive", budgets: "urgent=1+1/s,normal=30+1/s+1%+1%,bulk=1+1/s", wantErr: "want burst+refill/s[+share%]"},
		{policy: "uniform", budgets: "ignored", wantType: "*adaptive.Uniform"},
		{policy: "reference", wantType: "*adaptive.Reference"},
		{policy: "fastest", wantErr: `POSTLINE_RETRY_POLICY: "fastest" is not`},
		{policy: "adaptive", budgets: "urgent=100+5/s,normal=30,bulk=5+0.2/s", wantErr: "POSTLINE_RETRY_BUDGETS: normal=\"30\": want burst+refill/s"},
		{policy: "adaptive", budgets: "urgent=0+5/s,normal=30+1/s,bulk=5+0.2/s", wantErr: "burst \"0\" must be"},
		{policy: "adaptive", budgets: "urgent=1+0/s,normal=30+1/s,bulk=5+0.2/s", wantErr: "refill \"0\" must be"},
		{policy: "adaptive", budgets: "urgent=1+1/s,normal=30+1/s", wantErr: "no value for priority bulk"},
	}
	for _, tt := range tests {
		t.Run(tt.policy+" "+tt.budgets, func(t *testing.T) {
			s := settings{RetryPolicy: tt.policy, RetryBudgets: tt.budgets}
			policy, budgets, control, err := s.retryPolicy()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%T", policy); got != tt.wantType {
				t.Errorf("policy %s, want %s", got, tt.wantType)
			}
			if (control != nil) != tt.wantControl || (budgets != nil) != tt.wantControl {
				t.Errorf("send control %v, budgets %v; want both set: %v", control != nil, budgets != nil, tt.wantControl)
			}
			if tt.wantControl && budgets[job.PriorityNormal] != tt.wantNormal {
				t.Errorf("normal budget = %+v, want %+v", budgets[job.PriorityNormal], tt.wantNormal)
			}
		})
	}
}
