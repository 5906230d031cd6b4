package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

func TestPanels(t *testing.T) {
	_, samples := soakOf(1000, 120, func(d int64, _ time.Duration) int64 { return d }, 50<<20)
	ps := panels(samples, 2)
	if len(ps) != len(panelLabels) {
		t.Fatalf("%d panels, %d labels", len(ps), len(panelLabels))
	}
	if n, m := len(ps[0][0].pts), len(ps[0][1].pts); n != len(samples) || m != len(samples)-smoothOver || ps[0][1].pts[0].Y != 1000 {
		t.Fatalf("rate panel has %d and %d points, want %d and %d at 1,000/s", n, m, len(samples), len(samples)-smoothOver)
	}
	rss := ps[1]
	if len(rss) != 3 || !rss[2].dashed || rss[2].pts[0].Y != 100 || rss[0].pts[0].Y != 50 {
		t.Fatalf("RSS panel: %+v; want two workers at 50 MiB and the dashed 100 MiB target", rss)
	}
	if got := ps[2][0].pts[len(samples)-1].Y; got != 120 {
		t.Fatalf("rows panel ends at %.1f thousand, want 120", got)
	}
}

// TestWritePlot checks the plot is one well-formed SVG document carrying
// the title and every legend.
func TestWritePlot(t *testing.T) {
	_, samples := soakOf(1000, 60, func(d int64, _ time.Duration) int64 { return d }, 50<<20)
	var b bytes.Buffer
	if err := writePlot(&b, "Soak test title", samples, 2); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	d := xml.NewDecoder(strings.NewReader(svg))
	var root string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	for _, want := range []string{"Soak test title", "mails/s", "worker 0 VmRSS", "worker 1 VmRSS", "target",
		"postline_messages live rows", "rows purged", "postline_messages indexes", "every table of the schema", "load average"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestPlotWithoutSamples(t *testing.T) {
	var b bytes.Buffer
	if err := writePlot(&b, "empty", nil, 2); err != nil {
		t.Fatalf("writePlot of no samples: %v", err)
	}
}
