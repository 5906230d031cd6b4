// Package supervisor owns a Postline service's lifecycle: it runs the
// service's stages beside the ops endpoints (/metrics, /healthz, /readyz),
// shuts them down in two phases, turns a stage that fails for good into an
// unhealthy process that stops, and ends the process with its exit code
// (Main, Exit). Binaries say what their stages are and what "ready" means;
// the supervisor decides when they stop.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/internal/ops"
)

// serverShutdownTimeout bounds the ops endpoints' own shutdown, once the
// stages have returned.
const serverShutdownTimeout = 2 * time.Second

// Supervisor runs one service: its stages and its ops endpoints.
//
// Shutdown has two phases. Phase one starts when Run's context ends: the
// intake context of every stage is cancelled (stop taking work) and the
// stages get ShutdownTimeout to finish what they hold. Phase two starts
// past it: the work context is cancelled (in-flight work is aborted) and
// Run either waits for the stages to return or, when Abandoned is set,
// returns at once with an error saying what is left behind.
type Supervisor struct {
	// Name is the service's name. When set, Run logs "<Name> starting"
	// with the ops endpoints' address (http_addr) and Starting, and
	// "<Name> stopped" with its result.
	Name string
	// Starting are the attributes of the "starting" line: what the service
	// reads, writes and talks to.
	Starting []any
	Logger   *slog.Logger
	Listener net.Listener // of the ops endpoints
	Registry *prometheus.Registry
	// Ready answers /readyz.
	Ready func(context.Context) error
	// ShutdownTimeout bounds phase one (required, positive).
	ShutdownTimeout time.Duration
	// Draining says what phase one does, logged when it starts ("finishing
	// requests in flight, then committing").
	Draining string
	// Aborting, if set, says what phase two does, logged when it starts
	// ("aborting in-flight mail (it will be redelivered)").
	Aborting string
	// Abandoned, if set, says what stages still running past
	// ShutdownTimeout leave behind ("unfinished events will be sent again
	// by the next owner"): Run stops waiting for them, returns an error
	// saying so, and leaves them to the process exit. When empty, Run
	// waits for the stages, which must honour the work context.
	Abandoned string
}

// A Stage is one long-running part of a service.
type Stage struct {
	// Name prefixes the stage's error and names it in the log; empty for
	// a service's only stage.
	Name string
	Run  func(Phases) error
}

// Phases are the contexts a stage runs under, and the way it starts more
// stages under the same rules.
type Phases struct {
	// Intake ends when shutdown starts or a stage failed: stop taking
	// work, finish what is held.
	Intake context.Context
	// Work ends past the shutdown timeout or when a stage failed: abort
	// what is in flight.
	Work context.Context

	life *lifecycle
}

// Run runs stages, each in its own goroutine, and returns once all have
// returned, with the first error one of them returned. A stage that fails
// while the service runs fails the service (see Supervisor.Run).
func (p Phases) Run(stages ...Stage) error {
	var g errgroup.Group
	for _, st := range stages {
		g.Go(func() error { return p.life.settle(st.Name, st.Run(p)) })
	}
	return g.Wait()
}

// lifecycle is one Run's shared state.
type lifecycle struct {
	logger *slog.Logger
	// shutdown ends when the service was asked to stop.
	shutdown             context.Context
	stopIntake, stopWork context.CancelFunc
	failed               atomic.Pointer[error]
}

// healthy is /healthz: the first failure, once there is one.
func (l *lifecycle) healthy() error {
	if err := l.failed.Load(); err != nil {
		return *err
	}
	return nil
}

// settle decides what a stage's return means. nil, or a cancellation while
// shutting down or after another stage failed, is a clean stop. Anything
// else fails the service: the first failure is logged and turns /healthz
// unhealthy, and every stage is stopped (intake and work), so the process
// exits non-zero instead of holding work it no longer does.
func (l *lifecycle) settle(name string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) && (l.shutdown.Err() != nil || l.failed.Load() != nil) {
		return nil
	}
	if name != "" {
		err = fmt.Errorf("%s: %w", name, err)
	}
	if l.failed.CompareAndSwap(nil, &err) {
		l.logger.Error("stage failed for good; stopping", "stage", name, "error", err)
	}
	l.stopIntake()
	l.stopWork()
	return err
}

// Run serves the ops endpoints and runs stages until they have all returned
// or ctx ends and the two-phase shutdown is over (see Supervisor). It
// returns the first failure: a stage's, or the ops endpoints' own.
func (s Supervisor) Run(ctx context.Context, stages ...Stage) error {
	if s.Name == "" {
		return s.run(ctx, stages)
	}
	s.Logger.Info(s.Name+" starting", append([]any{"http_addr", s.Listener.Addr().String()}, s.Starting...)...)
	err := s.run(ctx, stages)
	s.Logger.Info(s.Name+" stopped", "error", err)
	return err
}

// run is Run without the starting and stopped lines.
func (s Supervisor) run(ctx context.Context, stages []Stage) error {
	// The stages' contexts keep ctx's values but not its cancellation:
	// the phases decide when they end.
	base := context.WithoutCancel(ctx)
	intake, stopIntake := context.WithCancel(base)
	work, stopWork := context.WithCancel(base)
	defer stopIntake()
	defer stopWork()
	life := &lifecycle{logger: s.Logger, shutdown: ctx, stopIntake: stopIntake, stopWork: stopWork}
	phases := Phases{Intake: intake, Work: work, life: life}

	server := &http.Server{Handler: ops.Handler(s.Registry, s.Ready, life.healthy), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() {
		var err error
		if serr := server.Serve(s.Listener); !errors.Is(serr, http.ErrServerClosed) {
			err = life.settle("", fmt.Errorf("http server: %w", serr))
		}
		served <- err
	}()
	done := make(chan error, 1)
	go func() { done <- phases.Run(stages...) }()

	err := s.wait(ctx, done, stopIntake, stopWork)
	stopIntake()
	stopWork()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), serverShutdownTimeout)
	defer cancel()
	_ = server.Shutdown(shutdownCtx)
	if herr := <-served; err == nil {
		err = herr
	}
	return err
}

// wait returns the stages' result, running the two-phase shutdown when ctx
// ends first.
func (s Supervisor) wait(ctx context.Context, done <-chan error, stopIntake, stopWork func()) error {
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	s.Logger.Info("shutting down: "+s.Draining, "timeout", s.ShutdownTimeout)
	stopIntake()
	t := time.NewTimer(s.ShutdownTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	if s.Aborting != "" {
		s.Logger.Warn("shutdown timeout passed: " + s.Aborting)
	}
	stopWork()
	if s.Abandoned != "" {
		return fmt.Errorf("shutdown took longer than POSTLINE_SHUTDOWN_TIMEOUT (%s); %s", s.ShutdownTimeout, s.Abandoned)
	}
	return <-done
}
