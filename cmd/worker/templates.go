package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/compose"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/job"
)

// composer is the template composer as the pipeline sees it.
type composer struct{ c *compose.Composer }

var _ delivery.Composer = composer{}

// Compose implements delivery.Composer.
func (c composer) Compose(ctx context.Context, j *job.Job) (delivery.Composed, error) {
	res, err := c.c.Compose(ctx, compose.Request{MessageID: j.MessageID, Template: j.Template.Name,
		Requested: j.Template.Version, Data: j.Template.Data, Locale: j.Template.Locale})
	if err != nil {
		if errors.Is(err, compose.ErrUnavailable) {
			return delivery.Composed{}, fmt.Errorf("%w: %w", delivery.ErrComposeUnavailable, err)
		}
		return delivery.Composed{}, err
	}
	return delivery.Composed{Subject: res.Subject, Text: res.Text, HTML: res.HTML,
		Template: event.TemplateUse{Name: res.Template, Version: res.Version, Why: res.Why, Builtin: res.Builtin}}, nil
}
