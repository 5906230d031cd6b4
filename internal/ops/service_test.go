package ops_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/ops"
)

func TestServiceRun(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		loop    func(ctx context.Context) error
		cancel  bool   // cancel ctx once the loop runs
		wantErr string // "" for a clean stop
	}{
		{
			name:    "loop fails",
			loop:    func(context.Context) error { return boom },
			wantErr: "boom",
		},
		{
			name:   "loop drains within the timeout",
			loop:   func(ctx context.Context) error { <-ctx.Done(); return nil },
			cancel: true,
		},
		{
			name:   "loop stopped before Kafka answered",
			loop:   func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			cancel: true,
		},
		{
			name: "loop outlives the shutdown timeout",
			loop: func(ctx context.Context) error {
				<-ctx.Done()
				time.Sleep(time.Second)
				return nil
			},
			cancel:  true,
			wantErr: "shutdown took longer than POSTLINE_SHUTDOWN_TIMEOUT (50ms); work is left for the next owner",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			running := make(chan struct{})
			svc := ops.Service{
				Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
				Listener:        l,
				Registry:        ops.NewRegistry(),
				Ready:           func(context.Context) error { return nil },
				ShutdownTimeout: 50 * time.Millisecond,
				Draining:        "draining",
				Abandoned:       "work is left for the next owner",
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				errc <- svc.Run(ctx, func(ctx context.Context) error {
					close(running)
					return tc.loop(ctx)
				})
			}()
			<-running
			if tc.cancel {
				// The endpoints answer while the loop runs.
				resp, err := http.Get("http://" + l.Addr().String() + "/readyz")
				if err != nil {
					t.Fatalf("readyz while running: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("readyz while running = %d, want 200", resp.StatusCode)
				}
				cancel()
			}
			err = <-errc
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Run = %v, want a clean stop", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Run = %v, want an error containing %q", err, tc.wantErr)
			}
			if _, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
				t.Error("the ops endpoints still accept connections after Run returned")
			}
		})
	}
}
