package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotTimeline writes delivered-over-time per strategy as a PNG.
func plotTimeline(path, title string, results []Result) error {
	return plotLines(path, title, "seconds since the burst", results, nil)
}

// timelineLines are plotutil.AddLines's arguments for results: per
// strategy, its name and its delivered-over-time (every tenth job).
func timelineLines(results []Result) []any {
	var args []any
	for _, r := range results {
		pts := make(plotter.XYs, 0, len(r.Timeline)/10+2)
		pts = append(pts, plotter.XY{})
		for i, t := range r.Timeline {
			if i%10 == 9 || i == len(r.Timeline)-1 {
				pts = append(pts, plotter.XY{X: t.Seconds(), Y: float64(i + 1)})
			}
		}
		args = append(args, r.Strategy, pts)
	}
	return args
}

// plotScenario writes a real scenario's delivered-over-time per strategy
// as a PNG, beside the most any strategy could have delivered by then
// (the relays' capacity, bound; nil = none), which shows a rate schedule
// as a kink.
func plotScenario(path, title string, results []Result, bound [][2]float64) error {
	return plotLines(path, title, "seconds since publishing started", results, bound)
}

// plotLines writes delivered-over-time per strategy, and bound when it is
// not nil, as a PNG.
func plotLines(path, title, xLabel string, results []Result, bound [][2]float64) error {
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = xLabel
	pl.Y.Label.Text = "jobs delivered"
	args := timelineLines(results)
	if len(bound) > 0 {
		pts := make(plotter.XYs, len(bound))
		for i, p := range bound {
			pts[i] = plotter.XY{X: p[0], Y: p[1]}
		}
		args = append(args, "relay capacity (lower bound)", pts)
	}
	if err := plotutil.AddLines(pl, args...); err != nil {
		return fmt.Errorf("add lines: %w", err)
	}
	pl.Legend.Top = false
	pl.Legend.Left = false
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return pl.Save(8*vg.Inch, 5*vg.Inch, path)
}

// plotScenarios writes bin/adaptive-real-<scenario>.png (prefix + "-" +
// scenario + ".png") for every scenario in results.
func plotScenarios(prefix string, p RealParams, results []RealResult) error {
	for _, name := range allScenarios {
		var rs []Result
		var until time.Duration
		for _, r := range results {
			if r.Scenario == name {
				rs = append(rs, r.Result)
				until = max(until, r.Makespan)
			}
		}
		if len(rs) == 0 {
			continue
		}
		sc, err := p.scenario(name)
		if err != nil {
			return err
		}
		var curve [][2]float64
		if c, ok := sc.capacity(); ok {
			curve = boundCurve(c, lowerBound(c, sc.deliverable(), sc.tokenShare()), until)
		}
		path := prefix + "-" + name + ".png"
		if err := plotScenario(path, "Delivered over time, real scenario "+name, rs, curve); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
	}
	return nil
}
