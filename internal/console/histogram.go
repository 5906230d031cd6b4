package console

import (
	"net/url"
	"strconv"
	"time"

	"github.com/postline/postline/internal/fleet"
)

// barSteps is how many widths a histogram bar takes (each a class of the
// style sheet: the CSP allows no inline style).
const barSteps = 20

// histogramTable is a dead-letter histogram as the queues page lays it
// out: a column per reason, a row per bucket with its bar.
type histogramTable struct {
	Since, Until time.Time
	Bucket       string
	Total        int
	Reasons      []reasonColumn // most first
	Rows         []histogramRow // in time order, empty buckets too
}

// reasonColumn is one reason's column: its total, and the dead letters
// page listing its dead letters of the window ("" for dead letters without
// a reason, which that page cannot select).
type reasonColumn struct {
	Reason string
	Count  int
	Link   string
}

// histogramRow is one bucket: its counts in the columns' order, and the
// class of its bar, as wide as its total against the fullest bucket's.
type histogramRow struct {
	Start, End time.Time
	Total      int
	Counts     []int
	Bar        string
}

// newHistogramTable lays h out; bucket is the size as the form gave it.
func newHistogramTable(h fleet.Histogram, bucket string) histogramTable {
	t := histogramTable{Since: h.Since, Until: h.Until, Bucket: bucket, Total: h.Total}
	for _, rc := range h.Reasons {
		c := reasonColumn{Reason: rc.Reason, Count: rc.Count}
		if rc.Reason != "" {
			c.Link = "/deadletters?" + url.Values{"list": {"1"}, "reason": {rc.Reason},
				"since": {absolute(h.Since)}, "until": {absolute(h.Until)}}.Encode()
		}
		t.Reasons = append(t.Reasons, c)
	}
	fullest := 0
	for _, b := range h.Buckets {
		fullest = max(fullest, b.Total)
	}
	for _, b := range h.Buckets {
		row := histogramRow{Start: b.Start, End: b.End, Total: b.Total, Bar: barClass(b.Total, fullest)}
		for _, c := range t.Reasons {
			row.Counts = append(row.Counts, b.ByReason[c.Reason])
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// barClass is the class of a bar for n of fullest: w0 to w20 in steps of
// 5%; any dead letter at all shows at least one step.
func barClass(n, fullest int) string {
	step := 0
	if fullest > 0 {
		step = (n*barSteps + fullest/2) / fullest
	}
	if n > 0 && step == 0 {
		step = 1
	}
	return "bar w" + strconv.Itoa(step)
}
