package supervisor

import (
	"context"
	"errors"
	"sync/atomic"
)

// ReadyWhenStarted is the Ready of a service whose one part is published in
// started once its Kafka topics are checked: not ready before, then ready
// while the part's own Ready says so, with unready as the reason when it
// does not.
func ReadyWhenStarted[T any, P interface {
	*T
	Ready() bool
}](started *atomic.Pointer[T], unready string) func(context.Context) error {
	return func(context.Context) error {
		part := P(started.Load())
		if part == nil {
			return errors.New("starting: Kafka topics not checked yet")
		}
		if !part.Ready() {
			return errors.New(unready)
		}
		return nil
	}
}
