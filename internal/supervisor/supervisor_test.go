package supervisor_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/ops"
	"github.com/postline/postline/internal/supervisor"
)

func TestSupervisorRun(t *testing.T) {
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
			svc := supervisor.Supervisor{
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
				errc <- svc.Run(ctx, supervisor.Stage{Run: func(p supervisor.Phases) error {
					close(running)
					return tc.loop(p.Intake)
				}})
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

func newSupervisor(t *testing.T, timeout time.Duration) (supervisor.Supervisor, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return supervisor.Supervisor{
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		Listener:        l,
		Registry:        ops.NewRegistry(),
		Ready:           func(context.Context) error { return nil },
		ShutdownTimeout: timeout,
		Draining:        "draining",
	}, "http://" + l.Addr().String()
}

// A stage that fails for good turns /healthz unhealthy, stops the others
// (their cancellation is not reported) and ends Run with its error, named.
func TestStageFailureStopsTheService(t *testing.T) {
	svc, base := newSupervisor(t, time.Minute)
	boom := errors.New("boom")
	unblock := make(chan struct{})
	unhealthy := make(chan int, 1)
	err := svc.Run(context.Background(), supervisor.Stage{Name: "outer", Run: func(p supervisor.Phases) error {
		return p.Run(
			supervisor.Stage{Name: "consumer", Run: func(p supervisor.Phases) error {
				<-p.Intake.Done()
				resp, err := http.Get(base + "/healthz")
				if err != nil {
					return err
				}
				resp.Body.Close()
				unhealthy <- resp.StatusCode
				<-p.Work.Done()
				return p.Work.Err()
			}},
			supervisor.Stage{Name: "sweeper", Run: func(supervisor.Phases) error {
				<-unblock
				return boom
			}},
			supervisor.Stage{Name: "starter", Run: func(supervisor.Phases) error {
				close(unblock)
				return nil
			}},
		)
	}})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "sweeper: boom") {
		t.Fatalf("Run = %v, want the sweeper's failure, named", err)
	}
	if code := <-unhealthy; code != http.StatusServiceUnavailable {
		t.Errorf("/healthz after a stage failed = %d, want 503", code)
	}
}

// Without Abandoned, phase two cancels the work context and waits for the
// stages: the intake ends at the signal, the work only past the timeout.
func TestShutdownPhases(t *testing.T) {
	svc, _ := newSupervisor(t, 300*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var intakeEnded, workEnded time.Time
	start := time.Now()
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	err := svc.Run(ctx, supervisor.Stage{Name: "pipeline", Run: func(p supervisor.Phases) error {
		<-p.Intake.Done()
		intakeEnded = time.Now()
		<-p.Work.Done()
		workEnded = time.Now()
		time.Sleep(50 * time.Millisecond) // aborting takes a moment: Run waits
		return p.Work.Err()
	}})
	if err != nil {
		t.Fatalf("Run = %v, want a clean stop", err)
	}
	if d := intakeEnded.Sub(start); d > 250*time.Millisecond {
		t.Errorf("intake ended %s after the start, want at the signal (20ms)", d)
	}
	if d := workEnded.Sub(intakeEnded); d < 300*time.Millisecond {
		t.Errorf("work ended %s after the intake, want the shutdown timeout (300ms)", d)
	}
	if d := time.Since(workEnded); d < 50*time.Millisecond {
		t.Errorf("Run returned %s after the work ended, want it to wait for the stage", d)
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{fmt.Errorf("worker: %w", flag.ErrHelp), 0},
		{errors.New("boom"), supervisor.ExitFailure},
		{fmt.Errorf("wrapped: %w", usage{}), supervisor.ExitUsage},
	}
	for _, tt := range tests {
		if got := supervisor.ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

type usage struct{}

func (usage) Error() string { return "bad flag" }
func (usage) ExitCode() int { return supervisor.ExitUsage }

// A named service's Run logs its start, with the ops endpoints' address and
// the service's own attributes, and its stop, with the result.
func TestNamedServiceLogsStartAndStop(t *testing.T) {
	tests := []struct {
		name      string
		svcName   string
		stage     error
		wantLines []string
	}{
		{
			name:    "clean stop",
			svcName: "worker",
			wantLines: []string{
				`level=INFO msg="worker starting" http_addr=ADDR topic=mail.jobs`,
				`level=INFO msg="worker stopped" error=<nil>`,
			},
		},
		{
			name:    "failure",
			svcName: "worker",
			stage:   errors.New("boom"),
			wantLines: []string{
				`level=INFO msg="worker starting" http_addr=ADDR topic=mail.jobs`,
				`level=ERROR msg="stage failed for good; stopping" stage="" error=boom`,
				`level=INFO msg="worker stopped" error=boom`,
			},
		},
		{
			name: "no name, no lines",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc, base := newSupervisor(t, time.Minute)
			var buf strings.Builder
			svc.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			}))
			svc.Name, svc.Starting = tc.svcName, []any{"topic", "mail.jobs"}
			err := svc.Run(context.Background(), supervisor.Stage{Run: func(supervisor.Phases) error { return tc.stage }})
			if !errors.Is(err, tc.stage) {
				t.Fatalf("Run = %v, want %v", err, tc.stage)
			}
			got := strings.Fields(strings.TrimSpace(buf.String()))
			want := strings.Fields(strings.ReplaceAll(strings.Join(tc.wantLines, "\n"), "ADDR", strings.TrimPrefix(base, "http://")))
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("log:\n%s\nwant:\n%s", buf.String(), strings.Join(tc.wantLines, "\n"))
			}
		})
	}
}
