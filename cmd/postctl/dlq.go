package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/topic"
)

// dlqFlags are the filters shared by dlq ls, replay and redrive.
type dlqFlags struct {
	reasons, tenants, classes []string
	messageIDs                []string
	since, until              string
	limit                     int
}

// filter parses the flags at now; errors name the flag.
func (f dlqFlags) filter(now time.Time) (redrive.Filter, error) {
	spec := redrive.FilterSpec{Since: f.since, Until: f.until, Tenants: f.tenants, Reasons: f.reasons, Classes: f.classes, MessageIDs: f.messageIDs, Limit: f.limit}
	filter, err := spec.Parse(now, flagName)
	if err != nil {
		return filter, usageError{err}
	}
	return filter, nil
}

// flagName names a redrive field as its flag.
func flagName(field string) string { return "--" + field }

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, count, replay and re-drive dead letters",
		Long: `List, count, replay and re-drive the records of the dead-letter topic (--dlq-topic).

Every command reads every partition to the end offsets at the start of the
command (it does not wait for new records), from the first retained offset
(stats: from a few minutes before --since). ls, replay and redrive filter with
--reason, --class and --tenant (repeatable, or comma-separated; the
tenant is the job's), --message-id (the record key), --since and --until (RFC 3339 times, or durations ago
such as 90m, 2h, 7d; since <= time < until, by the dead-letter time), --limit
(stop after N matches, partitions read in order).`,
	}
	cmd.AddCommand(newDLQLsCmd(g), newDLQStatsCmd(g), newDLQReplayCmd(g), newDLQRedriveCmd(g))
	return cmd
}

func addDLQFilterFlags(cmd *cobra.Command, f *dlqFlags) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.reasons, "reason", nil, "only this dead-letter reason (repeatable, or comma-separated)")
	fl.StringArrayVar(&f.classes, "class", nil, "only this dead-letter class: invalid, permanent, expired, ... (repeatable, or comma-separated)")
	fl.StringArrayVar(&f.tenants, "tenant", nil, "only jobs of this tenant (repeatable, or comma-separated)")
	fl.StringArrayVar(&f.messageIDs, "message-id", nil, "only dead letters of this Message-ID, the record key (repeatable, or comma-separated)")
	fl.StringVar(&f.since, "since", "", "only dead letters from this time on (RFC 3339, or a duration ago: 2h, 7d)")
	fl.StringVar(&f.until, "until", "", "only dead letters before this time (RFC 3339, or a duration ago)")
	fl.IntVar(&f.limit, "limit", 0, "stop after this many matching dead letters (0: no limit)")
}

// dlqSource is the dead-letter topic of --dlq-topic.
func dlqSource(g *globals) redrive.TopicSource {
	return redrive.TopicSource{Kafka: g.kafka, Topic: g.dlqTopic}
}

func newDLQLsCmd(g *globals) *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List dead letters: a table, or JSON Lines with --output json",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter(time.Now())
			if err != nil {
				return err
			}
			return dlqList(cmd.Context(), g, filter)
		},
	}
	addDLQFilterFlags(cmd, &f)
	return cmd
}

// dlqList prints the matching dead letters in scan order.
func dlqList(ctx context.Context, g *globals, filter redrive.Filter) error {
	r, err := redrive.New(redrive.Config{Source: dlqSource(g)})
	if err != nil {
		return err
	}
	var (
		enc = json.NewEncoder(g.stdout)
		tw  = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		n   int
	)
	if g.output != "json" {
		fmt.Fprintln(tw, "TIME\tPARTITION/OFFSET\tMESSAGE_ID\tTENANT\tREASON\tCLASS\tATTEMPT\tERROR")
	}
	err = r.List(ctx, filter, func(l redrive.DeadLetter) error {
		n++
		if g.output == "json" {
			return enc.Encode(l)
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\t%s\t%d\t%s\n", l.Time.UTC().Format(time.RFC3339), l.Partition, l.Offset,
			oneLine(l.MessageID, 80), oneLine(l.Tenant, 30), oneLine(l.Reason, 40), oneLine(l.Class, 20), l.Attempt, oneLine(l.Error, 60))
		return nil
	})
	if g.output != "json" {
		if ferr := tw.Flush(); err == nil {
			err = ferr
		}
		if err == nil {
			_, err = fmt.Fprintf(g.stderr, "%d %s in %s\n", n, plural(n, "dead letter", "dead letters"), g.dlqTopic)
		}
	}
	return err
}

// oneLine makes s fit a table cell: control characters become spaces, and
// it is cut to at most n runes with an ellipsis.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if s == "" {
		return "-"
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// confirm asks question on stderr and reads the answer from stdin.
func confirm(g *globals, question string) bool {
	fmt.Fprint(g.stderr, question)
	line, _ := bufio.NewReader(g.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// redriveDeps are the connections a replay or re-drive writes through.
type redriveDeps struct {
	store  *idempotency.Store
	lists  *suppression.Store
	pub    *kafkaclient.TopicWriter
	events *eventstream.Writer // nil unless asked for
	close  func()
}

// openStore connects to --database-url and returns the message rows.
func openStore(ctx context.Context, g *globals) (*idempotency.Store, func(), error) {
	return openOnPool(ctx, g, func(pool *pgxpool.Pool) (*idempotency.Store, error) {
		return idempotency.New(idempotency.Config{Owner: storeOwner()}, pool, nil, nil)
	})
}

// storeOwner names this process as the rows' lease owner would be named.
func storeOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("postctl-%s-%d", host, os.Getpid())
}

// openRedriveDeps connects to the rows, the suppression lists, the jobs
// topic and, with events, the events topic.
func openRedriveDeps(ctx context.Context, g *globals, events bool) (redriveDeps, error) {
	var d redriveDeps
	pool, err := openPool(ctx, g)
	if err != nil {
		return d, err
	}
	closers := []func(){pool.Close}
	d.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (redriveDeps, error) {
		d.close()
		return redriveDeps{}, err
	}
	if d.store, err = idempotency.New(idempotency.Config{Owner: storeOwner()}, pool, nil, nil); err != nil {
		return fail(err)
	}
	if d.lists, err = suppression.New(suppression.Config{}, pool, nil, nil); err != nil {
		return fail(err)
	}
	if d.pub, err = g.kafka.TopicWriter(kafkaclient.WriterConfig{Topic: g.topic, Name: "publisher", Limits: map[string]int{g.topic: topic.MaxMessageBytes}}); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { d.pub.Close() })
	if events {
		if d.events, err = eventstream.New(eventstream.Config{Kafka: g.kafka, Topic: g.eventsTopic}, nil); err != nil {
			return fail(err)
		}
		closers = append(closers, func() { d.events.Close() })
	}
	return d, nil
}
