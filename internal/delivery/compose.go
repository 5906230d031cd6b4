package delivery

import (
	"context"

	"github.com/postline/postline/job"
)

// templated reports whether j names a template instead of carrying its
// bodies.
func templated(j *job.Job) bool {
	return j.Template != nil && j.Text == "" && j.HTML == ""
}

// compose renders a template job into it.job before it is sent, once per
// item (a retry from a delay tier renders again, and the canary hash makes
// it pick the same version while the labels stand). It reports whether
// the item may go on to the relay; when not, it returns the item's fate
// (composeFailed).
func (p *Pipeline) compose(ctx context.Context, it *item) (fate, bool) {
	if it.composed != nil || !templated(&it.job) {
		return fate{}, true
	}
	if p.composer == nil {
		return p.composeFailed(ctx, it, errNoTemplateStore), false
	}
	var (
		c   Composed
		err error
	)
	if perr := p.contain("rendering", it.msg, func() { c, err = p.composer.Compose(ctx, &it.job) }); perr != nil {
		return p.composeFailed(ctx, it, perr), false
	}
	if err != nil {
		return p.composeFailed(ctx, it, err), false
	}
	it.job.Subject, it.job.Text, it.job.HTML = c.Subject, c.Text, c.HTML
	it.composed = &c.Template
	return fate{}, true
}
