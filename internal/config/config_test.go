package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/configerr"
)

type sample struct {
	Brokers []string      `env:"POSTLINE_KAFKA_BROKERS" default:"127.0.0.1:9092" usage:"brokers"`
	Lease   time.Duration `env:"POSTLINE_LEASE" default:"30s" usage:"lease"`
	Senders int           `env:"POSTLINE_SENDERS" default:"16" usage:"senders"`
	Debug   bool          `env:"POSTLINE_DEBUG" default:"false" usage:"debug"`
	Nested  struct {
		Host string `env:"POSTLINE_SMTP_HOST" default:"localhost" usage:"host"`
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    sample
		wantErr []string // substrings the error must contain
	}{
		{
			name: "defaults",
			want: withHost(sample{Brokers: []string{"127.0.0.1:9092"}, Lease: 30 * time.Second, Senders: 16}, "localhost"),
		},
		{
			name: "environment overrides defaults",
			env:  map[string]string{"POSTLINE_KAFKA_BROKERS": "a:1, b:2", "POSTLINE_LEASE": "5s", "POSTLINE_SMTP_HOST": "relay"},
			want: withHost(sample{Brokers: []string{"a:1", "b:2"}, Lease: 5 * time.Second, Senders: 16}, "relay"),
		},
		{
			name: "flags override the environment",
			env:  map[string]string{"POSTLINE_SENDERS": "4"},
			args: []string{"--senders", "8", "--debug=true", "--smtp-host=flaghost"},
			want: withHost(sample{Brokers: []string{"127.0.0.1:9092"}, Lease: 30 * time.Second, Senders: 8, Debug: true}, "flaghost"),
		},
		{
			name:    "a bad value names the variable, the flag and the value",
			env:     map[string]string{"POSTLINE_LEASE": "soon"},
			wantErr: []string{"POSTLINE_LEASE", "--lease", `"soon"`, "duration"},
		},
		{
			name:    "every bad value is reported",
			env:     map[string]string{"POSTLINE_SENDERS": "many"},
			args:    []string{"--debug=perhaps"},
			wantErr: []string{"POSTLINE_SENDERS", "POSTLINE_DEBUG", "--debug"},
		},
		{
			name:    "an unknown flag is an error",
			args:    []string{"--nope"},
			wantErr: []string{"nope"},
		},
		{
			name:    "a stray argument is an error",
			args:    []string{"extra"},
			wantErr: []string{`unexpected argument "extra"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got sample
			err := Load(&got, "test", tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Load = nil, want an error containing %q", tt.wantErr)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Load = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestHelpPrintsEverySetting(t *testing.T) {
	var out strings.Builder
	var s sample
	err := Load(&s, "test", []string{"-h"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Load(-h) = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"POSTLINE_KAFKA_BROKERS", "--kafka-brokers", "POSTLINE_SMTP_HOST", "30s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

func withHost(s sample, host string) sample { s.Nested.Host = host; return s }

func TestNameSetting(t *testing.T) {
	fields := map[string]string{"RetryBackoff": "POSTLINE_RETRY_BACKOFF", "MaxRetryBackoff": "POSTLINE_MAX_RETRY_BACKOFF", "Senders": "POSTLINE_SENDERS"}
	tests := []struct {
		err  error
		want string
	}{
		{configerr.Errorf("Senders", "delivery: Senders -1 out of range"), "setting POSTLINE_SENDERS: delivery: Senders -1 out of range"},
		{configerr.Errorf("MaxRetryBackoff", "delivery: MaxRetryBackoff 1s is less than RetryBackoff"), "setting POSTLINE_MAX_RETRY_BACKOFF: "},
		{configerr.Errorf("RetryBackoff", "delivery: RetryBackoff 0s must be positive"), "setting POSTLINE_RETRY_BACKOFF: "},
		{configerr.Errorf("SendersX", "delivery: SendersX is not a field"), "settings: delivery: SendersX is not a field"},
		// The text is never read: only the field in the error's type counts.
		{errors.New("delivery: Senders -1 out of range"), "settings: delivery: Senders -1 out of range"},
		// Wrapped and joined field errors are found, the first mapped one wins.
		{fmt.Errorf("pipeline: %w", configerr.Errorf("Senders", "Senders -1")), "setting POSTLINE_SENDERS: pipeline: Senders -1"},
		{errors.Join(configerr.Errorf("Other", "Other 1"), configerr.Errorf("RetryBackoff", "RetryBackoff 0s")), "setting POSTLINE_RETRY_BACKOFF: "},
	}
	for _, tt := range tests {
		err := NameSetting(tt.err, fields)
		if got := err.Error(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("NameSetting(%q) = %q, want prefix %q", tt.err, got, tt.want)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("NameSetting(%q) does not wrap the error", tt.err)
		}
	}
}
