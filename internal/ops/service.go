package ops

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
)

// Service is a long-running Kafka component's process around its one loop:
// the ops endpoints on Listener, and the two-phase shutdown every such binary
// shares.
type Service struct {
	Logger   *slog.Logger
	Listener net.Listener
	Registry *prometheus.Registry
	// Ready answers /readyz while the loop runs.
	Ready func(context.Context) error
	// ShutdownTimeout bounds phase one: after the signal, the loop has this
	// long to drain and commit before Run gives up on it.
	ShutdownTimeout time.Duration
	// Draining says what phase one does, logged when the signal comes
	// ("finishing requests in flight, then committing").
	Draining string
	// Abandoned says what a loop that outlives ShutdownTimeout leaves behind,
	// in the error Run returns ("unfinished events will be sent again by the
	// next owner").
	Abandoned string
}

// Run serves the ops endpoints and runs loop until it returns or ctx is
// cancelled. A loop that fails while ctx is live turns /healthz unhealthy
// with its error and ends Run with it. On cancellation (phase one) the loop
// gets ShutdownTimeout to return; past it (phase two) Run returns an error
// saying what was abandoned, and the loop's goroutine is left to the process
// exit. A loop stopped by the cancellation before it did anything
// (context.Canceled) is a clean stop.
func (s Service) Run(ctx context.Context, loop func(context.Context) error) error {
	var failed atomic.Pointer[error]
	healthy := func() error {
		if err := failed.Load(); err != nil {
			return *err
		}
		return nil
	}
	server := &http.Server{Handler: Handler(s.Registry, s.Ready, healthy), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() {
		if err := server.Serve(s.Listener); !errors.Is(err, http.ErrServerClosed) {
			served <- fmt.Errorf("http server: %w", err)
			return
		}
		served <- nil
	}()
	done := make(chan error, 1)
	go func() {
		err := loop(ctx)
		if err != nil && ctx.Err() == nil {
			failed.Store(&err)
		}
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Logger.Info("shutting down: "+s.Draining, "timeout", s.ShutdownTimeout)
		t := time.NewTimer(s.ShutdownTimeout)
		select {
		case err = <-done:
		case <-t.C:
			err = fmt.Errorf("shutdown took longer than POSTLINE_SHUTDOWN_TIMEOUT (%s); %s", s.ShutdownTimeout, s.Abandoned)
		}
		t.Stop()
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil // stopped before Kafka answered
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = server.Shutdown(shutdownCtx)
	if herr := <-served; err == nil {
		err = herr
	}
	return err
}
