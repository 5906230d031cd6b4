package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/webhook"
)

// Defaults and limits of postctl webhooks.
const (
	defaultReplayRate = 50.0  // events a second a replay queues for
	maxReplayRate     = 10000 // events a second
	webhookLogLines   = 20    // log entries status shows
)

func newWebhooksCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "Webhook endpoints: backlog, health, enable, disable, replay dead letters",
		Long: `Read and change the webhook dispatcher's per-endpoint state in PostgreSQL
(--database-url): what each endpoint's queue holds (events waiting for another
attempt, dead letters), when it last took an event and last failed, whether it
is disabled, and its log. Events not yet read by an endpoint's consumer group
are its lag, which ls shows as UNREAD.`,
	}
	cmd.AddCommand(newWebhooksLsCmd(g), newWebhooksStatusCmd(g), newWebhooksSetCmd(g, true), newWebhooksSetCmd(g, false),
		newWebhooksReplayCmd(g))
	return cmd
}

// webhookEndpointRecord is one endpoint in JSON output.
type webhookEndpointRecord struct {
	Endpoint       string     `json:"endpoint"`
	Unread         *int64     `json:"unread,omitempty"`
	Pending        int        `json:"pending"`
	OldestPending  *time.Time `json:"oldest_pending,omitempty"`
	Dead           int        `json:"dead"`
	LastSuccess    *time.Time `json:"last_success,omitempty"`
	LastFailure    *time.Time `json:"last_failure,omitempty"`
	LastStatus     int        `json:"last_status,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	FailingSince   *time.Time `json:"failing_since,omitempty"`
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
}

func newWebhookEndpointRecord(r webhook.EndpointReport) webhookEndpointRecord {
	return webhookEndpointRecord{
		Endpoint: r.Endpoint, Pending: r.Pending, OldestPending: timePtr(r.OldestPending), Dead: r.Dead,
		LastSuccess: timePtr(r.LastSuccess), LastFailure: timePtr(r.LastFailure), LastStatus: r.LastStatus, LastError: r.LastError,
		FailingSince: timePtr(r.FailingSince), DisabledAt: timePtr(r.DisabledAt), DisabledReason: r.DisabledReason,
	}
}

// state is the endpoint's state in one word.
func (r webhookEndpointRecord) state() string {
	switch {
	case r.DisabledAt != nil:
		return "disabled"
	case r.FailingSince != nil:
		return "failing"
	}
	return "ok"
}

func openQueue(ctx context.Context, g *globals) (*webhook.Queue, func(), error) {
	pool, err := openPool(ctx, g)
	if err != nil {
		return nil, nil, err
	}
	return webhook.NewQueue(pool), pool.Close, nil
}

// addUnread sets each record's unread events: the lag of the endpoint's
// consumer group on the events topic. An endpoint whose group is not
// found keeps none.
func addUnread(ctx context.Context, g *globals, groupPrefix string, recs []webhookEndpointRecord) {
	client, closeConn := g.kafka.Client("", 10*time.Second)
	defer closeConn()
	for i := range recs {
		lag, err := consumer.Lag(ctx, client, g.eventsTopic, groupPrefix+"."+recs[i].Endpoint)
		if err != nil {
			fmt.Fprintf(g.stderr, "postctl: lag of endpoint %s: %v\n", recs[i].Endpoint, err)
			continue
		}
		var n int64
		for _, l := range lag {
			n += l
		}
		recs[i].Unread = &n
	}
}

func newWebhooksLsCmd(g *globals) *cobra.Command {
	var groupPrefix string
	var withLag bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the endpoints: state, backlog, oldest pending, dead letters, last success and failure",
		Long: `List every endpoint the dispatchers have heard from: its state (ok, failing,
disabled), the events its consumer group has not read yet (UNREAD, from Kafka),
the events in its queue waiting for another attempt (PENDING) and the age of the
oldest, its dead letters kept for replay (DEAD), and when it last took an event
and last failed, with what.

--output json prints {"endpoints": [{"endpoint", "unread"?, "pending", "oldest_pending"?,
"dead", "last_success"?, "last_failure"?, "last_status"?, "last_error"?,
"failing_since"?, "disabled_at"?, "disabled_reason"?}]}; times are RFC 3339 in
UTC, fields marked ? are left out when empty.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, closeQueue, err := openQueue(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer closeQueue()
			reports, err := q.Endpoints(cmd.Context())
			if err != nil {
				return withMigrateHint(err)
			}
			recs := make([]webhookEndpointRecord, len(reports))
			for i, r := range reports {
				recs[i] = newWebhookEndpointRecord(r)
			}
			if withLag {
				addUnread(cmd.Context(), g, groupPrefix, recs)
			}
			return printReport(g, map[string]any{"endpoints": recs}, func() error {
				if len(recs) == 0 {
					_, err := fmt.Fprintln(g.stdout, "no webhook endpoints yet: the dispatcher records each endpoint once it has tried it")
					return err
				}
				now := time.Now()
				rows := make([][]string, len(recs))
				for i, r := range recs {
					oldest := "-"
					if r.OldestPending != nil {
						oldest = formatAge(now.Sub(*r.OldestPending))
					}
					last := "-"
					if r.LastFailure != nil {
						last = fmt.Sprintf("%s (%s)", formatAge(now.Sub(*r.LastFailure)), r.LastError)
					}
					success := "-"
					if r.LastSuccess != nil {
						success = formatAge(now.Sub(*r.LastSuccess))
					}
					unread := "-"
					if r.Unread != nil {
						unread = strconv.FormatInt(*r.Unread, 10)
					}
					rows[i] = []string{r.Endpoint, r.state(), unread, strconv.Itoa(r.Pending), oldest, strconv.Itoa(r.Dead), success, last}
				}
				return writeTable(g.stdout, []string{"ENDPOINT", "STATE", "UNREAD", "PENDING", "OLDEST", "DEAD", "LAST_SUCCESS", "LAST_FAILURE"}, rows)
			})
		},
	}
	cmd.Flags().StringVar(&groupPrefix, "webhooks-group", webhook.DefaultGroupID, "the dispatchers' consumer group prefix (POSTLINE_WEBHOOKS_GROUP)")
	cmd.Flags().BoolVar(&withLag, "lag", true, "read each endpoint's unread events from Kafka")
	return cmd
}

func newWebhooksStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status ENDPOINT",
		Short: "Show one endpoint: state, backlog, health and its log (disabled, enabled, replayed)",
		Long: `Show one endpoint as ls does, with the reason it is disabled and its log, newest
first: when it was disabled (by the dispatcher or an operator), enabled, and
which dead letters were replayed.

--output json prints the ls object of the endpoint with "log": [{"at", "action",
"actor", "detail"}].`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			q, closeQueue, err := openQueue(ctx, g)
			if err != nil {
				return err
			}
			defer closeQueue()
			reports, err := q.Endpoints(ctx)
			if err != nil {
				return withMigrateHint(err)
			}
			rec := webhookEndpointRecord{Endpoint: args[0]}
			found := false
			for _, r := range reports {
				if r.Endpoint == args[0] {
					rec, found = newWebhookEndpointRecord(r), true
				}
			}
			if !found {
				return fmt.Errorf("webhook endpoint %q: the dispatchers have not recorded it (postctl webhooks ls lists those they have)", args[0])
			}
			log, err := q.Log(ctx, args[0], webhookLogLines)
			if err != nil {
				return err
			}
			out := struct {
				webhookEndpointRecord
				Log []webhook.LogEntry `json:"log"`
			}{rec, log}
			return printReport(g, out, func() error {
				w := g.stdout
				fmt.Fprintf(w, "endpoint       %s\nstate          %s\n", rec.Endpoint, rec.state())
				if rec.DisabledAt != nil {
					fmt.Fprintf(w, "disabled       %s: %s\n", formatTime(*rec.DisabledAt), rec.DisabledReason)
				}
				if rec.FailingSince != nil {
					fmt.Fprintf(w, "failing since  %s\n", formatTime(*rec.FailingSince))
				}
				fmt.Fprintf(w, "pending        %d", rec.Pending)
				if rec.OldestPending != nil {
					fmt.Fprintf(w, " (oldest first tried %s)", formatTime(*rec.OldestPending))
				}
				fmt.Fprintf(w, "\ndead letters   %d\n", rec.Dead)
				if rec.LastSuccess != nil {
					fmt.Fprintf(w, "last success   %s\n", formatTime(*rec.LastSuccess))
				}
				if rec.LastFailure != nil {
					fmt.Fprintf(w, "last failure   %s: status %d, %s\n", formatTime(*rec.LastFailure), rec.LastStatus, rec.LastError)
				}
				if len(log) == 0 {
					return nil
				}
				fmt.Fprintln(w)
				rows := make([][]string, len(log))
				for i, e := range log {
					rows[i] = []string{formatTime(e.At), e.Action, e.Actor, e.Detail}
				}
				return writeTable(w, []string{"AT", "ACTION", "BY", "DETAIL"}, rows)
			})
		},
	}
}

// operator names who runs postctl, for the endpoint log.
func operator() string {
	if u := os.Getenv("USER"); u != "" {
		return "postctl:" + u
	}
	return "postctl"
}

func newWebhooksSetCmd(g *globals, enable bool) *cobra.Command {
	var reason string
	use, short := "disable ENDPOINT", "Disable an endpoint: its events are dead-lettered (replayable) until it is enabled"
	if enable {
		use, short = "enable ENDPOINT", "Enable an endpoint: its failures are forgotten and its queued events are due at once"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.
The dispatchers see the change within their state interval (5 s). The change
and who made it go to the endpoint's log (postctl webhooks status).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !enable && strings.TrimSpace(reason) == "" {
				return usagef("--reason is required: say why, for the endpoint's log")
			}
			q, closeQueue, err := openQueue(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer closeQueue()
			changed, err := q.SetDisabled(cmd.Context(), args[0], !enable, reason, operator(), time.Now())
			if err != nil {
				return withMigrateHint(err)
			}
			verb := "disabled"
			if enable {
				verb = "enabled"
			}
			text := fmt.Sprintf("endpoint %s %s", args[0], verb)
			if !changed {
				text = fmt.Sprintf("endpoint %s was already %s", args[0], verb)
			}
			return g.print(map[string]any{"endpoint": args[0], "changed": changed, "state": verb}, text)
		},
	}
	if !enable {
		cmd.Flags().StringVar(&reason, "reason", "", "why, for the endpoint's log (required)")
	}
	return cmd
}

// Sources of postctl webhooks replay.
const (
	replayFromDeadLetters = "dead-letters"
	replayFromEvents      = "events"
)

// webhooksReplayFlags are the flags of postctl webhooks replay.
type webhooksReplayFlags struct {
	from, to string
	types    []string
	tenants  []string
	source   string
	rate     float64
	dryRun   bool
}

func newWebhooksReplayCmd(g *globals) *cobra.Command {
	var f webhooksReplayFlags
	cmd := &cobra.Command{
		Use:   "replay ENDPOINT",
		Short: "Send an endpoint's dead letters, or events from the topic, again, selected by time and type, at a bounded rate",
		Long: `Queue events for the endpoint again. With --source dead-letters (the default):
its dead letters, the events it gave up on (410 Gone, the retry horizon passed,
disabled). With --source events: the events of the events topic (--events-topic)
in the time range, whether or not the endpoint had them (say it lost them);
--from is required then, and the endpoints file's filters do not apply. --from and --to bound the events' own time (RFC 3339,
--to exclusive), --type and --tenant select event types and tenants (repeat or
comma-separate). The selected events become due one after another at --rate a
second, so the endpoint is not flooded; the dispatchers then send them with the
usual redeliveries, with the same webhook-id as before. --dry-run only counts them.
The replay is written to the endpoint's log.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return webhooksReplay(cmd.Context(), g, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "events at or after this time (RFC 3339)")
	fl.StringVar(&f.to, "to", "", "events before this time (RFC 3339)")
	fl.StringSliceVar(&f.types, "type", nil, "event types, e.g. bounced,complained (default: every type)")
	fl.StringSliceVar(&f.tenants, "tenant", nil, "only these tenants' events (default: every tenant's)")
	fl.StringVar(&f.source, "source", replayFromDeadLetters, "what to send again: dead-letters (the endpoint's) or events (the events topic)")
	fl.Float64Var(&f.rate, "rate", defaultReplayRate, "events a second the replay makes due")
	fl.BoolVar(&f.dryRun, "dry-run", false, "count the dead letters selected, queue nothing")
	return cmd
}

// webhooksReplay queues the events the flags select again for endpoint.
func webhooksReplay(ctx context.Context, g *globals, endpoint string, f webhooksReplayFlags) error {
	filter, err := f.filter(endpoint)
	if err != nil {
		return err
	}
	q, closeQueue, err := openQueue(ctx, g)
	if err != nil {
		return err
	}
	defer closeQueue()
	var n int
	if f.source == replayFromEvents {
		n, err = replayEvents(ctx, g, q, filter, f.rate, f.dryRun)
	} else {
		n, err = q.Replay(ctx, filter, f.rate, f.dryRun, operator(), time.Now())
	}
	if err != nil {
		return withMigrateHint(err)
	}
	what := "dead letters"
	if f.source == replayFromEvents {
		what = "events"
	}
	text := fmt.Sprintf("%d %s of %s queued again, due over %s", n, what, endpoint, formatAge(time.Duration(float64(n)/f.rate*float64(time.Second))))
	if f.dryRun {
		text = fmt.Sprintf("%d %s of %s would be queued again (dry run)", n, what, endpoint)
	}
	return g.print(map[string]any{"endpoint": endpoint, "selected": n, "dry_run": f.dryRun}, text)
}

// filter checks the flags and returns the selection they make.
func (f webhooksReplayFlags) filter(endpoint string) (webhook.ReplayFilter, error) {
	rf := webhook.ReplayFilter{Endpoint: endpoint, Tenants: f.tenants}
	var err error
	if rf.From, err = parseOptionalTime("--from", f.from); err != nil {
		return rf, err
	}
	if rf.To, err = parseOptionalTime("--to", f.to); err != nil {
		return rf, err
	}
	if !rf.From.IsZero() && !rf.To.IsZero() && !rf.To.After(rf.From) {
		return rf, usagef("--to %s is not after --from %s", f.to, f.from)
	}
	for _, t := range f.types {
		if !event.Type(t).Valid() {
			return rf, usagef("--type %q: want one of %v", t, event.Types)
		}
		rf.Types = append(rf.Types, event.Type(t))
	}
	if f.rate <= 0 || f.rate > maxReplayRate {
		return rf, usagef("--rate %g: want more than 0 and at most %d", f.rate, maxReplayRate)
	}
	switch {
	case f.source != replayFromDeadLetters && f.source != replayFromEvents:
		return rf, usagef("--source %q: want %s or %s", f.source, replayFromDeadLetters, replayFromEvents)
	case f.source == replayFromEvents && rf.From.IsZero():
		return rf, usagef("--source events needs --from: the time to read the topic from")
	}
	return rf, nil
}

// parseOptionalTime reads an RFC 3339 time flag; empty is the zero time.
func parseOptionalTime(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, usagef("%s %q: want an RFC 3339 time such as 2026-12-01T10:00:00Z", flag, v)
	}
	return t, nil
}

// replayEvents reads the events topic from f.From (each partition from the
// first record at or after it, by the broker's time index) to its end
// offsets now, selects events of f's time range, types and tenants, and
// queues them for f's endpoint (counts them with dryRun).
func replayEvents(ctx context.Context, g *globals, q *webhook.Queue, f webhook.ReplayFilter, rate float64, dryRun bool) (int, error) {
	picked, err := webhook.SelectEvents(ctx, redrive.TopicSource{Kafka: g.kafka, Topic: g.eventsTopic, From: f.From}, f)
	if err != nil || dryRun {
		return len(picked), err
	}
	return q.Requeue(ctx, picked, rate, f, operator(), time.Now())
}
