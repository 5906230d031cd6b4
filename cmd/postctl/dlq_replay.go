package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/redrive"
)

// replayFlags are the flags of dlq replay besides the filters.
type replayFlags struct {
	dlqFlags
	dryRun, yes, progress bool
	batch                 int
}

// replaySummary is the result of dlq replay.
type replaySummary struct {
	Matched              int  `json:"matched"`
	Replayed             int  `json:"replayed"`
	SkippedInvalid       int  `json:"skipped_invalid"`
	SkippedNotReplayable int  `json:"skipped_not_replayable"`
	Unsuppressed         int  `json:"unsuppressed"`
	DryRun               bool `json:"dry_run,omitempty"`
}

func newReplaySummary(s redrive.Summary) replaySummary {
	return replaySummary{Matched: s.Matched, Replayed: s.Redriven, SkippedInvalid: s.SkippedInvalid,
		SkippedNotReplayable: s.SkippedNotReplayable, Unsuppressed: s.Unsuppressed, DryRun: s.DryRun}
}

func newDLQReplayCmd(g *globals) *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Publish matching dead letters to the jobs topic again, attempts reset",
		Long: `Publish the matching dead letters to the jobs topic (--topic) again.

Each record keeps its key, value and trace context; the dead-letter headers are
removed, postline-attempt is reset to 1 and postline-first-seen to now. Before
publishing, the Message-ID's row in PostgreSQL (--database-url) is reset to
pending when it is failed or dead (or missing); a row in any other state (for
example sent, or pending after an earlier replay) is left alone and its record
is skipped, so replaying twice delivers once. A reset row's recipients are sent
to afresh, and the suppression entries its failure added (a relay refused an
address for good) are lifted; entries of any other origin stay. Records that are
not valid jobs are skipped: replaying them would only dead-letter them again.

Without --yes the matches are counted first and you are asked to confirm.
--dry-run reports what matches without touching PostgreSQL or Kafka.
Replay publishes as fast as it can (up to 10,000 a second) and writes no
events: dlq redrive is the same path at a rate you choose, with a dry run that
checks the rows and a redriven event carrying your note.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter(time.Now())
			if err != nil {
				return err
			}
			if f.batch < 1 {
				return usagef("--batch %d: must be at least 1", f.batch)
			}
			return dlqReplay(cmd.Context(), g, filter, f)
		},
	}
	addDLQFilterFlags(cmd, &f.dlqFlags)
	fl := cmd.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "count what would be replayed; change nothing")
	fl.BoolVar(&f.yes, "yes", false, "replay without asking for confirmation")
	fl.IntVar(&f.batch, "batch", 500, "dead letters per database round trip and write")
	fl.BoolVar(&f.progress, "progress", isTerminal(g.stderr), "show a progress bar on stderr (default: when stderr is a terminal)")
	return cmd
}

// dlqReplay is a re-drive at redrive.MaxRate without events: what replay
// always did, on the one code path.
func dlqReplay(ctx context.Context, g *globals, filter redrive.Filter, f replayFlags) error {
	cfg := redrive.Config{Source: dlqSource(g), Batch: f.batch}
	if f.dryRun {
		// Rows not checked: a dry replay touches neither PostgreSQL nor
		// Kafka beyond reading the dead letters.
		r, err := redrive.New(cfg)
		if err != nil {
			return err
		}
		s, err := r.Plan(ctx, filter)
		if err != nil {
			return err
		}
		return printReplay(g, newReplaySummary(s))
	}
	r, err := redrive.New(cfg)
	if err != nil {
		return err
	}
	total := int64(-1)
	if !f.yes {
		n, err := r.Count(ctx, filter)
		if err != nil {
			return err
		}
		if n == 0 {
			return g.print(replaySummary{}, "no dead letters match: nothing to replay")
		}
		if !confirm(g, fmt.Sprintf("replay %d %s from %s to %s? [y/N] ", n, plural(n, "dead letter", "dead letters"), g.dlqTopic, g.topic)) {
			return errors.New("replay not confirmed (use --yes to skip the question)")
		}
		total = int64(n)
	}
	deps, err := openRedriveDeps(ctx, g, false)
	if err != nil {
		return err
	}
	defer deps.close()
	cfg.Store, cfg.Lists, cfg.Publisher = deps.store, deps.lists, deps.pub
	if r, err = redrive.New(cfg); err != nil {
		return err
	}
	bar := newProgressBar(g, f.progress, total, "replaying", "records")
	s, err := r.Run(ctx, filter, redrive.Options{Rate: redrive.MaxRate, Progress: progressTo(bar), Invalid: reportInvalid(g)})
	finishBar(bar, err)
	if err != nil {
		if s.Redriven > 0 {
			return fmt.Errorf("replayed %d, then: %w", s.Redriven, err)
		}
		return err
	}
	return printReplay(g, newReplaySummary(s))
}

func printReplay(g *globals, s replaySummary) error {
	verb := "replayed to " + g.topic
	if s.DryRun {
		verb = "would replay (dry run: rows not checked)"
	}
	text := fmt.Sprintf("matched: %d\n%s: %d\nskipped (not a valid job): %d\nskipped (row not failed/dead): %d\n"+
		"suppressions lifted (added by the replayed failures): %d",
		s.Matched, verb, s.Replayed, s.SkippedInvalid, s.SkippedNotReplayable, s.Unsuppressed)
	return g.print(s, text)
}
