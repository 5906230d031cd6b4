package delivery

import (
	"context"
	"errors"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/job"
)

// Composer renders template jobs: a job that names a template instead of
// carrying its bodies. Safe for concurrent use.
type Composer interface {
	// Compose renders j's template with its data and locale. An error
	// that says ComposeUnavailable (the template store cannot be read)
	// is retried; any other error means no version of the template could
	// render the job, and it is dead-lettered as render_failed.
	Compose(ctx context.Context, j *job.Job) (Composed, error)
}

// Composed is a rendered template job.
type Composed struct {
	Subject, Text, HTML string
	// Template is the version that rendered it, and why that one.
	Template event.TemplateUse
}

// ErrComposeUnavailable marks a composer error that retrying can mend:
// the template store did not answer.
var ErrComposeUnavailable = errors.New("delivery: the template store is unavailable")

// templated reports whether j names a template instead of carrying its
// bodies.
func templated(j *job.Job) bool {
	return j.Template != nil && j.Text == "" && j.HTML == ""
}

// compose renders a template job into it.job before it is sent, once per
// item (a retry from a delay tier renders again, and the canary hash makes
// it pick the same version while the labels stand). It reports whether
// the item may go on to the relay; when not, the item's outcome is set.
func (p *Pipeline) compose(ctx context.Context, it *item) bool {
	if it.composed != nil || !templated(&it.job) {
		return true
	}
	if p.composer == nil {
		p.die(it, deadletter.ReasonRenderFailed, classRender, "the job names template "+it.job.Template.Name+
			" but this worker has no template store")
		return false
	}
	var (
		c   Composed
		err error
	)
	if perr := p.contain("rendering", it.msg, func() { c, err = p.composer.Compose(ctx, &it.job) }); perr != nil {
		p.die(it, deadletter.ReasonInternalError, classInternal, perr.Error())
		return false
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return false // hard stop: the record is left unfinished
	case errors.Is(err, ErrComposeUnavailable):
		// Like a relay that cannot take mail now: the job waits in the
		// worker, with no attempt charged.
		p.logger.Warn("template store unavailable; the job waits", "message_id", it.job.MessageID,
			"template", it.job.Template.Name, "error", err)
		p.release(it)
		return false
	default:
		p.metrics.renderFailures.Inc()
		p.die(it, deadletter.ReasonRenderFailed, classRender, err.Error())
		return false
	}
	it.job.Subject, it.job.Text, it.job.HTML = c.Subject, c.Text, c.HTML
	it.composed = &c.Template
	return true
}
