package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/postline/postline/job"
)

// publishFlags are the flags of the publish command.
type publishFlags struct {
	from, subject, text, html, priority, messageID, domain string
	to, cc, bcc                                            []string
	file                                                   string
	count, bodyBytes, batch                                int
	progress                                               bool
}

// singleJobFlags are the flags that describe one job from the command line.
var singleJobFlags = []string{"from", "to", "cc", "bcc", "subject", "text", "html", "message-id"}

// publishSummary is the result of a publish command.
type publishSummary struct {
	Published  int      `json:"published"`
	Seconds    float64  `json:"seconds"`
	PerSecond  float64  `json:"per_second"`
	MessageIDs []string `json:"message_ids,omitempty"`
}

func newPublishCmd(g *globals) *cobra.Command {
	var f publishFlags
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Publish jobs: one from flags, a JSON Lines file, or --count synthetic jobs",
		Long: `Publish jobs to the jobs topic.

One job from flags:   postctl publish --from a@example.com --to b@example.test --subject Hi --text Hello
A JSON Lines file:    postctl publish --file jobs.jsonl   (one job per line, "-" for stdin;
                      version and message_id may be left out, the publisher fills them in)
Synthetic load:       postctl publish --count 10000 --body-bytes 2048

Jobs are validated before anything is written; a batch with an invalid job is not written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return publish(cmd, g, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "sender address")
	fl.StringArrayVar(&f.to, "to", nil, "recipient address (repeatable)")
	fl.StringArrayVar(&f.cc, "cc", nil, "carbon-copy address (repeatable)")
	fl.StringArrayVar(&f.bcc, "bcc", nil, "blind-copy address (repeatable)")
	fl.StringVar(&f.subject, "subject", "", "subject")
	fl.StringVar(&f.text, "text", "", "plain-text body")
	fl.StringVar(&f.html, "html", "", "HTML body")
	fl.StringVar(&f.priority, "priority", "", "urgent, normal or bulk (default normal)")
	fl.StringVar(&f.messageID, "message-id", "", "message ID (default: generated)")
	fl.StringVar(&f.domain, "message-id-domain", job.DefaultMessageIDDomain, "domain of generated message IDs")
	fl.StringVar(&f.file, "file", "", `JSON Lines file of jobs, "-" for stdin`)
	fl.IntVar(&f.count, "count", 0, "publish this many synthetic jobs")
	fl.IntVar(&f.bodyBytes, "body-bytes", 0, "pad synthetic text bodies to this many bytes")
	fl.IntVar(&f.batch, "batch", 500, "jobs per write")
	fl.BoolVar(&f.progress, "progress", isTerminal(g.stderr), "show a progress bar on stderr (default: when stderr is a terminal)")
	return cmd
}

func publish(cmd *cobra.Command, g *globals, f *publishFlags) error {
	if err := f.check(cmd.Flags()); err != nil {
		return err
	}
	pub, err := job.NewPublisher(g.kafka.Config(), job.PublisherConfig{
		Topic:           g.topic,
		MessageIDDomain: f.domain,
	})
	if err != nil {
		return err
	}
	defer pub.Close()

	src, total, closeSource, err := f.source(g)
	if err != nil {
		return err
	}
	defer closeSource()
	bar := f.progressBar(g, total)

	start := time.Now()
	published, ids, err := publishAll(cmd.Context(), pub, src, f.batch, bar)
	elapsed := time.Since(start)
	switch {
	case bar == nil:
	case err != nil:
		_ = bar.Exit() // keep the count reached, do not fill the bar
	default:
		_ = bar.Finish()
	}
	if err != nil {
		if published > 0 {
			return fmt.Errorf("published %d jobs, then: %w", published, err)
		}
		return err
	}

	s := publishSummary{Published: published, Seconds: elapsed.Seconds()}
	if s.Seconds > 0 {
		s.PerSecond = float64(published) / s.Seconds
	}
	text := fmt.Sprintf("published %d %s to %s in %s (%.0f jobs/s)", published, plural(published, "job", "jobs"), g.topic, elapsed.Round(time.Millisecond), s.PerSecond)
	if f.count == 0 && f.file == "" {
		s.MessageIDs = ids
		text += "\nmessage_id: " + strings.Join(ids, " ")
	}
	return g.print(s, text)
}

// changedFlags tells which flags the command line set (a command's
// pflag.FlagSet).
type changedFlags interface{ Changed(name string) bool }

// check rejects flags that contradict each other or miss what they need:
// one job (the single-job flags), a file (--file) or synthetic jobs
// (--count).
func (f *publishFlags) check(fl changedFlags) error {
	var single []string
	for _, name := range singleJobFlags {
		if fl.Changed(name) {
			single = append(single, "--"+name)
		}
	}
	bodyLimit := job.Limits{}.WithDefaults().MaxBodyBytes
	switch {
	case f.batch < 1:
		return usagef("--batch %d: must be at least 1", f.batch)
	case f.count < 0 || fl.Changed("count") && f.count == 0:
		return usagef("--count %d: must be at least 1", f.count)
	case f.bodyBytes < 0 || f.bodyBytes > bodyLimit:
		return usagef("--body-bytes %d: want 0 to %d (the body limit)", f.bodyBytes, bodyLimit)
	case fl.Changed("body-bytes") && f.count == 0:
		return usagef("--body-bytes only applies to --count")
	case f.count > 0 && f.file != "":
		return usagef("--count and --file are mutually exclusive")
	case f.count > 0 && len(single) > 0:
		return usagef("--count publishes synthetic jobs: it cannot be combined with %s", strings.Join(single, ", "))
	}
	return f.checkSingle(fl, single)
}

// checkSingle is check's part about --file and the single job.
func (f *publishFlags) checkSingle(fl changedFlags, single []string) error {
	switch {
	case f.file != "" && len(single) > 0:
		return usagef("--file reads jobs from the file: it cannot be combined with %s", strings.Join(single, ", "))
	case f.file != "" && fl.Changed("priority"):
		return usagef("--file reads jobs from the file: set priority in each line, not with --priority")
	case f.count == 0 && f.file == "" && f.from == "":
		return usagef("--from is required to publish one job (or use --file or --count)")
	case f.count == 0 && f.file == "" && len(f.to)+len(f.cc)+len(f.bcc) == 0:
		return usagef("--to (or --cc or --bcc) is required to publish one job")
	}
	return nil
}

// source returns the jobs the flags ask for, how many there are (-1:
// unknown until the file is read) and what closes the file.
func (f *publishFlags) source(g *globals) (source, int64, func(), error) {
	switch {
	case f.count > 0:
		return synthetic(f.count, f.bodyBytes, job.Priority(f.priority)), int64(f.count), func() {}, nil
	case f.file != "":
		r, closeFile, err := openInput(f.file, g.stdin)
		if err != nil {
			return nil, 0, nil, err
		}
		return jsonLines(r, f.file), -1, closeFile, nil
	default:
		return one(job.Job{
			MessageID: f.messageID,
			From:      f.from,
			To:        f.to,
			Cc:        f.cc,
			Bcc:       f.bcc,
			Subject:   f.subject,
			Text:      f.text,
			HTML:      f.html,
			Priority:  job.Priority(f.priority),
		}), 1, func() {}, nil
	}
}

// progressBar is the bar on stderr that --progress asks for, or nil.
func (f *publishFlags) progressBar(g *globals, total int64) *progressbar.ProgressBar {
	return newProgressBar(g, f.progress, total, "publishing", "jobs")
}

// newProgressBar is a bar on stderr counting items up to total (-1:
// unknown), or nil when progress is off or the output is JSON.
func newProgressBar(g *globals, progress bool, total int64, description, items string) *progressbar.ProgressBar {
	if !progress || g.output == "json" {
		return nil
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(g.stderr),
		progressbar.OptionSetDescription(description),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(items),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetSpinnerChangeInterval(0), // no render goroutine
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(g.stderr) }),
	)
}

// source yields jobs one at a time. next returns io.EOF at the end; label
// names the job in errors ("line 7").
type source func() (j job.Job, label string, err error)

// publishAll publishes the jobs of src in batches of batch and returns how
// many were written, and their IDs when there is a single job.
func publishAll(ctx context.Context, pub *job.Publisher, src source, batch int, bar *progressbar.ProgressBar) (int, []string, error) {
	published := 0
	var lastIDs []string
	jobs := make([]job.Job, 0, batch)
	labels := make([]string, 0, batch)
	flush := func() error {
		if len(jobs) == 0 {
			return nil
		}
		ids, err := pub.Publish(ctx, jobs...)
		if err != nil {
			var pe *job.PublishError
			if errors.As(err, &pe) {
				return fmt.Errorf("%s: %w", labels[pe.Index], pe.Err)
			}
			return err
		}
		published += len(ids)
		lastIDs = ids
		if bar != nil {
			_ = bar.Add(len(ids))
		}
		jobs, labels = jobs[:0], labels[:0]
		return nil
	}
	for {
		j, label, err := src()
		if err == io.EOF {
			break
		}
		if err != nil {
			return published, nil, err
		}
		jobs, labels = append(jobs, j), append(labels, label)
		if len(jobs) == batch {
			if err := flush(); err != nil {
				return published, nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return published, nil, err
	}
	if published != 1 {
		lastIDs = nil
	}
	return published, lastIDs, nil
}

// one yields j once.
func one(j job.Job) source {
	done := false
	return func() (job.Job, string, error) {
		if done {
			return job.Job{}, "", io.EOF
		}
		done = true
		return j, "job", nil
	}
}

// synthetic yields n jobs from postline@example.com to user<i>@example.test
// with text bodies padded to bodyBytes.
func synthetic(n, bodyBytes int, priority job.Priority) source {
	i := 0
	return func() (job.Job, string, error) {
		if i == n {
			return job.Job{}, "", io.EOF
		}
		i++
		num := strconv.Itoa(i)
		text := "Synthetic job " + num + " published by postctl.\n"
		if pad := bodyBytes - len(text); pad > 0 {
			text += strings.Repeat("x", pad)
		}
		return job.Job{
			From:     "postline@example.com",
			To:       []string{"user" + num + "@example.test"},
			Subject:  "Postline synthetic " + num,
			Text:     text,
			Priority: priority,
		}, "synthetic job " + num, nil
	}
}

// jsonLines yields one job per non-blank line of r. Unknown keys are errors;
// version and message_id may be left out.
func jsonLines(r io.Reader, name string) source {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 2*job.Limits{}.WithDefaults().MaxMessageBytes)
	line := 0
	return func() (job.Job, string, error) {
		for sc.Scan() {
			line++
			data := bytes.TrimSpace(sc.Bytes())
			if len(data) == 0 {
				continue
			}
			label := fmt.Sprintf("%s: line %d", name, line)
			dec := json.NewDecoder(bytes.NewReader(data))
			// Template data keeps its numbers exact (a 20-digit order
			// number), as job.Decode reads them.
			dec.UseNumber()
			dec.DisallowUnknownFields()
			var j job.Job
			if err := dec.Decode(&j); err != nil {
				return job.Job{}, "", fmt.Errorf("%s: %w", label, err)
			}
			if dec.More() {
				return job.Job{}, "", fmt.Errorf("%s: more than one JSON value on the line", label)
			}
			return j, label, nil
		}
		if err := sc.Err(); err != nil {
			return job.Job{}, "", fmt.Errorf("%s: after line %d: %w", name, line, err)
		}
		return job.Job{}, "", io.EOF
	}
}

// openInput opens name, or returns stdin for "-".
func openInput(name string, stdin io.Reader) (io.Reader, func(), error) {
	if name == "-" {
		return stdin, func() {}, nil
	}
	fh, err := os.Open(name)
	if err != nil {
		return nil, nil, fmt.Errorf("--file: %w", err)
	}
	return fh, func() { _ = fh.Close() }, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
