package main

// The sizes variant: the postline worker, smtp-source -d and the Postfix
// relay again at each body size of -sizes (issue 32), every row into the
// same sink, and one table of the three side by side per size. The size
// equal to -body-bytes reuses the postline, smtp-source-d and postfix rows
// of the run when those variants ran. Mails above 10 KiB are fewer (-jobs
// scaled down by the size) so that a row carries about as many bytes as a
// 10 KiB one and the run stays within minutes.

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchjobs"
	"github.com/postline/postline/job"
)

const (
	variantSizes = "sizes"
	// sizesFullJobsBytes is the largest body size that runs -jobs mails;
	// larger bodies run -jobs * sizesFullJobsBytes / size.
	sizesFullJobsBytes = 10240
	// sizesMinJobs keeps a large-body row long enough to measure.
	sizesMinJobs = 1000
	// The targets of issue 32: the share of smtp-source -d at and above
	// sizesRawFromBytes, the relay ratio at and below sizesRelayUpToBytes
	// (the headline's), the worker's own CPU per mail at and above
	// sizesCPUFromBytes.
	sizesRawMinShare    = 0.9
	sizesRawFromBytes   = 10240
	sizesRelayUpToBytes = 1024
	sizesMaxCPU         = 400 * time.Microsecond
	sizesCPUFromBytes   = 102400
)

// sizesCompared are the variants the sizes variant runs at each size.
var sizesCompared = []string{variantPostline, variantSourceD, variantPostfix}

// parseSizes reads -sizes: body sizes in bytes, comma-separated, each at
// least 1 and none twice.
func parseSizes(s string) ([]int, error) {
	var sizes []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-sizes: %q is not a size in bytes of at least 1", f)
		}
		if slices.Contains(sizes, n) {
			return nil, fmt.Errorf("-sizes: %d is named twice", n)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// sizeLabel names a size for rows and tables: 10k for 10,240 bytes.
func sizeLabel(size int) string {
	if size%1024 == 0 {
		return fmt.Sprintf("%dk", size/1024)
	}
	return fmt.Sprintf("%db", size)
}

// sizeRowName is variant v's row at size: the plain row at -body-bytes.
func sizeRowName(v string, size, bodyBytes int) string {
	if size == bodyBytes {
		return v
	}
	return v + "-" + sizeLabel(size)
}

// isSizeRow says whether row name is one the sizes variant added at a
// size other than -body-bytes; the main tables leave those out.
func isSizeRow(name string, sizes []int, bodyBytes int) bool {
	for _, s := range sizes {
		if s == bodyBytes {
			continue
		}
		for _, v := range sizesCompared {
			if name == sizeRowName(v, s, bodyBytes) {
				return true
			}
		}
	}
	return false
}

// sizeJobs is how many mails a row at size sends.
func sizeJobs(jobs, size int) int {
	if size <= sizesFullJobsBytes {
		return jobs
	}
	return min(jobs, max(sizesMinJobs, jobs*sizesFullJobsBytes/size))
}

// runSizes runs the sizes variant as run r: each variant of sizesCompared
// at each size, but at -body-bytes only those this run does not run anyway.
// Each size's logs go to a directory of their own, as the row's log names
// are the plain rows'.
func runSizes(ctx context.Context, o options, r int, host, port string, stderr io.Writer) ([]result, error) {
	var rs []result
	for _, size := range o.sizes {
		so := o
		so.bodyBytes, so.jobs = size, sizeJobs(o.jobs, size)
		so.logDir = filepath.Join(o.logDir, "size-"+sizeLabel(size))
		if err := os.MkdirAll(so.logDir, 0o755); err != nil {
			return rs, err
		}
		for _, v := range sizesCompared {
			if size == o.bodyBytes && slices.Contains(o.variants, v) {
				continue
			}
			name := sizeRowName(v, size, o.bodyBytes)
			var (
				res result
				err error
			)
			switch v {
			case variantPostline:
				spec := plainSpec(so, name, so.workerBin, so.jobs, r, host, port)
				spec.makeJobs = sizedJobs
				res, err = runWorker(ctx, so, spec, stderr)
			case variantSourceD:
				res, err = runSource(ctx, so, true, r, stderr)
			case variantPostfix:
				res, err = runPostfix(ctx, so, r, stderr)
			}
			if err != nil {
				return rs, fmt.Errorf("%s: %w", name, err)
			}
			res.Variant = name
			rs = append(rs, res)
		}
	}
	return rs, nil
}

// sizedText and sizedHTML are the sizes rows' bodies: prose of uneven
// lines, and the same as HTML, as newsletters and receipts carry them.
const (
	sizedText = "Hello Ada,\n\nYour order #48213 has shipped and should arrive on Tuesday.\n" +
		"Track it at https://shop.example.com/orders/48213 or reply to this mail.\n\n" +
		"  2 x Notebook, squared, A5        12.90 EUR\n  1 x Fountain pen, blue ink        24.50 EUR\n\n" +
		"Thank you for shopping with us. If anything is wrong with your parcel, our team answers within a day.\n\n"
	sizedHTML = "<p>Hello Ada,</p>\n<p>Your order <b>#48213</b> has shipped and should arrive on Tuesday.</p>\n" +
		"<table><tr><td>2 x Notebook, squared, A5</td><td align=\"right\">12.90&nbsp;EUR</td></tr>\n" +
		"<tr><td>1 x Fountain pen, blue ink</td><td align=\"right\">24.50&nbsp;EUR</td></tr></table>\n" +
		"<p><a href=\"https://shop.example.com/orders/48213\">Track your parcel</a> &mdash; thank you!</p>\n"
)

// sizedJobs are n plain jobs of bodyBytes in all: half text, half HTML.
func sizedJobs(n, bodyBytes int) []job.Job {
	jobs := benchjobs.Plain(n, benchjobs.Body(bodyBytes/2, sizedText))
	html := benchjobs.Body(bodyBytes-bodyBytes/2, sizedHTML)
	for i := range jobs {
		jobs[i].HTML = html
	}
	return jobs
}

// sizeRow is one line of the sizes table: the three rows at one size.
type sizeRow struct {
	size                       int
	postline, relay, raw       result
	havePost, haveRel, haveRaw bool
}

// sizeRows collects the summarized rows of each size.
func sizeRows(rows []result, sizes []int, bodyBytes int) []sizeRow {
	out := make([]sizeRow, 0, len(sizes))
	for _, s := range sizes {
		r := sizeRow{size: s}
		r.postline, r.havePost = findRow(rows, sizeRowName(variantPostline, s, bodyBytes))
		r.relay, r.haveRel = findRow(rows, sizeRowName(variantPostfix, s, bodyBytes))
		r.raw, r.haveRaw = findRow(rows, sizeRowName(variantSourceD, s, bodyBytes))
		out = append(out, r)
	}
	return out
}

// workerCPUPerMail is the worker's own CPU per mail over the delivery
// window (ready to last sent) when sampled: a short row's start-up and
// migrations would otherwise dominate it; else start to SIGTERM.
func (r sizeRow) workerCPUPerMail() (time.Duration, bool) {
	switch {
	case !r.havePost || r.postline.Mails == 0:
		return 0, false
	case r.postline.Stack.Measured && r.postline.Stack.Own > 0:
		return r.postline.Stack.Own / time.Duration(r.postline.Mails), true
	case r.postline.CPU > 0:
		return r.postline.CPUPerMail(), true
	}
	return 0, false
}

// rates are Postline's rate over the relay's and over smtp-source -d's,
// NaN where a row is missing.
func (r sizeRow) rates() (vsRelay, vsRaw float64) {
	vsRelay, vsRaw = math.NaN(), math.NaN()
	if r.havePost && r.haveRel {
		vsRelay = ratio(r.postline.Rate(), r.relay.Rate())
	}
	if r.havePost && r.haveRaw {
		vsRaw = ratio(r.postline.Rate(), r.raw.Rate())
	}
	return vsRelay, vsRaw
}

// sizesTable writes the sizes table.
func sizesTable(w io.Writer, rows []sizeRow) {
	fmt.Fprintln(w, "| body | mails | Postline mails/s | Postfix relay mails/s | smtp-source -d mails/s | Postline / Postfix | Postline / smtp-source -d | worker own CPU per mail |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	rate := func(r result, ok bool) string {
		if !ok || r.Rate() == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.0f", r.Rate())
	}
	for _, r := range rows {
		vsRelay, vsRaw := r.rates()
		cpu := "n/a"
		if c, ok := r.workerCPUPerMail(); ok {
			cpu = fmt.Sprintf("%.3f ms", float64(c)/float64(time.Millisecond))
		}
		mails := "n/a"
		if r.havePost {
			mails = strconv.Itoa(r.postline.Mails)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", sizeLabel(r.size), mails,
			rate(r.postline, r.havePost), rate(r.relay, r.haveRel), rate(r.raw, r.haveRaw),
			formatRatio(vsRelay), formatShare(vsRaw), cpu)
	}
}

// sizesTargets judges each size by issue 32's targets that apply to it.
func sizesTargets(rows []sizeRow) []target {
	var ts []target
	for _, r := range rows {
		vsRelay, vsRaw := r.rates()
		l := sizeLabel(r.size)
		if r.size <= sizesRelayUpToBytes {
			t := target{Name: fmt.Sprintf("%s: postline vs postfix relay, mails/s", l), Measured: "n/a", Goal: fmt.Sprintf("≥ %.0fx", relayMinRatio)}
			if finite(vsRelay) {
				t.Known, t.Pass = true, vsRelay >= relayMinRatio
				t.Measured = fmt.Sprintf("%s (%.0f vs %.0f mails/s)", formatRatio(vsRelay), r.postline.Rate(), r.relay.Rate())
			}
			ts = append(ts, t)
		}
		if r.size >= sizesRawFromBytes {
			t := target{Name: fmt.Sprintf("%s: postline share of smtp-source-d, mails/s", l), Measured: "n/a", Goal: fmt.Sprintf("≥ %.0f%%", 100*sizesRawMinShare)}
			if finite(vsRaw) {
				t.Known, t.Pass = true, vsRaw >= sizesRawMinShare
				t.Measured = fmt.Sprintf("%s (%.0f vs %.0f mails/s)", formatShare(vsRaw), r.postline.Rate(), r.raw.Rate())
			}
			ts = append(ts, t)
		}
		if r.size >= sizesCPUFromBytes {
			t := target{Name: fmt.Sprintf("%s: postline worker own CPU per mail", l), Measured: "n/a",
				Goal: fmt.Sprintf("≤ %.1f ms", float64(sizesMaxCPU)/float64(time.Millisecond))}
			if c, ok := r.workerCPUPerMail(); ok {
				t.Known, t.Pass = true, c <= sizesMaxCPU
				t.Measured = fmt.Sprintf("%.3f ms", float64(c)/float64(time.Millisecond))
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// sizesReport writes the sizes section when the variant ran.
func sizesReport(w io.Writer, o options, rows []result) {
	if !slices.Contains(o.variants, variantSizes) {
		return
	}
	sr := sizeRows(rows, o.sizes, o.bodyBytes)
	fmt.Fprintf(w, "### By body size (issue 32)\n\n")
	targetTable(w, sizesTargets(sr))
	fmt.Fprintf(w, "\n")
	sizesTable(w, sr)
	fmt.Fprintf(w, "\n- sizes: postline, smtp-source-d and postfix again at each size of -sizes (at -body-bytes the main table's rows when they ran, whose jobs are text only); elsewhere Postline's jobs are half text, half HTML (uneven lines); smtp-source -l sends its own body of the size. Up to %s every size sends %d mails, above it %d x %d / size (at least %d); own CPU per mail is the worker's over the delivery window (ready to last sent; start to SIGTERM when not sampled).\n\n",
		sizeLabel(sizesFullJobsBytes), o.jobs, o.jobs, sizesFullJobsBytes, sizesMinJobs)
}
