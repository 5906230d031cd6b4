package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/templatestore"
)

// changeRecord is one label change in JSON output.
type changeRecord struct {
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
	Label    string    `json:"label"`
	From     *int      `json:"from"` // null: the label was not set
	To       *int      `json:"to"`   // null: the label was removed
	Percent  int       `json:"percent,omitempty"`
	By       string    `json:"by"`
	Reason   string    `json:"reason"`
}

func newChangeRecords(cs []templatestore.Change) []changeRecord {
	out := make([]changeRecord, len(cs))
	orNull := func(v int) *int {
		if v == 0 {
			return nil
		}
		return &v
	}
	for i, c := range cs {
		out[i] = changeRecord{Revision: c.Revision, At: c.ChangedAt.UTC(), Label: c.Label, From: orNull(c.From),
			To: orNull(c.Version), Percent: c.Percent, By: c.ChangedBy, Reason: c.Reason}
	}
	return out
}

// reasonFlag checks --reason for a label change.
func reasonFlag(reason string) error {
	if err := templatestore.ValidateReason(reason); err != nil {
		return usagef("--reason: %w", err)
	}
	return nil
}

func newTemplateActivateCmd(g *globals) *cobra.Command {
	var (
		keepFallback bool
		reason       string
	)
	cmd := &cobra.Command{
		Use:   "activate NAME VERSION",
		Short: "Point the active label of a template at a version; the one active before becomes the fallback",
		Long: `Point the active label at VERSION: the version mail uses (but for a canary's
share). The version active before becomes the fallback, the last known good
one that mail is rendered with when VERSION fails and that rollback returns
to; both labels move in one transaction. --keep-fallback leaves the fallback
where it is. Activating the version already active changes nothing.

--output json prints {"name", "label", "version", "updated_at", "updated_by",
"changes": [{"revision", "at", "label", "from", "to", "by", "reason"}]}: the
changes made, the fallback's first.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := labelMoveArgs(args, reason)
			if err != nil {
				return err
			}
			return templateActivate(cmd.Context(), g, args[0], n, keepFallback, reason)
		},
	}
	cmd.Flags().BoolVar(&keepFallback, "keep-fallback", false, "leave the fallback label where it is")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the template's history")
	return cmd
}

func templateActivate(ctx context.Context, g *globals, name string, version int, keepFallback bool, reason string) error {
	return onTemplates(ctx, g, func(s *templatestore.Store) error {
		a, err := s.Activate(ctx, name, version, keepFallback, operator(), reason)
		if err != nil {
			return withMigrateHint(err)
		}
		text := fmt.Sprintf("%s: active is version %d", name, version)
		switch fb, ok := a.FallbackMoved(); {
		case len(a.Changes) == 0:
			text += " already; nothing changed"
		case ok:
			text += fmt.Sprintf("; fallback is version %d, the one active before", fb.Version)
		}
		out := struct {
			Name string `json:"name"`
			labelRecord
			Changes []changeRecord `json:"changes"`
		}{name, newLabelRecords([]templatestore.Label{a.Active})[0], newChangeRecords(a.Changes)}
		return g.print(out, text)
	})
}

func newTemplateFallbackCmd(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "fallback NAME VERSION",
		Short: "Point the fallback label of a template at a version",
		Long: `Point the fallback label at VERSION: the version mail is rendered with when the
one it would use (active, canary or requested) fails to render, and the one
rollback returns to. Activating a version sets it too, to the version active
before; this sets it by hand, to a version known to be good.

--output json prints {"name", "label", "version", "updated_at", "updated_by"}.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := labelMoveArgs(args, reason)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			return onTemplates(ctx, g, func(s *templatestore.Store) error {
				l, err := s.SetFallback(ctx, args[0], n, operator(), reason)
				if err != nil {
					return withMigrateHint(err)
				}
				return printLabel(g, l, fmt.Sprintf("%s: fallback is version %d", args[0], n))
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the template's history")
	return cmd
}

func newTemplateHistoryCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "history NAME",
		Short: "List every move of a template's labels: when, which label, from and to which version, by whom and why",
		Long: `List the label changes of a template, oldest first: every move of active,
canary and fallback, with the version the label pointed at before ("-": not
set) and after ("-": removed), who made it (postctl:$USER for postctl, or
what the writer recorded) and why (--reason, or what moved a fallback along
with an activation).

--output json prints {"name", "changes": [{"revision", "at", "label", "from", "to",
"percent"? (canary), "by", "reason"}]}; from and to are null when not set.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return onNamedTemplate(ctx, g, args[0], func(s *templatestore.Store) error {
				hist, err := s.History(ctx, args[0])
				if err != nil {
					return withMigrateHint(err)
				}
				out := struct {
					Name    string         `json:"name"`
					Changes []changeRecord `json:"changes"`
				}{args[0], newChangeRecords(hist)}
				return printReport(g, out, func() error {
					if len(hist) == 0 {
						_, err := fmt.Fprintf(g.stdout, "%s: no label has moved\n", args[0])
						return err
					}
					rows := make([][]string, len(hist))
					for i, c := range hist {
						to := versionCell(c.Version)
						if c.Label == templatestore.LabelCanary && c.Percent != 0 {
							to += " (" + strconv.Itoa(c.Percent) + "%)"
						}
						rows[i] = []string{formatTime(c.ChangedAt), c.Label, versionCell(c.From), to, cmp0(c.ChangedBy, "-"),
							cmp0(strings.TrimSpace(c.Reason), "-")}
					}
					return writeTable(g.stdout, []string{"AT", "LABEL", "FROM", "TO", "BY", "REASON"}, rows)
				})
			})
		},
	}
}

// labelMoveArgs checks the NAME VERSION arguments and the --reason of a
// command that moves a label, and returns the version.
func labelMoveArgs(args []string, reason string) (int, error) {
	if err := templatestore.ValidateName(args[0]); err != nil {
		return 0, usageError{err}
	}
	n, err := parseVersionArg(args[1])
	if err != nil {
		return 0, err
	}
	return n, reasonFlag(reason)
}
