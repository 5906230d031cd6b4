package supervisor_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/postline/postline/internal/supervisor"
)

type part struct{ ready bool }

func (p *part) Ready() bool { return p.ready }

func TestReadyWhenStarted(t *testing.T) {
	tests := []struct {
		name    string
		started *part
		want    string
	}{
		{"not started", nil, "starting: Kafka topics not checked yet"},
		{"started, not ready", &part{ready: false}, "writes are failing"},
		{"started and ready", &part{ready: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var started atomic.Pointer[part]
			if tt.started != nil {
				started.Store(tt.started)
			}
			err := supervisor.ReadyWhenStarted(&started, "writes are failing")(context.Background())
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("ready = %q, want %q", got, tt.want)
			}
		})
	}
}
