package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/redrive"
)

// redriveFlags are the flags of dlq redrive besides the filters.
type redriveFlags struct {
	dlqFlags
	rate                  float64
	note                  string
	dryRun, yes, progress bool
}

func newDLQRedriveCmd(g *globals) *cobra.Command {
	var f redriveFlags
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Re-drive matching dead letters at a bounded rate: a dry run, a confirmation, a redriven event with your note",
		Long: `Send the matching dead letters again, at most --rate a second.

First the matches are counted and each job's row in PostgreSQL (--database-url)
is read: a re-drive takes only jobs whose row is failed or dead (or missing).
--dry-run prints these counts and changes nothing; without --yes you are shown
them and asked to confirm.

Then, as dlq replay does, each job's row is reset to pending (a row sent or
pending since is skipped: re-driving twice sends once), the suppression entries
its failure added are lifted, and the record is published to the jobs topic
(--topic) with its dead-letter headers removed and its attempt reset to 1.
Before each record, a redriven event per recipient goes to the events topic
(--events-topic) with the reason and class it was dead-lettered for, --note and
who ran it ($USER).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter(time.Now())
			if err != nil {
				return err
			}
			opts := redrive.Options{Rate: f.rate, Note: f.note, Actor: operator()}
			if err := opts.Validate(flagName); err != nil {
				return usageError{err}
			}
			return dlqRedrive(cmd.Context(), g, filter, opts, f)
		},
	}
	addDLQFilterFlags(cmd, &f.dlqFlags)
	fl := cmd.Flags()
	fl.Float64Var(&f.rate, "rate", redrive.DefaultRate, fmt.Sprintf("dead letters a second, at most (up to %g)", redrive.MaxRate))
	fl.StringVar(&f.note, "note", "", "why: on every redriven event (one line)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "count what would be re-driven, reading the rows; change nothing")
	fl.BoolVar(&f.yes, "yes", false, "re-drive without asking for confirmation")
	fl.BoolVar(&f.progress, "progress", isTerminal(g.stderr), "show a progress bar on stderr (default: when stderr is a terminal)")
	return cmd
}

func dlqRedrive(ctx context.Context, g *globals, filter redrive.Filter, opts redrive.Options, f redriveFlags) error {
	if f.dryRun {
		store, closeStore, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer closeStore()
		r, err := redrive.New(redrive.Config{Source: dlqSource(g), Store: store})
		if err != nil {
			return err
		}
		plan, err := r.Plan(ctx, filter)
		if err != nil {
			return err
		}
		return printRedrive(g, plan)
	}
	deps, err := openRedriveDeps(ctx, g, true)
	if err != nil {
		return err
	}
	defer deps.close()
	r, err := redrive.New(redrive.Config{Source: dlqSource(g), Store: deps.store, Lists: deps.lists, Publisher: deps.pub, Events: deps.events})
	if err != nil {
		return err
	}
	plan, err := r.Plan(ctx, filter)
	if err != nil {
		return err
	}
	if plan.Redriven == 0 {
		plan.DryRun = false
		fmt.Fprintf(g.stderr, "nothing to re-drive: %d %s match, none with a failed or dead row\n", plan.Matched, plural(plan.Matched, "dead letter", "dead letters"))
		return printRedrive(g, plan)
	}
	question := fmt.Sprintf("re-drive %d of %d matching dead letters from %s to %s at %g a second (about %s)? [y/N] ",
		plan.Redriven, plan.Matched, g.dlqTopic, g.topic, opts.Rate, formatAge(time.Duration(float64(plan.Redriven)/opts.Rate*float64(time.Second))))
	if !f.yes && !confirm(g, question) {
		return errors.New("re-drive not confirmed (use --yes to skip the question)")
	}
	bar := newProgressBar(g, f.progress, int64(plan.Matched), "re-driving", "records")
	opts.Progress, opts.Invalid = progressTo(bar), reportInvalid(g)
	s, err := r.Run(ctx, filter, opts)
	finishBar(bar, err)
	if err != nil {
		if s.Redriven > 0 {
			return fmt.Errorf("re-drove %d, then: %w", s.Redriven, err)
		}
		return err
	}
	return printRedrive(g, s)
}

func printRedrive(g *globals, s redrive.Summary) error {
	verb := "re-driven to " + g.topic
	if s.DryRun {
		verb = "would re-drive (dry run)"
	}
	text := fmt.Sprintf("matched: %d\n%s: %d\nskipped (row not failed/dead): %d\nskipped (not a valid job): %d",
		s.Matched, verb, s.Redriven, s.SkippedNotReplayable, s.SkippedInvalid)
	if !s.DryRun {
		text += fmt.Sprintf("\nsuppressions lifted (added by the re-driven failures): %d\nredriven events to %s: %d",
			s.Unsuppressed, g.eventsTopic, s.Events)
	}
	return g.print(s, text)
}

// progressTo moves bar to a run's matched count; nil for no bar.
func progressTo(bar *progressbar.ProgressBar) func(redrive.Summary) {
	if bar == nil {
		return nil
	}
	return func(s redrive.Summary) { _ = bar.Set(s.Matched) }
}

func finishBar(bar *progressbar.ProgressBar, err error) {
	if bar == nil {
		return
	}
	if err != nil {
		_ = bar.Exit()
	} else {
		_ = bar.Finish()
	}
}

// reportInvalid names on stderr each selected record that is not a job.
func reportInvalid(g *globals) func(redrive.DeadLetter, error) {
	return func(l redrive.DeadLetter, err error) {
		fmt.Fprintf(g.stderr, "skip %s/%d/%d (key %q): not a valid job: %v\n", g.dlqTopic, l.Partition, l.Offset, oneLine(l.MessageID, 80), err)
	}
}
