package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/retry"
)

// Defaults of the global settings.
const (
	defaultBrokers     = "127.0.0.1:9092"
	defaultDatabaseURL = "postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable"
	defaultJobsTopic   = "mail.jobs"
	defaultDLQTopic    = "mail.dlq"
)

// envFlags are the global flags that an environment variable sets when the
// flag is not given.
var envFlags = []struct{ flag, env string }{
	{"brokers", "POSTLINE_KAFKA_BROKERS"},
	{"database-url", "POSTLINE_DATABASE_URL"},
	{"topic", "POSTLINE_JOBS_TOPIC"},
	{"dlq-topic", "POSTLINE_DLQ_TOPIC"},
	{"events-topic", "POSTLINE_EVENTS_TOPIC"},
	{"retry-topic-prefix", "POSTLINE_RETRY_TOPIC_PREFIX"},
	{"retry-tiers", "POSTLINE_RETRY_TIERS"},
	{"group", "POSTLINE_CONSUMER_GROUP"},
	{"scheduler-group", "POSTLINE_SCHEDULER_GROUP"},
	{"dkim-keys", "POSTLINE_DKIM_KEYS"}, // postctl dkim record
}

// globals are the settings every command shares.
type globals struct {
	brokers     string
	kafka       *kafkaclient.Cluster // built from --brokers and the POSTLINE_KAFKA_* settings
	databaseURL string
	topic       string
	dlqTopic    string
	eventsTopic string
	retryPrefix string
	retryTiers  string
	output      string

	stdin          io.Reader
	stdout, stderr io.Writer

	// started is set once the command line and settings are accepted and
	// the command begins its work: an error before that is a usage error.
	started bool
}

// brokerList splits --brokers on commas.
func (g *globals) brokerList() []string {
	var out []string
	for _, b := range strings.Split(g.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// print writes v as JSON with --output json, or text otherwise.
func (g *globals) print(v any, text string) error {
	if g.output == "json" {
		enc := json.NewEncoder(g.stdout)
		return enc.Encode(v)
	}
	_, err := fmt.Fprintln(g.stdout, text)
	return err
}

// run executes postctl with args (without the program name). Settings come
// from flags, then the environment through getenv, then defaults.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return execute(ctx, args, getenv, os.Stdin, stdout, stderr)
}

func execute(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "postctl",
		Short:         "Operate Postline: topics, migrations, publishing, dead letters, message status, lag, relays, audits, suppression lists, unconfirmed mail, reply rules, templates, DKIM records, webhook endpoints, finding mail and console accounts",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// The environment is read after parsing, not used as the flag
			// default, so help never prints a secret from it.
			for _, e := range envFlags {
				if cmd.Flags().Lookup(e.flag) == nil {
					continue // a command's own flag, and this is another command
				}
				if v := getenv(e.env); v != "" && !cmd.Flags().Changed(e.flag) {
					if err := cmd.Flags().Set(e.flag, v); err != nil {
						return fmt.Errorf("%s: %w", e.env, err)
					}
				}
			}
			if g.output != "text" && g.output != "json" {
				return fmt.Errorf("--output %q: want text or json", g.output)
			}
			if len(g.brokerList()) == 0 {
				return fmt.Errorf("--brokers is empty")
			}
			// TLS and SASL come from the same POSTLINE_KAFKA_* variables as
			// the worker's, so postctl reaches any cluster the worker does.
			var ks config.Kafka
			if err := config.Load(&ks, "postctl", nil, getenv, io.Discard); err != nil {
				return err
			}
			ks.Brokers = g.brokerList()
			cluster, err := ks.Cluster("postctl")
			if err != nil {
				return err
			}
			g.kafka = cluster
			g.started = true
			return nil
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&g.brokers, "brokers", defaultBrokers, "Kafka bootstrap brokers, comma-separated (env POSTLINE_KAFKA_BROKERS)")
	pf.StringVar(&g.databaseURL, "database-url", defaultDatabaseURL, "PostgreSQL URL (env POSTLINE_DATABASE_URL)")
	pf.StringVar(&g.topic, "topic", defaultJobsTopic, "jobs topic (env POSTLINE_JOBS_TOPIC)")
	pf.StringVar(&g.dlqTopic, "dlq-topic", defaultDLQTopic, "dead-letter topic (env POSTLINE_DLQ_TOPIC)")
	pf.StringVar(&g.eventsTopic, "events-topic", eventstream.DefaultTopic, "events topic (env POSTLINE_EVENTS_TOPIC)")
	pf.StringVar(&g.retryPrefix, "retry-topic-prefix", retry.DefaultPrefix, "delay topics are <prefix>.<tier> (env POSTLINE_RETRY_TOPIC_PREFIX)")
	pf.StringVar(&g.retryTiers, "retry-tiers", retry.DefaultTiers.String(), "delay tiers (env POSTLINE_RETRY_TIERS)")
	pf.StringVarP(&g.output, "output", "o", "text", "output format: text (aligned tables) or json (shapes in each command's help)")

	root.AddCommand(newTopicsCmd(g), newMigrateCmd(g), newPublishCmd(g), newDLQCmd(g),
		newStatusCmd(g), newLagCmd(g), newAuditCmd(g), newRelaysCmd(g), newProbeCmd(g))
	root.AddCommand(newSuppressCmd(g), newUnconfirmedCmd(g), newRulesCmd(g))
	root.AddCommand(newTemplateCmd(g), newDKIMCmd(g), newWebhooksCmd(g), newMailCmd(g), newOperatorsCmd(g))
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err != nil && !g.started {
		// Unknown commands and flags, bad arguments and bad settings all
		// fail before the command starts.
		return usageError{err}
	}
	return withStackHint(err, g.brokerList())
}
