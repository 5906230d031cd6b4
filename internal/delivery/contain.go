package delivery

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/postline/postline/internal/consumer"
)

// panicError is a panic recovered while handling one record.
type panicError struct {
	stage string
	value any
}

// Error names the stage and what panicked, without the panic's value
// unless it is a runtime error: a value built from the job could hold the
// mail's content.
func (e *panicError) Error() string {
	switch v := e.value.(type) {
	case runtime.Error:
		return fmt.Sprintf("panic while %s: %v", e.stage, v)
	case error:
		return fmt.Sprintf("panic while %s: an error of type %T", e.stage, v)
	default:
		return fmt.Sprintf("panic while %s: a value of type %T", e.stage, v)
	}
}

// contain runs fn, the handling of one record in one stage, and turns a
// panic into a *panicError after logging it with its stack. One record
// that trips a bug must not crash the worker, and with it every worker the
// partition moves to: the caller dead-letters the record instead
// (deadletter.ReasonInternalError) and the offset moves on.
func (p *Pipeline) contain(stage string, m consumer.Message, fn func()) (perr *panicError) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		perr = &panicError{stage: stage, value: v}
		p.metrics.panics.WithLabelValues(stage).Inc()
		p.logger.Error("recovered a panic; the record is dead-lettered as internal_error",
			"stage", stage, "topic", m.Topic, "partition", m.Partition, "offset", m.Offset,
			"error", perr.Error(), "stack", string(debug.Stack()))
	}()
	fn()
	return nil
}
