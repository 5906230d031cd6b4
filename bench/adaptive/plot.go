package main

import (
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotTimeline writes delivered-over-time per strategy as a PNG.
func plotTimeline(path, title string, results []Result) error {
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = "seconds since the burst"
	pl.Y.Label.Text = "jobs delivered"
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
