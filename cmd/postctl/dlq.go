package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/schollz/progressbar/v3"
	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/reaper"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// dlqFlags are the filters shared by dlq ls and dlq replay.
type dlqFlags struct {
	reasons      []string
	since, until string
	limit        int
}

// dlqFilter selects dead letters.
type dlqFilter struct {
	reasons      []string  // empty: any reason
	since, until time.Time // zero: unbounded; since <= t < until
	limit        int       // 0: no limit
}

// filter parses the flags at now.
func (f dlqFlags) filter(now time.Time) (dlqFilter, error) {
	out := dlqFilter{limit: f.limit}
	if f.limit < 0 {
		return out, fmt.Errorf("--limit %d: must be 0 (no limit) or more", f.limit)
	}
	for _, r := range f.reasons {
		for _, r := range strings.Split(r, ",") {
			if r = strings.TrimSpace(r); r != "" && !slices.Contains(out.reasons, r) {
				out.reasons = append(out.reasons, r)
			}
		}
	}
	var err error
	if out.since, err = parseTimeArg(f.since, now); err != nil {
		return out, fmt.Errorf("--since %q: %w", f.since, err)
	}
	if out.until, err = parseTimeArg(f.until, now); err != nil {
		return out, fmt.Errorf("--until %q: %w", f.until, err)
	}
	if !out.since.IsZero() && !out.until.IsZero() && !out.since.Before(out.until) {
		return out, fmt.Errorf("--since %s is not before --until %s", jobheader.FormatTime(out.since), jobheader.FormatTime(out.until))
	}
	return out, nil
}

// parseTimeArg reads an RFC 3339 time, or a duration before now ("90m",
// "2h", "7d"); "" is the zero time.
func parseTimeArg(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	var (
		d   time.Duration
		err error
	)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil {
		return time.Time{}, errors.New("want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (90m, 2h, 7d)")
	}
	if d < 0 {
		return time.Time{}, errors.New("a duration ago must not be negative")
	}
	return now.Add(-d), nil
}

// match reports whether the dead letter l passes the reason and time
// filters (not the limit).
func (f dlqFilter) match(l deadLetter) bool {
	if len(f.reasons) > 0 && !slices.Contains(f.reasons, l.Reason) {
		return false
	}
	if !f.since.IsZero() && l.Time.Before(f.since) {
		return false
	}
	if !f.until.IsZero() && !l.Time.Before(f.until) {
		return false
	}
	return true
}

// deadLetter is one record of the dead-letter topic, as ls prints it.
type deadLetter struct {
	Time              time.Time `json:"time"`
	Partition         int       `json:"partition"`
	Offset            int64     `json:"offset"`
	MessageID         string    `json:"message_id"`
	Reason            string    `json:"reason"`
	Class             string    `json:"class"`
	Attempt           int       `json:"attempt"`
	Error             string    `json:"error"`
	OriginalTopic     string    `json:"original_topic"`
	OriginalPartition *int      `json:"original_partition"`
	OriginalOffset    *int64    `json:"original_offset"`
}

// parseDeadLetter reads the dead-letter headers of m. The time is the
// dead-letter time header, or the record timestamp when it is missing.
func parseDeadLetter(m kafka.Message) deadLetter {
	c := jobheader.Carrier(m.Headers)
	l := deadLetter{
		Time:          m.Time,
		Partition:     m.Partition,
		Offset:        m.Offset,
		MessageID:     string(m.Key),
		Reason:        c.Get(jobheader.KeyDLQReason),
		Class:         c.Get(jobheader.KeyDLQClass),
		Attempt:       jobheader.Attempt(m.Headers),
		Error:         c.Get(jobheader.KeyDLQError),
		OriginalTopic: c.Get(jobheader.KeyDLQOriginalTopic),
	}
	if t, err := time.Parse(time.RFC3339Nano, c.Get(jobheader.KeyDLQTime)); err == nil {
		l.Time = t
	}
	if p, err := strconv.Atoi(c.Get(jobheader.KeyDLQOriginalPartition)); err == nil {
		l.OriginalPartition = &p
	}
	if o, err := strconv.ParseInt(c.Get(jobheader.KeyDLQOriginalOffset), 10, 64); err == nil {
		l.OriginalOffset = &o
	}
	return l
}

// dlqHeaders are the headers a replay strips: the dead-letter headers and
// the delay-topic headers of the failed attempt.
var dlqHeaders = []string{
	jobheader.KeyDLQReason, jobheader.KeyDLQClass, jobheader.KeyDLQError, jobheader.KeyDLQOriginalTopic,
	jobheader.KeyDLQOriginalPartition, jobheader.KeyDLQOriginalOffset, jobheader.KeyDLQTime,
	jobheader.KeyNotBefore, jobheader.KeyLastClass, jobheader.KeyThrottles,
}

// replayMessage is the record a replay publishes for the dead letter m:
// the same key and value, the dead-letter headers stripped, attempt 1 and
// first-seen now; other headers (the trace context) are kept.
func replayMessage(m kafka.Message, now time.Time) kafka.Message {
	var headers []kafka.Header
	for _, h := range m.Headers {
		if !slices.Contains(dlqHeaders, h.Key) {
			headers = append(headers, h)
		}
	}
	headers = jobheader.Set(headers, jobheader.KeyAttempt, "1")
	headers = jobheader.Set(headers, jobheader.KeyFirstSeen, jobheader.FormatTime(now))
	return kafka.Message{Key: m.Key, Value: m.Value, Headers: headers}
}

// partitionRange is the part of a partition a scan reads: [start, end).
type partitionRange struct {
	id         int
	start, end int64
}

// dlqRanges returns the offsets of every partition of name now: a scan reads
// up to these end offsets and does not wait for newer records.
func dlqRanges(ctx context.Context, k *kafkaclient.Cluster, name string) ([]partitionRange, error) {
	infos, err := topic.Describe(ctx, k, name)
	if err != nil {
		return nil, err
	}
	var out []partitionRange
	for _, p := range infos[0].Partitions {
		if p.EndOffset > p.StartOffset {
			out = append(out, partitionRange{id: p.ID, start: p.StartOffset, end: p.EndOffset})
		}
	}
	return out, nil
}

// errStop ends a scan early without error.
var errStop = errors.New("stop scan")

// scanDLQ calls fn for every record of ranges, partition by partition in
// offset order. fn returning errStop ends the scan.
func scanDLQ(ctx context.Context, k *kafkaclient.Cluster, name string, ranges []partitionRange, fn func(kafka.Message) error) error {
	for _, pr := range ranges {
		if err := scanPartition(ctx, k, name, pr, fn); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

func scanPartition(ctx context.Context, k *kafkaclient.Cluster, name string, pr partitionRange, fn func(kafka.Message) error) (err error) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   k.Brokers(),
		Dialer:    k.Dialer("dlq"),
		Topic:     name,
		Partition: pr.id,
		MaxBytes:  16 << 20, // dead letters may be as large as jobs (4 MiB)
		// The records up to end exist, so fetches answer at once; a short
		// wait only bounds the read-ahead fetch that Close waits for.
		MaxWait: 10 * time.Millisecond,
	})
	defer func() {
		if cerr := r.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close reader of %s/%d: %w", name, pr.id, cerr)
		}
	}()
	if err := r.SetOffset(pr.start); err != nil {
		return fmt.Errorf("seek %s/%d to %d: %w", name, pr.id, pr.start, err)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return fmt.Errorf("read %s/%d: %w", name, pr.id, err)
		}
		if err := fn(m); err != nil {
			return err
		}
		if m.Offset >= pr.end-1 {
			return nil
		}
	}
}

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List and replay dead letters",
		Long: `List and replay the records of the dead-letter topic (--dlq-topic).

Both commands read every partition from its first retained offset to the end
offsets at the start of the command; they do not wait for new records.
Filters: --reason (repeatable, or comma-separated), --since and --until (RFC 3339
times, or durations ago such as 90m, 2h, 7d; since <= time < until, by the
dead-letter time), --limit (stop after N matches, partitions read in order).`,
	}
	cmd.AddCommand(newDLQLsCmd(g), newDLQReplayCmd(g))
	return cmd
}

func addDLQFilterFlags(cmd *cobra.Command, f *dlqFlags) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.reasons, "reason", nil, "only this dead-letter reason (repeatable, or comma-separated)")
	fl.StringVar(&f.since, "since", "", "only dead letters from this time on (RFC 3339, or a duration ago: 2h, 7d)")
	fl.StringVar(&f.until, "until", "", "only dead letters before this time (RFC 3339, or a duration ago)")
	fl.IntVar(&f.limit, "limit", 0, "stop after this many matching dead letters (0: no limit)")
}

func newDLQLsCmd(g *globals) *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List dead letters: a table, or JSON Lines with --output json",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter(time.Now())
			if err != nil {
				return usageError{err}
			}
			return dlqList(cmd.Context(), g, filter)
		},
	}
	addDLQFilterFlags(cmd, &f)
	return cmd
}

// dlqList prints the matching dead letters in scan order.
func dlqList(ctx context.Context, g *globals, filter dlqFilter) error {
	ranges, err := dlqRanges(ctx, g.kafka, g.dlqTopic)
	if err != nil {
		return err
	}
	var (
		enc = json.NewEncoder(g.stdout)
		tw  = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		n   int
	)
	if g.output != "json" {
		fmt.Fprintln(tw, "TIME\tPARTITION/OFFSET\tMESSAGE_ID\tREASON\tCLASS\tATTEMPT\tERROR")
	}
	err = scanDLQ(ctx, g.kafka, g.dlqTopic, ranges, func(m kafka.Message) error {
		l := parseDeadLetter(m)
		if !filter.match(l) {
			return nil
		}
		n++
		if g.output == "json" {
			if err := enc.Encode(l); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\t%d\t%s\n", l.Time.UTC().Format(time.RFC3339), l.Partition, l.Offset,
				oneLine(l.MessageID, 80), oneLine(l.Reason, 40), oneLine(l.Class, 20), l.Attempt, oneLine(l.Error, 60))
		}
		if filter.limit > 0 && n >= filter.limit {
			return errStop
		}
		return nil
	})
	if g.output != "json" {
		if ferr := tw.Flush(); err == nil {
			err = ferr
		}
		if err == nil {
			_, err = fmt.Fprintf(g.stderr, "%d %s in %s\n", n, plural(n, "dead letter", "dead letters"), g.dlqTopic)
		}
	}
	return err
}

// oneLine makes s fit a table cell: control characters become spaces, and
// it is cut to at most n runes with an ellipsis.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if s == "" {
		return "-"
	}
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// replayFlags are the flags of dlq replay besides the filters.
type replayFlags struct {
	dlqFlags
	dryRun, yes, progress bool
	batch                 int
}

// replaySummary is the result of dlq replay.
type replaySummary struct {
	Matched              int  `json:"matched"`
	Replayed             int  `json:"replayed"`
	SkippedInvalid       int  `json:"skipped_invalid"`
	SkippedNotReplayable int  `json:"skipped_not_replayable"`
	Unsuppressed         int  `json:"unsuppressed"`
	DryRun               bool `json:"dry_run,omitempty"`
}

func newDLQReplayCmd(g *globals) *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Publish matching dead letters to the jobs topic again, attempts reset",
		Long: `Publish the matching dead letters to the jobs topic (--topic) again.

Each record keeps its key, value and trace context; the dead-letter headers are
removed, postline-attempt is reset to 1 and postline-first-seen to now. Before
publishing, the Message-ID's row in PostgreSQL (--database-url) is reset to
pending when it is failed or dead (or missing); a row in any other state (for
example sent, or pending after an earlier replay) is left alone and its record
is skipped, so replaying twice delivers once. A reset row's recipients are sent
to afresh, and the suppression entries its failure added (a relay refused an
address for good) are lifted; entries of any other origin stay. Records that are
not valid jobs are skipped: replaying them would only dead-letter them again.

Without --yes the matches are counted first and you are asked to confirm.
--dry-run reports what matches without touching PostgreSQL or Kafka.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter(time.Now())
			if err != nil {
				return usageError{err}
			}
			if f.batch < 1 {
				return usagef("--batch %d: must be at least 1", f.batch)
			}
			return dlqReplay(cmd.Context(), g, filter, f)
		},
	}
	addDLQFilterFlags(cmd, &f.dlqFlags)
	fl := cmd.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "count what would be replayed; change nothing")
	fl.BoolVar(&f.yes, "yes", false, "replay without asking for confirmation")
	fl.IntVar(&f.batch, "batch", 500, "dead letters per database round trip and write")
	fl.BoolVar(&f.progress, "progress", isTerminal(g.stderr), "show a progress bar on stderr (default: when stderr is a terminal)")
	return cmd
}

// replayStore is the part of the idempotency store a replay uses.
type replayStore interface {
	ResetForReplay(ctx context.Context, resets []idempotency.Reset) ([]string, error)
}

// replayLists is the part of the suppression lists a replay uses.
type replayLists interface {
	LiftFromMessages(ctx context.Context, messageIDs []string, source string) (int, error)
}

// rawPublisher writes records to the jobs topic as they are.
type rawPublisher interface {
	PublishRaw(ctx context.Context, msgs []kafka.Message) error
}

var (
	_ replayStore  = (*idempotency.Store)(nil)
	_ replayLists  = (*suppression.Store)(nil)
	_ rawPublisher = (*kafkaclient.TopicWriter)(nil)
)

func dlqReplay(ctx context.Context, g *globals, filter dlqFilter, f replayFlags) error {
	ranges, err := dlqRanges(ctx, g.kafka, g.dlqTopic)
	if err != nil {
		return err
	}
	total, proceed, err := confirmReplay(ctx, g, ranges, filter, f)
	if err != nil || !proceed {
		return err
	}
	r := &replayer{g: g, dryRun: f.dryRun, now: time.Now()}
	if !f.dryRun {
		closeAll, err := r.open(ctx)
		if err != nil {
			return err
		}
		defer closeAll()
	}
	r.bar = newProgressBar(g, f.progress, total, "replaying", "records")
	err = r.scan(ctx, ranges, filter, f.batch)
	if r.bar != nil {
		if err != nil {
			_ = r.bar.Exit()
		} else {
			_ = r.bar.Finish()
		}
	}
	if err != nil {
		if r.sum.Replayed > 0 {
			return fmt.Errorf("replayed %d, then: %w", r.sum.Replayed, err)
		}
		return err
	}
	s := r.sum
	s.DryRun = f.dryRun
	verb := "replayed to " + g.topic
	if f.dryRun {
		verb = "would replay (dry run: rows not checked)"
	}
	text := fmt.Sprintf("matched: %d\n%s: %d\nskipped (not a valid job): %d\nskipped (row not failed/dead): %d\n"+
		"suppressions lifted (added by the replayed failures): %d",
		s.Matched, verb, s.Replayed, s.SkippedInvalid, s.SkippedNotReplayable, s.Unsuppressed)
	return g.print(s, text)
}

// confirmReplay asks the operator to confirm the replay of the dead
// letters filter selects, unless --yes or --dry-run, and returns how many
// there are (-1: not counted) and whether to go on. With none to replay it
// says so and does not go on.
func confirmReplay(ctx context.Context, g *globals, ranges []partitionRange, filter dlqFilter, f replayFlags) (int64, bool, error) {
	if f.yes || f.dryRun {
		return -1, true, nil
	}
	n, err := countMatches(ctx, g.kafka, g.dlqTopic, ranges, filter)
	if err != nil {
		return 0, false, err
	}
	if n == 0 {
		return 0, false, g.print(replaySummary{}, "no dead letters match: nothing to replay")
	}
	if !confirm(g, fmt.Sprintf("replay %d %s from %s to %s? [y/N] ", n, plural(n, "dead letter", "dead letters"), g.dlqTopic, g.topic)) {
		return 0, false, errors.New("replay not confirmed (use --yes to skip the question)")
	}
	return int64(n), true, nil
}

// open connects the replayer to the store, the jobs topic and the
// suppression lists, and returns what closes them.
func (r *replayer) open(ctx context.Context) (func(), error) {
	pool, err := openPool(ctx, r.g)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	store, err := idempotency.New(idempotency.Config{Owner: fmt.Sprintf("postctl-%s-%d", host, os.Getpid())}, pool, nil, nil)
	if err != nil {
		pool.Close()
		return nil, err
	}
	pub, err := r.g.kafka.TopicWriter(kafkaclient.WriterConfig{Topic: r.g.topic, Name: "publisher", Limits: map[string]int{r.g.topic: topic.MaxMessageBytes}})
	if err != nil {
		pool.Close()
		return nil, err
	}
	lists, err := suppression.New(suppression.Config{}, pool, nil, nil)
	if err != nil {
		pub.Close()
		pool.Close()
		return nil, err
	}
	r.store, r.pub, r.lists = store, pub, lists
	return func() { pub.Close(); pool.Close() }, nil
}

// scan replays the dead letters of ranges that filter selects, in batches
// of batchSize, up to the filter's limit.
func (r *replayer) scan(ctx context.Context, ranges []partitionRange, filter dlqFilter, batchSize int) error {
	var batch []kafka.Message
	err := scanDLQ(ctx, r.g.kafka, r.g.dlqTopic, ranges, func(m kafka.Message) error {
		if !filter.match(parseDeadLetter(m)) {
			return nil
		}
		r.sum.Matched++
		batch = append(batch, m)
		if len(batch) == batchSize {
			if err := r.replay(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
		if filter.limit > 0 && r.sum.Matched >= filter.limit {
			return errStop
		}
		return nil
	})
	if err == nil {
		err = r.replay(ctx, batch)
	}
	return err
}

// countMatches counts the dead letters of ranges that filter selects.
func countMatches(ctx context.Context, brokers *kafkaclient.Cluster, name string, ranges []partitionRange, filter dlqFilter) (int, error) {
	n := 0
	err := scanDLQ(ctx, brokers, name, ranges, func(m kafka.Message) error {
		if filter.match(parseDeadLetter(m)) {
			n++
			if filter.limit > 0 && n >= filter.limit {
				return errStop
			}
		}
		return nil
	})
	return n, err
}

// confirm asks question on stderr and reads the answer from stdin.
func confirm(g *globals, question string) bool {
	fmt.Fprint(g.stderr, question)
	line, _ := bufio.NewReader(g.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// replayer replays batches of dead letters and counts what it did.
type replayer struct {
	g      *globals
	store  replayStore
	lists  replayLists // nil: suppressions are left alone
	pub    rawPublisher
	bar    *progressbar.ProgressBar
	dryRun bool
	now    time.Time
	seen   map[string]bool // Message-IDs replayed by this run
	sum    replaySummary
}

// replay resets the rows of batch and then publishes the records whose row
// was reset. A Message-ID seen earlier in this run is skipped like a row
// that is no longer failed or dead (it is pending now).
func (r *replayer) replay(ctx context.Context, batch []kafka.Message) error {
	if len(batch) == 0 {
		return nil
	}
	if r.seen == nil {
		r.seen = make(map[string]bool)
	}
	var (
		resets []idempotency.Reset
		msgs   []kafka.Message
		ids    []string
	)
	for _, m := range batch {
		j, err := job.Decode(m.Value, job.Limits{})
		if err != nil {
			r.sum.SkippedInvalid++
			fmt.Fprintf(r.g.stderr, "skip %s/%d/%d (key %q): not a valid job: %v\n", r.g.dlqTopic, m.Partition, m.Offset, oneLine(string(m.Key), 80), err)
			continue
		}
		if r.seen[j.MessageID] {
			r.sum.SkippedNotReplayable++
			continue
		}
		r.seen[j.MessageID] = true
		resets = append(resets, idempotency.Reset{MessageID: j.MessageID, PayloadHash: j.Hash(), Payload: m.Value})
		msgs = append(msgs, replayMessage(m, r.now))
		ids = append(ids, j.MessageID)
	}
	if r.dryRun || len(resets) == 0 {
		if r.dryRun {
			r.sum.Replayed += len(resets)
		}
		r.progress(len(batch))
		return nil
	}
	reset, err := r.store.ResetForReplay(ctx, resets)
	if err != nil {
		return err
	}
	ok := make(map[string]bool, len(reset))
	for _, id := range reset {
		ok[id] = true
	}
	var publish []kafka.Message
	var published []string
	for i, m := range msgs {
		if ok[ids[i]] {
			publish = append(publish, m)
			published = append(published, ids[i])
		} else {
			r.sum.SkippedNotReplayable++
		}
	}
	if r.lists != nil && len(published) > 0 {
		// Replaying says the failure was wrong (a relay misconfigured, a
		// mailbox since created): the addresses it put on the suppression
		// lists come off, or the replay would be suppressed. Entries of any
		// other origin (complaints, reports, operators) stay.
		n, err := r.lists.LiftFromMessages(ctx, published, suppression.SourceRelayRefusal)
		if err != nil {
			return err
		}
		r.sum.Unsuppressed += n
	}
	if err := r.pub.PublishRaw(ctx, publish); err != nil {
		// The rows are pending with nothing on the way; the workers'
		// reaper publishes their stored records again once the replay
		// grace has passed. Name them for the operator all the same.
		return fmt.Errorf("the rows of %s were reset to pending but their records were not published; "+
			"the workers' reaper publishes them again after %s (postctl status shows them): %w",
			strings.Join(published, " "), reaper.DefaultReplayGrace, err)
	}
	r.sum.Replayed += len(publish)
	r.progress(len(batch))
	return nil
}

func (r *replayer) progress(n int) {
	if r.bar != nil {
		_ = r.bar.Add(n)
	}
}
