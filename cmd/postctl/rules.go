package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/failure"
)

// rulesCheck is the output of postctl rules --check.
type rulesCheck struct {
	File  string `json:"file"`
	OK    bool   `json:"ok"`
	Rules int    `json:"rules"`
}

func newRulesCmd(g *globals) *cobra.Command {
	var check string
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Print the built-in SMTP reply classification rules, or check a rules file",
		Long: `Print the built-in SMTP reply classification rules file: one ordered list
whose first matching row decides both what a failed send does next and what a
bounce report with the same reply means for the recipient (hard, soft or policy
bounce, and whether to suppress the address). The workers and the bounce
receiver use it unless POSTLINE_RULES_FILE names a file of their own, which
replaces it whole: start from this output.

  postctl rules > rules.yaml

The file is printed as YAML whatever --output says.

--check FILE loads FILE as the workers would and prints "ok: N rules", or
fails (exit 1) with every problem found, each naming its row.
--output json prints {"file", "ok": true, "rules": N} on success.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("check") {
				if check == "" {
					return usagef("--check: give the rules file's path")
				}
				return checkRules(g, check)
			}
			_, err := g.stdout.Write(failure.DefaultRulesYAML())
			return err
		},
	}
	cmd.Flags().StringVar(&check, "check", "", "validate this rules file instead of printing the built-in one")
	return cmd
}

func checkRules(g *globals, path string) error {
	set, err := failure.LoadRules(path)
	if err != nil {
		return err // names the file and each bad row
	}
	n := len(set.Rules())
	return g.print(rulesCheck{File: path, OK: true, Rules: n}, fmt.Sprintf("ok: %d %s", n, plural(n, "rule", "rules")))
}
