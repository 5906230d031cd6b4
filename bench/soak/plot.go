package main

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// palette colours the lines of one panel in order.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// series is one line of a panel.
type series struct {
	name   string
	pts    plotter.XYs
	dashed bool
}

// panels are the plot's stacked panels over the same time axis: the rate
// per sample window, each worker's RSS against the target, the table's live
// rows and the rows purged, the tables' size on disk, and the machine's
// load, which tells a slower window on a shared machine from a decay.
func panels(samples []sample, workers int) [][]series {
	n := len(samples)
	rate, smooth := make(plotter.XYs, 0, n), make(plotter.XYs, 0, n)
	rows, purged, load := make(plotter.XYs, 0, n), make(plotter.XYs, 0, n), make(plotter.XYs, 0, n)
	msgBytes, idxBytes, allBytes := make(plotter.XYs, 0, n), make(plotter.XYs, 0, n), make(plotter.XYs, 0, n)
	rss := make([]plotter.XYs, workers)
	for i, x := range samples {
		t := x.T.Seconds()
		if x.Rate > 0 || x.Delivered > 0 {
			rate = append(rate, plotter.XY{X: t, Y: x.Rate})
		}
		if i >= smoothOver {
			a := samples[i-smoothOver]
			smooth = append(smooth, plotter.XY{X: t, Y: float64(x.Delivered-a.Delivered) / (x.T - a.T).Seconds()})
		}
		for i := range min(workers, len(x.RSS)) {
			rss[i] = append(rss[i], plotter.XY{X: t, Y: mib(x.RSS[i])})
		}
		rows = append(rows, plotter.XY{X: t, Y: float64(x.Tables.MessagesRows) / 1000})
		purged = append(purged, plotter.XY{X: t, Y: float64(x.Purged) / 1000})
		load = append(load, plotter.XY{X: t, Y: x.Load1})
		msgBytes = append(msgBytes, plotter.XY{X: t, Y: mib(x.Tables.MessagesBytes)})
		idxBytes = append(idxBytes, plotter.XY{X: t, Y: mib(x.Tables.MessagesIndexBytes)})
		allBytes = append(allBytes, plotter.XY{X: t, Y: mib(x.Tables.AllBytes)})
	}
	var rssLines []series
	for i, pts := range rss {
		rssLines = append(rssLines, series{name: fmt.Sprintf("worker %d VmRSS", i), pts: pts})
	}
	if n > 0 {
		first, last := samples[0].T.Seconds(), samples[n-1].T.Seconds()
		target := mib(TargetRSS)
		rssLines = append(rssLines, series{name: "target", dashed: true,
			pts: plotter.XYs{{X: first, Y: target}, {X: last, Y: target}}})
	}
	return [][]series{
		{{name: "mails/s, each sample", pts: rate}, {name: fmt.Sprintf("mails/s, over %d samples", smoothOver), pts: smooth}},
		rssLines,
		{{name: "postline_messages live rows", pts: rows}, {name: "rows purged", pts: purged}},
		{
			{name: "postline_messages total", pts: msgBytes},
			{name: "postline_messages indexes", pts: idxBytes},
			{name: "every table of the schema", pts: allBytes},
		},
		{{name: "1-minute load average (2 CPUs)", pts: load}},
	}
}

// smoothOver is how many samples the smoothed rate spans.
const smoothOver = 6

var panelLabels = []string{"mails/s (per sample)", "worker RSS (MiB)", "rows (thousands)", "size on disk (MiB)", "machine load"}

// writePlot draws the panels as one SVG, a panel above the other.
func writePlot(w io.Writer, title string, samples []sample, workers int) error {
	c := vgsvg.New(plotWidth, plotHeight)
	if err := drawPlot(draw.New(c), title, samples, workers); err != nil {
		return err
	}
	_, err := c.WriteTo(w)
	return err
}

const plotWidth, plotHeight = 8 * vg.Inch, 12 * vg.Inch

// drawPlot draws the panels on dc, a panel above the other.
func drawPlot(dc draw.Canvas, title string, samples []sample, workers int) error {
	ps := panels(samples, workers)
	plots := make([][]*plot.Plot, len(ps))
	for i, lines := range ps {
		p := plot.New()
		if i == 0 {
			p.Title.Text = title
		}
		if i == len(ps)-1 {
			p.X.Label.Text = "seconds since the first job was published"
		}
		p.Y.Label.Text = panelLabels[i]
		p.X.Min, p.Y.Min = 0, 0
		p.Legend.Top = false
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		for j, s := range lines {
			if len(s.pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(s.pts)
			if err != nil {
				return fmt.Errorf("plot %s: %w", s.name, err)
			}
			l.Color = palette[j%len(palette)]
			l.Width = vg.Points(1.2)
			if s.dashed {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				l.Color = color.Gray{Y: 0x60}
			}
			p.Add(l)
			p.Legend.Add(s.name, l)
		}
		plots[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(10)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	return nil
}
