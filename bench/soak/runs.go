package main

import (
	"fmt"
	"io"

	"github.com/postline/postline/bench/internal/benchstats"
)

// runsMarkdown writes the report of several soaks of the same settings:
// every run's windows and ratio, whether its other targets were met (its
// own soak.md has them), and the median ratio, which the rate target is
// judged on. One run's last window against its first is noisy on a
// shared machine: a pass of the purge or of autovacuum landing in one of
// two windows of some 20 s moves the ratio by a tenth, so a single run
// says little about a target a tenth below 1.
func runsMarkdown(w io.Writer, command string, runs []summary) {
	fmt.Fprintf(w, "Command: `%s`\n\n", command)
	if len(runs) == 0 {
		fmt.Fprintln(w, "No run finished.")
		return
	}
	fmt.Fprintf(w, "Machine: %s. %d runs of the same settings, one after another, each on fresh topics, group and schema, after one warm-up.\n\n",
		runs[0].Machine, len(runs))
	fmt.Fprintln(w, "| run | first window, mails/s | last window, mails/s | ratio | rate verdict | worker RSS, most, MiB | other targets (the run's soak.md) |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|:---:|---:|:---:|")
	ratios := make([]float64, len(runs))
	othersOK := true
	for i, s := range runs {
		ratios[i] = s.Ratio
		othersOK = othersOK && s.othersOK()
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %.3f× | %s | %s | %s |\n",
			i+1, s.FirstRate, s.LastRate, s.Ratio, benchstats.Verdict(s.rateOK()), mibList(s.MaxRSS), benchstats.Verdict(s.othersOK()))
	}
	others := "met in every run"
	if !othersOK {
		others = "missed in a run (FAIL above)"
	}
	m := benchstats.Median(ratios)
	fmt.Fprintf(w, "\nMedian ratio of the last window's rate to the first's over %d runs: %.3f× (target ≥ %.2f×): %s. The other targets: %s.\n",
		len(runs), m, TargetRateRatio, benchstats.Verdict(m >= TargetRateRatio), others)
}
