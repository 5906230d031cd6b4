package config

import (
	"testing"
	"time"
)

func TestSharedSettingsLoadThroughEmbedding(t *testing.T) {
	type service struct {
		ConsumerGroup
		Logging
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want service
	}{
		{
			name: "defaults",
			want: service{ConsumerGroup{10 * time.Second, time.Second}, Logging{"info"}},
		},
		{
			name: "environment",
			env:  map[string]string{"POSTLINE_SESSION_TIMEOUT": "6s", "POSTLINE_LOG_LEVEL": "debug"},
			want: service{ConsumerGroup{6 * time.Second, time.Second}, Logging{"debug"}},
		},
		{
			name: "flags",
			args: []string{"--heartbeat-interval", "500ms", "--log-level", "warn"},
			want: service{ConsumerGroup{10 * time.Second, 500 * time.Millisecond}, Logging{"warn"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got service
			if err := Load(&got, "svc", tt.args, func(k string) string { return tt.env[k] }, nil); err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
