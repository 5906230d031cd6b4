package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/webhook"
)

// noWebhooks says why the webhooks page shows nothing.
const noWebhooks = "Webhook endpoints are not available in this console. Use postctl webhooks ls."

// Bounds of the webhook forms.
const (
	maxEndpointBytes      = 256
	maxWebhookReasonBytes = 500
	// defaultReplayRate and maxReplayRate are postctl webhooks replay's.
	defaultReplayRate = 50.0
	maxReplayRate     = 10000.0
	// webhookLogLines is how much of an endpoint's log its page shows.
	webhookLogLines = 20
)

// Sources of a webhook replay, as postctl webhooks replay --source names them.
const (
	replayFromDeadLetters = "dead-letters"
	replayFromEvents      = "events"
)

// webhooksBody is the webhooks page's data.
type webhooksBody struct {
	Endpoints []webhook.EndpointReport
	Now       time.Time
}

var webhookNotices = map[string]string{
	"enabled":   "Endpoint enabled: its failures are forgotten and its queued events are due at once. The dispatchers see it within 5 s.",
	"disabled":  "Endpoint disabled: its events are dead-lettered (replayable) until it is enabled. The dispatchers see it within 5 s.",
	"unchanged": "The endpoint was in that state already: nothing changed.",
}

// webhooksPage lists every endpoint the dispatchers know: its state,
// backlog, oldest pending event, dead letters and last success and
// failure, with enable, disable and replay for operators.
func (s *Server) webhooksPage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	d := pageData{Title: "Webhook endpoints", Nav: "webhooks", Notice: webhookNotices[q.Get("done")]}.forVisit(&v)
	if n, err := strconv.Atoi(q.Get("replayed")); err == nil {
		d.Notice = fmt.Sprintf("%d events of %s queued again, due one after the other at the replay's rate.", n, q.Get("endpoint"))
	}
	body := webhooksBody{Now: time.Now()}
	if s.cfg.Webhooks == nil {
		d.Error = noWebhooks
	} else {
		eps, err := s.cfg.Webhooks.Endpoints(r.Context())
		if err != nil {
			s.storeFailed(w, r, &v, "reading the webhook endpoints", err)
			return
		}
		body.Endpoints = eps
	}
	d.Body = body
	s.render(w, http.StatusOK, "webhooks", d)
}

// webhookTarget is an endpoint change as the audit log keeps it.
type webhookTarget struct {
	Endpoint string          `json:"endpoint"`
	Reason   string          `json:"reason,omitempty"`
	Changed  *bool           `json:"changed,omitempty"`
	Replay   *webhookReplayF `json:"replay,omitempty"`
	Selected *int            `json:"selected,omitempty"`
}

// setWebhook disables (with a reason) or enables an endpoint.
func (s *Server) setWebhook(disable bool) actionFunc {
	return func(ctx context.Context, r *http.Request, v visit) (any, string, error) {
		t := webhookTarget{Endpoint: strings.TrimSpace(r.PostForm.Get("endpoint")), Reason: strings.TrimSpace(r.PostForm.Get("reason"))}
		if err := checkFields(field{"Endpoint", t.Endpoint, maxEndpointBytes}, field{"Reason", t.Reason, maxWebhookReasonBytes}); err != nil {
			return webhookTarget{}, "", err
		}
		switch {
		case t.Endpoint == "":
			return t, "", inputError{"Give the endpoint."}
		case disable && t.Reason == "":
			return t, "", inputError{"Reason is required to disable an endpoint: say why, for its log."}
		case s.cfg.Webhooks == nil:
			return t, "", unavailableError{noWebhooks}
		}
		changed, err := s.cfg.Webhooks.SetDisabled(ctx, t.Endpoint, disable, t.Reason, consoleActor(v.session.Operator), time.Now())
		if err != nil {
			return t, "", err
		}
		t.Changed = &changed
		done := "enabled"
		if disable {
			done = "disabled"
		}
		if !changed {
			done = "unchanged"
		}
		return t, "/webhooks?done=" + done, nil
	}
}

// webhookReplayF is a replay form as typed (and, once checked, with
// absolute times), echoed into the confirmation.
type webhookReplayF struct {
	Endpoint string `json:"endpoint"`
	Source   string `json:"source"`
	From     string `json:"from,omitempty"`
	To       string `json:"to,omitempty"`
	Types    string `json:"types,omitempty"`
	Tenants  string `json:"tenants,omitempty"`
	Rate     string `json:"rate"`
}

func readWebhookReplay(v url.Values) webhookReplayF {
	get := func(name string) string { return strings.TrimSpace(v.Get(name)) }
	return webhookReplayF{Endpoint: get("endpoint"), Source: get("source"), From: get("from"), To: get("to"), Types: get("types"),
		Tenants: get("tenants"), Rate: get("rate")}
}

// webhookReplay is a checked replay form.
type webhookReplay struct {
	form   webhookReplayF
	filter webhook.ReplayFilter
	rate   float64
}

// parseWebhookReplay checks a replay form as postctl webhooks replay
// checks its flags.
func parseWebhookReplay(f webhookReplayF, now time.Time) (webhookReplay, error) {
	out := webhookReplay{form: f}
	if err := checkFields(field{"Endpoint", f.Endpoint, maxEndpointBytes}, field{"Source", f.Source, maxReasonBytes},
		field{"From", f.From, maxReasonBytes}, field{"To", f.To, maxReasonBytes}, field{"Event types", f.Types, maxRedriveListBytes},
		field{"Tenants", f.Tenants, maxRedriveListBytes}, field{"Rate", f.Rate, maxRateBytes}); err != nil {
		return out, err
	}
	if f.Endpoint == "" {
		return out, inputError{"Give the endpoint: open its replay from the webhooks page."}
	}
	out.filter.Endpoint = f.Endpoint
	var err error
	if out.filter.From, err = parseWhen("From", f.From, now); err != nil {
		return out, err
	}
	if out.filter.To, err = parseWhen("To", f.To, now); err != nil {
		return out, err
	}
	if !out.filter.From.IsZero() && !out.filter.To.IsZero() && !out.filter.To.After(out.filter.From) {
		return out, inputError{"To must be after From."}
	}
	for t := range strings.SplitSeq(f.Types, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if !event.Type(t).Valid() {
			return out, inputError{fmt.Sprintf("Event type %q is not one of %v.", t, event.Types)}
		}
		out.filter.Types = append(out.filter.Types, event.Type(t))
	}
	for t := range strings.SplitSeq(f.Tenants, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out.filter.Tenants = append(out.filter.Tenants, t)
		}
	}
	out.rate = defaultReplayRate
	if f.Rate != "" {
		if out.rate, err = strconv.ParseFloat(f.Rate, 64); err != nil || !(out.rate > 0 && out.rate <= maxReplayRate) {
			return out, inputError{fmt.Sprintf("Rate %q: give events a second, more than 0 and at most %g.", f.Rate, maxReplayRate)}
		}
	}
	switch f.Source {
	case "", replayFromDeadLetters:
		out.form.Source = replayFromDeadLetters
	case replayFromEvents:
		if out.filter.From.IsZero() {
			return out, inputError{"From is required to replay from the events topic: the time to read it from."}
		}
	default:
		return out, inputError{fmt.Sprintf("Source %q: pick the endpoint's dead letters or the events topic.", f.Source)}
	}
	out.form.From, out.form.To, out.form.Rate = absolute(out.filter.From), absolute(out.filter.To), strconv.FormatFloat(out.rate, 'g', -1, 64)
	return out, nil
}

// webhookReplayBody is the replay page's data.
type webhookReplayBody struct {
	Form          webhookReplayF
	Types         []event.Type
	EventsOffered bool
	DefaultRate   float64
	MaxRate       float64
	Counted       bool
	Selected      int
	// Log is the endpoint's log, newest first: disabled, enabled, replayed.
	Log []webhook.LogEntry
}

func (s *Server) newReplayBody(f webhookReplayF) webhookReplayBody {
	return webhookReplayBody{Form: f, Types: event.Types, EventsOffered: s.cfg.WebhookEvents != nil, DefaultRate: defaultReplayRate, MaxRate: maxReplayRate}
}

// webhookReplayPage shows an endpoint's log, as postctl webhooks status
// does, and its replay form.
func (s *Server) webhookReplayPage(w http.ResponseWriter, r *http.Request, v visit) {
	f := readWebhookReplay(r.URL.Query())
	body := s.newReplayBody(f)
	d := pageData{Title: "Webhook endpoint " + cmpOr(f.Endpoint, "(none given)"), Nav: "webhooks"}.forVisit(&v)
	switch {
	case s.cfg.Webhooks == nil:
		d.Error = noWebhooks
	case f.Endpoint != "" && checkFields(field{"Endpoint", f.Endpoint, maxEndpointBytes}) == nil:
		log, err := s.cfg.Webhooks.Log(r.Context(), f.Endpoint, webhookLogLines)
		if err != nil {
			s.storeFailed(w, r, &v, "reading the endpoint's log", err)
			return
		}
		body.Log = log
	}
	d.Body = body
	s.render(w, http.StatusOK, "webhookreplay", d)
}

// selectReplay counts (dryRun) or queues again what rp selects, from the
// endpoint's dead letters or the events topic.
func (s *Server) selectReplay(ctx context.Context, rp webhookReplay, dryRun bool, actor string) (int, error) {
	if s.cfg.Webhooks == nil {
		return 0, unavailableError{noWebhooks}
	}
	if rp.form.Source != replayFromEvents {
		return s.cfg.Webhooks.Replay(ctx, rp.filter, rp.rate, dryRun, actor, time.Now())
	}
	if s.cfg.WebhookEvents == nil {
		return 0, unavailableError{"Replaying from the events topic is not available in this console (it runs without Kafka). Use postctl webhooks replay --source events."}
	}
	picked, err := webhook.SelectEvents(ctx, s.cfg.WebhookEvents(rp.filter.From), rp.filter)
	if err != nil {
		s.log.Error("console: reading the events topic for a webhook replay failed", "endpoint", rp.form.Endpoint, "error", err)
		return 0, unavailableError{"The console could not read the events topic (Kafka): nothing was queued. Check postctl status, then count again."}
	}
	if dryRun {
		return len(picked), nil
	}
	return s.cfg.Webhooks.Requeue(ctx, picked, rp.rate, rp.filter, actor, time.Now())
}

// countWebhookReplay is a replay's dry run: how many events it would
// queue again, with a confirmation form carrying the same selection.
func (s *Server) countWebhookReplay(ctx context.Context, r *http.Request, v visit) (outcome, error) {
	rp, err := parseWebhookReplay(readWebhookReplay(r.PostForm), time.Now())
	target := webhookTarget{Endpoint: rp.form.Endpoint, Replay: &rp.form}
	if err != nil {
		return outcome{target: target}, err
	}
	n, err := s.selectReplay(ctx, rp, true, consoleActor(v.session.Operator))
	if err != nil {
		return outcome{target: target}, err
	}
	target.Selected = &n
	body := s.newReplayBody(rp.form)
	body.Counted, body.Selected = true, n
	return outcome{target: target, page: "webhookreplay",
		data: pageData{Title: "Webhook endpoint " + rp.form.Endpoint, Nav: "webhooks", Body: body}}, nil
}

// replayWebhook queues the confirmed selection again, checked anew.
func (s *Server) replayWebhook(ctx context.Context, r *http.Request, v visit) (any, string, error) {
	rp, err := parseWebhookReplay(readWebhookReplay(r.PostForm), time.Now())
	target := webhookTarget{Endpoint: rp.form.Endpoint, Replay: &rp.form}
	if err != nil {
		return target, "", err
	}
	n, err := s.selectReplay(ctx, rp, false, consoleActor(v.session.Operator))
	if err != nil {
		return target, "", err
	}
	target.Selected = &n
	return target, "/webhooks?" + url.Values{"replayed": {strconv.Itoa(n)}, "endpoint": {rp.form.Endpoint}}.Encode(), nil
}
