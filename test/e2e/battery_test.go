package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// wantSent is the expected fate of a battery kind that is a valid job
// after all: it must arrive at the relay exactly once and never be
// dead-lettered.
const wantSent = "sent"

// valueMode is how a battery record's value is given to kcat.
type valueMode int

const (
	// valueFile: the value is a file, produced as one message (kcat -P
	// with a file argument). kcat skips empty files, hence the other
	// modes.
	valueFile valueMode = iota
	// valueEmpty: a zero-length value, produced from stdin as "key<TAB>"
	// with -K '\t'.
	valueEmpty
	// valueNull: a null value (a tombstone), the same with -Z.
	valueNull
)

// batteryKind is one kind of bad (or surprising but valid) record.
type batteryKind struct {
	name string
	// key is the record key; nullKey leaves it out (kcat without -k).
	key     []byte
	nullKey bool
	value   []byte
	mode    valueMode
	// headers are kcat -H arguments: "name=value", or "name" for a header
	// with a null value.
	headers []string
	// kafkaGo produces the record with kafka-go instead of kcat, with
	// rawHeaders: for what kcat cannot express (a NUL in a key or header,
	// an empty header key). These kinds are extras on top of the kcat
	// kinds the battery counts.
	kafkaGo    bool
	rawHeaders []kafka.Header
	// want is the expected postline-dlq-reason, or wantSent.
	want string
	// sentID is the Message-ID the value names, if any: the mail that must
	// arrive exactly once when want is wantSent, and must not arrive
	// otherwise.
	sentID string
}

// batteryRecord is one record the battery produced, in production order
// per partition.
type batteryRecord struct {
	partition int
	kind      int // index into the kinds, or -1 for a follower
	follower  string
	key       []byte
	value     []byte
	offset    int64
}

// TestBadInputBattery publishes many kinds of bad record (bad values, keys
// and headers) with kcat, a client other than Postline's own publisher,
// each followed on the same partition by a valid job. Every valid job must
// be delivered, every bad record dead-lettered with its reason (matched to
// the kind by the original partition and offset headers of its dead
// letter), every kind that is valid after all sent exactly once, and the
// one worker must stay alive throughout and exit 0 on SIGTERM: no kind
// stops a partition, crashes a worker or vanishes.
func TestBadInputBattery(t *testing.T) {
	t.Parallel()
	testenv.Integration(t, "Kafka, PostgreSQL, mailpit and kcat")
	kcatBin := os.Getenv("POSTLINE_TEST_KCAT")
	if kcatBin == "" {
		t.Fatal(`POSTLINE_TEST_KCAT is not set: the battery publishes with kcat, which the stack provides; run eval "$(scripts/stack.sh env)"`)
	}
	if out, err := exec.Command(kcatBin, "-V").CombinedOutput(); err != nil {
		t.Fatalf("kcat %s -V: %v\n%s", kcatBin, err, out)
	}
	start := time.Now()
	s := newStack(t)
	w := startWorker(t, s.workerEnv("battery", nil))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limits, err := testenv.Kafka().MaxMessageBytes(ctx, s.jobs)
	if err != nil {
		t.Fatal(err)
	}
	topicMax := limits[s.jobs]

	kinds := batteryKinds(t, topicMax)
	counted := 0
	for _, k := range kinds {
		if !k.kafkaGo {
			counted++
		}
	}
	if counted < 80 {
		t.Fatalf("the battery has %d kcat kinds, want at least 80", counted)
	}
	w.WaitReady(readyTimeout)

	followers := newJobs(len(kinds), "battery follower")
	records := produceBattery(t, kcatBin, s.jobs, topicMax, kinds, followers)
	t.Logf("produced %d kinds (%d through kcat) and %d followers in %s", len(kinds), counted, len(followers),
		time.Since(start).Round(time.Millisecond))

	// Wait until every record is finished (committed), every expected dead
	// letter and mail is there; then take the final picture.
	expectLetters, expectMails := 0, len(followers)
	for _, k := range kinds {
		if k.want == wantSent {
			expectMails++
		} else {
			expectLetters++
		}
	}
	// A record is committed only once its fate is recorded: its dead
	// letter written or its mail accepted by the relay. So once every
	// partition is committed to its end the picture is complete, unless a
	// kind went to a retry topic (no scheduler runs here): then its mail
	// never comes, and after a grace period it is reported as vanished.
	var (
		letters        map[[2]int64]dlqRecord
		mails          map[string]int
		committed      bool
		complete       bool
		status         string
		committedSince time.Time
	)
	const grace = 3 * time.Second
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		letters, mails, committed, complete, status = s.batteryState(ctx, expectLetters, expectMails)
		cancel()
		if committed && committedSince.IsZero() {
			committedSince = time.Now()
		}
		if committed && (complete || time.Since(committedSince) > grace) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	switch {
	case !committed:
		t.Errorf("not every record finished within 60s: %s", status)
	case !complete:
		// The checks per kind below say which.
		t.Logf("every record is committed, but not every letter and mail is there: %s", status)
	}

	// One verdict per kind, in a table.
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tpartition/offset\tkind\twant\tgot\t")
	failed := 0
	for _, r := range records {
		if r.kind < 0 {
			continue
		}
		k := kinds[r.kind]
		p := int64(r.partition)
		l, lettered := letters[[2]int64{p, r.offset}]
		got := "vanished"
		var problems []string
		switch {
		case lettered:
			got = l.Reason
			if n := mails[k.sentID]; k.sentID != "" && n > 0 {
				problems = append(problems, fmt.Sprintf("also sent %d times", n))
			}
			if omitted := testkit.Header(l.Headers, jobheader.KeyDLQOmitted); omitted != "" {
				problems = append(problems, "dead letter shortened: "+omitted)
			} else if !bytes.Equal(l.Value, k.value) {
				problems = append(problems, fmt.Sprintf("dead letter value of %d bytes differs from the record's %d", len(l.Value), len(k.value)))
			}
			if topic := testkit.Header(l.Headers, jobheader.KeyDLQOriginalTopic); topic != s.jobs {
				problems = append(problems, fmt.Sprintf("original topic header %q", topic))
			}
		case k.sentID != "" && mails[k.sentID] > 0:
			got = wantSent
			if n := mails[k.sentID]; n != 1 {
				problems = append(problems, fmt.Sprintf("sent %d times", n))
			}
		}
		if got != k.want {
			problems = append(problems, "want "+k.want)
			if lettered {
				problems = append(problems, "error: "+testkit.Header(l.Headers, jobheader.KeyDLQError))
			}
		}
		mark := "ok"
		if len(problems) > 0 {
			mark = "FAIL: " + strings.Join(problems, "; ")
			failed++
			t.Errorf("kind %d %q at %d/%d: got %s: %s", r.kind, k.name, p, r.offset, got, strings.Join(problems, "; "))
		}
		fmt.Fprintf(tw, "%d\t%d/%d\t%s\t%s\t%s\t%s\n", r.kind, p, r.offset, k.name, k.want, got, mark)
	}
	_ = tw.Flush()
	t.Logf("battery: %d kinds, %d failed\n%s", len(kinds), failed, table.String())

	for _, r := range records {
		if r.kind >= 0 {
			continue
		}
		p := int64(r.partition)
		if l, ok := letters[[2]int64{p, r.offset}]; ok {
			t.Errorf("follower %s at %d/%d was dead-lettered: %s: %s", r.follower, p, r.offset, l.Reason, testkit.Header(l.Headers, jobheader.KeyDLQError))
		}
		if n := mails[r.follower]; n != 1 {
			t.Errorf("follower %s at %d/%d arrived %d times, want once", r.follower, p, r.offset, n)
		}
	}
	known := make(map[[2]int64]bool, len(records))
	for _, r := range records {
		known[[2]int64{int64(r.partition), r.offset}] = true
	}
	for at, l := range letters {
		if !known[at] {
			t.Errorf("dead letter for %d/%d, which the battery did not produce: %s", at[0], at[1], l.Reason)
		}
	}

	if !w.running() {
		t.Fatalf("worker exited during the battery (%v)", w.state)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if ok, reason := w.Ready(rctx); !ok {
		t.Errorf("worker not ready after the battery: %s", reason)
	}
	if code, took := w.Terminate(); code != 0 {
		t.Errorf("worker exited %d on SIGTERM after %s, want 0", code, took)
	}
	t.Logf("battery took %s", time.Since(start).Round(time.Millisecond))
}

// batteryState reads the dead letters (by original partition and offset)
// and the mails (count per Message-ID), and reports whether every record
// of the jobs topic is committed and whether the expected numbers of
// letters and mails are there.
func (s *stack) batteryState(ctx context.Context, wantLetters, wantMails int) (letters map[[2]int64]dlqRecord, mails map[string]int, committedToEnd, complete bool, status string) {
	letters = make(map[[2]int64]dlqRecord)
	mails = make(map[string]int)
	ranges, err := partitionRanges(ctx, s.dlq)
	if err != nil {
		return letters, mails, false, false, err.Error()
	}
	msgs, err := readRecords(ctx, s.dlq, 0, ranges[0].Start, int(ranges[0].End-ranges[0].Start))
	if err != nil {
		return letters, mails, false, false, err.Error()
	}
	for _, m := range msgs {
		p, _ := strconv.ParseInt(testkit.Header(m.Headers, jobheader.KeyDLQOriginalPartition), 10, 64)
		off, err := strconv.ParseInt(testkit.Header(m.Headers, jobheader.KeyDLQOriginalOffset), 10, 64)
		if err != nil {
			off = -1 - m.Offset // unlocatable: keep it, never matching a record
		}
		letters[[2]int64{p, off}] = dlqRecord{Message: m, Reason: testkit.Header(m.Headers, jobheader.KeyDLQReason)}
	}
	ids, err := s.mail.MessageIDs(ctx)
	if err != nil {
		return letters, mails, false, false, err.Error()
	}
	for _, id := range ids {
		mails[strings.Trim(id, "<>")]++
	}
	jobs, err := partitionRanges(ctx, s.jobs)
	if err != nil {
		return letters, mails, false, false, err.Error()
	}
	committed, err := s.committed(ctx)
	if err != nil {
		return letters, mails, false, false, err.Error()
	}
	status = fmt.Sprintf("%d of %d dead letters, %d of %d mails, committed %v of %v",
		len(msgs), wantLetters, len(ids), wantMails, committed, jobs)
	complete = len(msgs) >= wantLetters && len(ids) >= wantMails
	for p, r := range jobs {
		if committed[p] != r.End && !(committed[p] < 0 && r.Start == r.End) {
			return letters, mails, false, complete, status
		}
	}
	return letters, mails, true, complete, status
}

// produceBattery produces each kind to partition i%jobsPartitions followed
// by its follower, one partition per goroutine, each record with its own
// kcat run (kcat sets one key and one set of headers per run, and returns
// only once the broker acknowledged). Raw kinds are written with kafka-go
// after the kcat kinds of their partition. It returns the records with
// their offsets, checked against what the topic holds.
func produceBattery(t *testing.T, kcatBin, topic string, topicMax int, kinds []batteryKind, followers []job.Job) []batteryRecord {
	t.Helper()
	dir := t.TempDir()
	perPartition := make([][]batteryRecord, jobsPartitions)
	for i, k := range kinds {
		p := i % jobsPartitions
		v, err := json.Marshal(followers[i])
		if err != nil {
			t.Fatal(err)
		}
		perPartition[p] = append(perPartition[p],
			batteryRecord{partition: p, kind: i, key: k.key, value: k.value},
			batteryRecord{partition: p, kind: -1, follower: followers[i].MessageID, key: []byte(followers[i].MessageID), value: v})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, jobsPartitions)
	var wg sync.WaitGroup
	for p := range jobsPartitions {
		wg.Go(func() {
			errs[p] = producePartition(ctx, kcatBin, topic, topicMax, p, dir, kinds, perPartition[p])
		})
	}
	wg.Wait()
	for p, err := range errs {
		if err != nil {
			t.Fatalf("produce to partition %d: %v", p, err)
		}
	}

	// The topic is the test's own, and every record was acknowledged before
	// the next was sent (kcat with enable.idempotence): record n of a
	// partition is at offset n. Check that against what the topic holds.
	var out []batteryRecord
	for p, recs := range perPartition {
		got, err := readRecords(ctx, topic, p, kafka.FirstOffset, len(recs))
		if err != nil {
			t.Fatalf("read back partition %d: %v", p, err)
		}
		for n := range recs {
			recs[n].offset = int64(n)
			if got[n].Offset != int64(n) || !bytes.Equal(got[n].Key, recs[n].key) || !bytes.Equal(got[n].Value, recs[n].value) {
				t.Fatalf("partition %d record %d: offset %d, key %.40q, %d-byte value; want key %.40q, %d-byte value",
					p, n, got[n].Offset, got[n].Key, len(got[n].Value), recs[n].key, len(recs[n].value))
			}
		}
		out = append(out, recs...)
	}
	return out
}

// producePartition produces recs in order to partition p.
func producePartition(ctx context.Context, kcatBin, topic string, topicMax, p int, dir string, kinds []batteryKind, recs []batteryRecord) error {
	var rawWriter *kafka.Writer
	defer func() {
		if rawWriter != nil {
			_ = rawWriter.Close()
		}
	}()
	for n := 0; n < len(recs); n += 2 {
		k := kinds[recs[n].kind]
		follower := batteryKind{key: recs[n+1].key, value: recs[n+1].value}
		if k.kafkaGo {
			if rawWriter == nil {
				rawWriter = &kafka.Writer{
					Addr:         kafka.TCP(testenv.KafkaBrokers()...),
					Topic:        topic,
					Balancer:     kafka.BalancerFunc(func(m kafka.Message, _ ...int) int { return m.Partition }),
					RequiredAcks: kafka.RequireAll,
					BatchTimeout: time.Millisecond,
				}
			}
			err := rawWriter.WriteMessages(ctx,
				kafka.Message{Partition: p, Key: k.key, Value: k.value, Headers: k.rawHeaders},
				kafka.Message{Partition: p, Key: follower.key, Value: follower.value})
			if err != nil {
				return fmt.Errorf("kafka-go: kind %q: %w", k.name, err)
			}
			continue
		}
		for i, rec := range []batteryKind{k, follower} {
			if err := kcatProduce(ctx, kcatBin, topic, topicMax, p, filepath.Join(dir, fmt.Sprintf("p%d-%d-%d", p, n, i)), rec); err != nil {
				return fmt.Errorf("kind %q: %w", k.name, err)
			}
		}
	}
	return nil
}

// kcatProduce produces one record with kcat, writing its value to file.
func kcatProduce(ctx context.Context, kcatBin, topic string, topicMax, p int, file string, k batteryKind) error {
	args := []string{"-P", "-b", testenv.KafkaBrokers()[0], "-t", topic, "-p", strconv.Itoa(p), "-m", "15",
		"-X", "enable.idempotence=true", "-X", "message.max.bytes=" + strconv.Itoa(2*topicMax)}
	for _, h := range k.headers {
		args = append(args, "-H", h)
	}
	var stdin []byte
	switch k.mode {
	case valueFile:
		if len(k.value) == 0 {
			return fmt.Errorf("kcat skips empty files: use valueEmpty")
		}
		if err := os.WriteFile(file, k.value, 0o600); err != nil {
			return err
		}
		if !k.nullKey {
			args = append(args, "-k", string(k.key))
		}
		args = append(args, file)
	case valueEmpty, valueNull:
		if k.nullKey || bytes.ContainsAny(k.key, "\t\n") {
			return fmt.Errorf("a value from stdin needs a key without TAB or LF")
		}
		args = append(args, "-K", `\t`)
		if k.mode == valueNull {
			args = append(args, "-Z")
		}
		stdin = append(append(slices.Clone(k.key), '\t'), '\n')
	}
	cmd := exec.CommandContext(ctx, kcatBin, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kcat: %w\n%s", err, out)
	}
	return nil
}

// batteryKinds returns the kinds, each with a fresh Message-ID where it
// has one. topicMax is the jobs topic's max.message.bytes.
func batteryKinds(t *testing.T, topicMax int) []batteryKind {
	const (
		from = "Postline E2E <sender@example.test>"
		rcpt = "rcpt@example.test"
	)
	// The job package's default limits, and its fixed bounds on small
	// fields as job.Limits documents them.
	limits := job.Limits{}.WithDefaults()
	const (
		maxSubjectLength     = 998
		maxHeaders           = 50
		maxHeaderValueLength = 4096
		maxMetadataEntries   = 64
	)
	// base is a minimal valid document with a fresh Message-ID, its keys
	// in schema order.
	base := func() (string, string) {
		id := job.NewMessageID(messageIDDomain)
		return id, `{"version":1,"message_id":"` + id + `","from":"` + from + `","to":["` + rcpt +
			`"],"subject":"battery","text":"Hello from the bad-input battery.\n"}`
	}
	// mod replaces old by repl in a fresh base document; old must be there,
	// so that no kind is silently the valid base.
	mod := func(old, repl string) []byte {
		_, doc := base()
		if !strings.Contains(doc, old) {
			t.Fatalf("battery: %q is not in the base document %s", old, doc)
		}
		return []byte(strings.Replace(doc, old, repl, 1))
	}
	// with adds members to a fresh base document.
	with := func(members string) []byte {
		_, doc := base()
		return []byte(doc[:len(doc)-1] + "," + members + "}")
	}
	// valid returns a fresh valid job, for kinds to change.
	valid := func() job.Job {
		j := newJobs(1, "battery kind")[0]
		j.To = []string{rcpt}
		return j
	}
	// encode marshals j as is, bypassing the publisher's validation.
	encode := func(j job.Job) []byte {
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bad := func(mutate func(j *job.Job)) []byte {
		j := valid()
		mutate(&j)
		return encode(j)
	}

	var kinds []batteryKind
	// reject adds a kind whose value must be dead-lettered with reason.
	reject := func(name string, value []byte, reason job.Reason) {
		kinds = append(kinds, batteryKind{name: name, value: value, want: string(reason)})
	}
	// accept adds a kind whose value is valid job j, changed by opts; want
	// is wantSent or the reason the worker (not the decoder) gives it.
	accept := func(name, want string, j job.Job, opts func(k *batteryKind)) {
		id := strings.TrimSuffix(strings.TrimPrefix(j.MessageID, "<"), ">")
		k := batteryKind{name: name, key: []byte(id), value: encode(j), want: want, sentID: id}
		if opts != nil {
			opts(&k)
		}
		kinds = append(kinds, k)
	}
	sent := func(name string, opts func(k *batteryKind)) { accept(name, wantSent, valid(), opts) }
	headers := func(h ...string) func(k *batteryKind) {
		return func(k *batteryKind) { k.headers = h }
	}
	deep := func(n int, open, close, leaf string) string {
		return strings.Repeat(open, n) + leaf + strings.Repeat(close, n)
	}

	// Malformed JSON.
	{
		_, doc := base()
		reject("truncated mid-document", []byte(doc[:len(doc)/2]), job.ReasonMalformedJSON)
		reject("truncated: only the closing brace missing", []byte(doc[:len(doc)-1]), job.ReasonMalformedJSON)
	}
	reject("only an opening brace", []byte("{"), job.ReasonMalformedJSON)
	reject("trailing garbage", append(with(`"tenant":"t"`), "garbage"...), job.ReasonMalformedJSON)
	{
		_, a := base()
		_, b := base()
		reject("two documents in one record", []byte(a+"\n"+b), job.ReasonMalformedJSON)
	}
	reject("trailing comma in the object", mod(`"text":"Hello from the bad-input battery.\n"}`, `"text":"Hello from the bad-input battery.\n",}`), job.ReasonMalformedJSON)
	reject("UTF-8 byte order mark before the object", append([]byte("\xef\xbb\xbf"), with(`"tenant":"t"`)...), job.ReasonMalformedJSON)
	reject("NUL byte before the object", append([]byte{0}, with(`"tenant":"t"`)...), job.ReasonMalformedJSON)
	reject("NUL byte after the object", append(with(`"tenant":"t"`), 0), job.ReasonMalformedJSON)
	reject("raw NUL byte inside a string", mod(`"subject":"battery"`, "\"subject\":\"batt\x00ery\""), job.ReasonMalformedJSON)
	reject("escaped NUL in the subject", mod(`"subject":"battery"`, `"subject":"batt\u0000ery"`), job.ReasonHeaderInjection)
	// RFC 8259 section 8.1: JSON text is UTF-8; encoding/json silently
	// replaces invalid bytes with U+FFFD, which the issue counts as
	// malformed JSON.
	reject("invalid UTF-8 in the subject", mod(`"subject":"battery"`, "\"subject\":\"batt\xffery\""), job.ReasonMalformedJSON)
	reject("overlong UTF-8 in the text", mod(`"text":"Hello`, "\"text\":\"\xc0\xafHello"), job.ReasonMalformedJSON)
	reject("invalid UTF-8 in a key", with("\"tenant\xff\":\"t\""), job.ReasonMalformedJSON)
	reject("not JSON at all", []byte("hello, worker"), job.ReasonMalformedJSON)
	reject("a JSON array", append(append([]byte("["), with(`"tenant":"t"`)...), ']'), job.ReasonMalformedJSON)
	reject("a JSON string", []byte(`"a job"`), job.ReasonMalformedJSON)
	reject("a JSON number", []byte(`1`), job.ReasonMalformedJSON)
	reject("JSON null", []byte(`null`), job.ReasonMalformedJSON)
	reject("JSON true", []byte(`true`), job.ReasonMalformedJSON)
	reject("empty object", []byte(`{}`), job.ReasonUnsupportedVersion)
	kinds = append(kinds,
		batteryKind{name: "empty value", mode: valueEmpty, want: string(job.ReasonMalformedJSON)},
		batteryKind{name: "null value (tombstone)", mode: valueNull, want: string(job.ReasonMalformedJSON)})
	reject("only whitespace", []byte(" \t\r\n  \n"), job.ReasonMalformedJSON)
	reject("single-quoted strings", []byte(`{'version':1}`), job.ReasonMalformedJSON)
	reject("unquoted keys", []byte(`{version:1}`), job.ReasonMalformedJSON)
	reject("a comment", mod(`{"version":1,`, `{/* job */"version":1,`), job.ReasonMalformedJSON)
	reject("NaN", mod(`"version":1`, `"version":NaN`), job.ReasonMalformedJSON)
	reject("hex number", mod(`"version":1`, `"version":0x1`), job.ReasonMalformedJSON)
	reject("leading zero", mod(`"version":1`, `"version":01`), job.ReasonMalformedJSON)
	reject("unterminated string", []byte(`{"version":1,"message_id":"a@b`), job.ReasonMalformedJSON)

	// Numbers and versions.
	reject("version missing", mod(`"version":1,`, ``), job.ReasonUnsupportedVersion)
	reject("version 0", mod(`"version":1`, `"version":0`), job.ReasonUnsupportedVersion)
	reject("version 2", mod(`"version":1`, `"version":2`), job.ReasonUnsupportedVersion)
	reject("version -1", mod(`"version":1`, `"version":-1`), job.ReasonUnsupportedVersion)
	reject(`version "1"`, mod(`"version":1`, `"version":"1"`), job.ReasonUnsupportedVersion)
	reject("version 1.0", mod(`"version":1`, `"version":1.0`), job.ReasonUnsupportedVersion)
	reject("version 1e0", mod(`"version":1`, `"version":1e0`), job.ReasonUnsupportedVersion)
	reject("version null", mod(`"version":1`, `"version":null`), job.ReasonUnsupportedVersion)
	reject("version true", mod(`"version":1`, `"version":true`), job.ReasonUnsupportedVersion)
	reject("version [1]", mod(`"version":1`, `"version":[1]`), job.ReasonUnsupportedVersion)
	reject("version out of int64 range", mod(`"version":1`, `"version":99999999999999999999`), job.ReasonUnsupportedVersion)
	reject("version 1e400", mod(`"version":1`, `"version":1e400`), job.ReasonUnsupportedVersion)
	reject("version of 100k digits", mod(`"version":1`, `"version":1`+strings.Repeat("0", 100_000)), job.ReasonUnsupportedVersion)
	reject("subject a number of 100k digits", mod(`"subject":"battery"`, `"subject":`+strings.Repeat("9", 100_000)), job.ReasonMalformedJSON)
	reject("wrong case key Version", mod(`"version":1`, `"Version":1`), job.ReasonUnsupportedVersion)

	// Nesting and width.
	reject("10k nested arrays in to", mod(`"to":["`+rcpt+`"]`, `"to":`+deep(10_000, "[", "]", "")), job.ReasonTooDeep)
	reject("10k nested objects in metadata", mod(`"subject":"battery"`, `"subject":"battery","metadata":`+deep(10_000, `{"a":`, "}", `"v"`)), job.ReasonTooDeep)
	reject("10k unclosed arrays", mod(`"to":["`+rcpt+`"]`, `"to":`+strings.Repeat("[", 10_000)), job.ReasonTooDeep)
	reject("10k nested arrays as the document", []byte(deep(10_000, "[", "]", "")), job.ReasonMalformedJSON)
	reject("10k nested objects as the document", []byte(deep(10_000, `{"a":`, "}", "1")), job.ReasonTooDeep)
	{
		var b strings.Builder
		for i := range 50_000 {
			fmt.Fprintf(&b, `"m%d":"v",`, i)
		}
		m := strings.TrimSuffix(b.String(), ",")
		reject("metadata of 50k entries", with(`"metadata":{`+m+`}`), job.ReasonOversizeField)
		reject("50k unknown top-level keys", with(strings.ReplaceAll(m, `"m`, `"x`)), job.ReasonUnknownField)
	}
	reject("duplicate key subject", mod(`"subject":"battery"`, `"subject":"battery","subject":"again"`), job.ReasonMalformedJSON)
	reject("duplicate key version", mod(`"version":1`, `"version":1,"version":1`), job.ReasonMalformedJSON)
	reject("duplicate key message_id", with(`"message_id":"`+job.NewMessageID(messageIDDomain)+`"`), job.ReasonMalformedJSON)

	// Types, nulls, unknown fields.
	reject("to is a string", mod(`"to":["`+rcpt+`"]`, `"to":"`+rcpt+`"`), job.ReasonMalformedJSON)
	reject("subject is a number", mod(`"subject":"battery"`, `"subject":42`), job.ReasonMalformedJSON)
	reject("from is an array", mod(`"from":"`+from+`"`, `"from":["`+from+`"]`), job.ReasonMalformedJSON)
	reject("headers is an array", with(`"headers":["X-A: 1"]`), job.ReasonMalformedJSON)
	reject("attachments is an object", with(`"attachments":{"filename":"a.txt"}`), job.ReasonMalformedJSON)
	reject("priority is a number", with(`"priority":1`), job.ReasonMalformedJSON)
	reject("not_after is a number", with(`"not_after":1700000000`), job.ReasonMalformedJSON)
	reject("text is a boolean", mod(`"text":"Hello from the bad-input battery.\n"`, `"text":true`), job.ReasonMalformedJSON)
	reject("metadata value is a number", with(`"metadata":{"k":1}`), job.ReasonMalformedJSON)
	reject("subject null", mod(`"subject":"battery"`, `"subject":null`), job.ReasonMalformedJSON)
	reject("to null", mod(`"to":["`+rcpt+`"]`, `"to":null`), job.ReasonMalformedJSON)
	{
		id, doc := base()
		reject("message_id null", []byte(strings.Replace(doc, `"`+id+`"`, `null`, 1)), job.ReasonMalformedJSON)
		id, doc = base()
		reject("message_id key missing", []byte(strings.Replace(doc, `"message_id":"`+id+`",`, ``, 1)), job.ReasonMissingField)
	}
	reject("unknown field", with(`"bogus":1`), job.ReasonUnknownField)
	reject("wrong case key From", mod(`"from":`, `"From":`), job.ReasonUnknownField)
	reject("unknown field in an attachment", with(`"attachments":[{"filename":"a.txt","content":"aGk=","size":2}]`), job.ReasonUnknownField)

	// Message-IDs.
	reject("message_id empty", bad(func(j *job.Job) { j.MessageID = "" }), job.ReasonMissingField)
	reject("message_id <>", bad(func(j *job.Job) { j.MessageID = "<>" }), job.ReasonInvalidMessageID)
	reject("message_id with a space", bad(func(j *job.Job) { j.MessageID = "a b." + j.MessageID }), job.ReasonInvalidMessageID)
	reject("message_id without @", bad(func(j *job.Job) { j.MessageID = strings.ReplaceAll(j.MessageID, "@", ".") }), job.ReasonInvalidMessageID)
	reject("message_id with two @", bad(func(j *job.Job) { j.MessageID = "a@" + j.MessageID }), job.ReasonInvalidMessageID)
	reject("message_id of 251 characters", bad(func(j *job.Job) { j.MessageID = strings.Repeat("a", 251-len(j.MessageID)) + j.MessageID }), job.ReasonInvalidMessageID)
	reject("message_id with CRLF", bad(func(j *job.Job) { j.MessageID += "\r\nBcc: victim@example.test" }), job.ReasonHeaderInjection)
	reject("message_id with an unbalanced bracket", bad(func(j *job.Job) { j.MessageID = "<" + j.MessageID }), job.ReasonInvalidMessageID)
	reject("message_id not ASCII", bad(func(j *job.Job) { j.MessageID = "é" + j.MessageID }), job.ReasonInvalidMessageID)
	{
		j := valid()
		j.MessageID = "<" + j.MessageID + ">"
		accept("message_id in angle brackets <a@b>", wantSent, j, nil)
	}

	// Addresses and recipients.
	reject("from key missing", mod(`"from":"`+from+`",`, ``), job.ReasonMissingField)
	reject("from empty", bad(func(j *job.Job) { j.From = "" }), job.ReasonMissingField)
	reject("invalid from address", bad(func(j *job.Job) { j.From = "bob@" }), job.ReasonInvalidAddress)
	reject("invalid to address", bad(func(j *job.Job) { j.To = []string{"not an address"} }), job.ReasonInvalidAddress)
	reject("two addresses in one to entry", bad(func(j *job.Job) { j.To = []string{"a@example.test, b@example.test"} }), job.ReasonInvalidAddress)
	reject("empty to entry", bad(func(j *job.Job) { j.To = []string{""} }), job.ReasonInvalidAddress)
	reject("invalid cc address", bad(func(j *job.Job) { j.Cc = []string{"a@b@c"} }), job.ReasonInvalidAddress)
	reject("invalid bcc address", bad(func(j *job.Job) { j.Bcc = []string{"<unclosed@example.test"} }), job.ReasonInvalidAddress)
	reject("invalid reply_to address", bad(func(j *job.Job) { j.ReplyTo = []string{"@example.test"} }), job.ReasonInvalidAddress)
	reject("address of 999 bytes", bad(func(j *job.Job) { j.To = []string{strings.Repeat("a", 999-len("@example.test")) + "@example.test"} }), job.ReasonInvalidAddress)
	reject("no recipients", bad(func(j *job.Job) { j.To = nil }), job.ReasonMissingField)
	reject("101 recipients", bad(func(j *job.Job) {
		j.To = nil
		for i := range limits.MaxRecipients + 1 {
			j.To = append(j.To, fmt.Sprintf("r%d@example.test", i))
		}
	}), job.ReasonTooManyRecipients)
	reject("10k recipients", bad(func(j *job.Job) {
		j.To = nil
		for i := range 10_000 {
			j.To = append(j.To, fmt.Sprintf("r%d@example.test", i))
		}
	}), job.ReasonTooManyRecipients)

	// Header injection and headers.
	reject("LF in subject", bad(func(j *job.Job) { j.Subject = "Hello\nBcc: victim@example.test" }), job.ReasonHeaderInjection)
	reject("CR in subject", bad(func(j *job.Job) { j.Subject = "Hello\rBcc: victim@example.test" }), job.ReasonHeaderInjection)
	reject("CRLF in a header value", bad(func(j *job.Job) { j.Headers = map[string]string{"X-Campaign": "a\r\nBcc: victim@example.test"} }), job.ReasonHeaderInjection)
	reject("LF in a header name", bad(func(j *job.Job) { j.Headers = map[string]string{"X-A\nBcc": "victim@example.test"} }), job.ReasonHeaderInjection)
	reject("LF in a display name", bad(func(j *job.Job) { j.To = []string{"Eve\n <eve@example.test>"} }), job.ReasonHeaderInjection)
	reject("encoded CRLF in a display name", bad(func(j *job.Job) { j.To = []string{"=?UTF-8?Q?Eve=0D=0AX-Evil=3A_1?= <eve@example.test>"} }), job.ReasonHeaderInjection)
	reject("LF in tenant", bad(func(j *job.Job) { j.Tenant = "acme\nX-Evil: 1" }), job.ReasonHeaderInjection)
	reject("subject of 999 bytes", bad(func(j *job.Job) { j.Subject = strings.Repeat("s", maxSubjectLength+1) }), job.ReasonOversizeField)
	reject("header Bcc not allowed", bad(func(j *job.Job) { j.Headers = map[string]string{"Bcc": "victim@example.test"} }), job.ReasonHeaderNotAllowed)
	reject("header X-Postline-* reserved", bad(func(j *job.Job) { j.Headers = map[string]string{"X-Postline-Attempt": "1"} }), job.ReasonHeaderNotAllowed)
	reject("header name with a colon", bad(func(j *job.Job) { j.Headers = map[string]string{"X-A:B": "1"} }), job.ReasonHeaderNotAllowed)
	reject("51 headers", bad(func(j *job.Job) {
		j.Headers = map[string]string{}
		for i := range maxHeaders + 1 {
			j.Headers[fmt.Sprintf("X-H%d", i)] = "v"
		}
	}), job.ReasonOversizeField)
	reject("header value of 4097 bytes", bad(func(j *job.Job) {
		j.Headers = map[string]string{"X-Big": strings.Repeat("v", maxHeaderValueLength+1)}
	}), job.ReasonOversizeField)

	// Bodies, attachments and the other fields.
	reject("no body", bad(func(j *job.Job) { j.Text = "" }), job.ReasonMissingBody)
	reject("oversize body", bad(func(j *job.Job) { j.Text = strings.Repeat("a", limits.MaxBodyBytes+1) }), job.ReasonOversizeBody)
	reject("oversize attachment", bad(func(j *job.Job) {
		j.Attachments = []job.Attachment{{Filename: "big.bin", Content: make([]byte, limits.MaxAttachmentBytes+1)}}
	}), job.ReasonOversizeAttachment)
	reject("bad base64 in an attachment", with(`"attachments":[{"filename":"a.txt","content":"!!not base64!!"}]`), job.ReasonMalformedJSON)
	reject("attachment without filename", with(`"attachments":[{"content":"`+base64.StdEncoding.EncodeToString([]byte("hi"))+`"}]`), job.ReasonMissingField)
	reject("attachment filename with a slash", bad(func(j *job.Job) { j.Attachments = []job.Attachment{{Filename: "../etc/passwd", Content: []byte("x")}} }), job.ReasonInvalidField)
	reject("attachment content type unparsable", bad(func(j *job.Job) {
		j.Attachments = []job.Attachment{{Filename: "a.txt", ContentType: "text/plain; charset", Content: []byte("x")}}
	}), job.ReasonInvalidField)
	reject("priority high", with(`"priority":"high"`), job.ReasonInvalidPriority)
	reject("priority URGENT", with(`"priority":"URGENT"`), job.ReasonInvalidPriority)
	reject("not_after garbage", with(`"not_after":"tomorrow"`), job.ReasonMalformedJSON)
	reject("not_after without a time zone", with(`"not_after":"2030-01-01T00:00:00"`), job.ReasonMalformedJSON)
	reject("template without name", with(`"template":{"version":"1"}`), job.ReasonMissingField)
	reject("metadata of 65 entries", bad(func(j *job.Job) {
		j.Metadata = map[string]string{}
		for i := range maxMetadataEntries + 1 {
			j.Metadata[fmt.Sprintf("k%d", i)] = "v"
		}
	}), job.ReasonOversizeField)
	reject("metadata with an empty key", with(`"metadata":{"":"v"}`), job.ReasonInvalidField)
	{
		j := valid()
		past := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
		j.NotAfter = &past
		accept("not_after in the past", string(job.ReasonExpired), j, nil)
	}
	{
		j := valid()
		future := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
		j.NotAfter = &future
		accept("not_after in year 9999", wantSent, j, nil)
	}

	// Sizes.
	{
		// Just under the jobs topic's max.message.bytes: the broker takes it,
		// the worker's 2 MiB limit does not.
		id, doc := base()
		pad := topicMax - 1024 - len(doc)
		kinds = append(kinds, batteryKind{name: fmt.Sprintf("value of %d bytes, 1 KiB under the topic's max.message.bytes", topicMax-1024),
			key: []byte("big." + id), value: []byte(doc[:1] + strings.Repeat(" ", pad) + doc[1:]), want: string(job.ReasonOversizeMessage)})
		// A valid job padded with whitespace to exactly the worker's limit,
		// and one byte more.
		j := valid()
		v := encode(j)
		exact := append(append([]byte("{"), bytes.Repeat([]byte(" "), limits.MaxMessageBytes-len(v))...), v[1:]...)
		accept("valid job padded to exactly MaxMessageBytes", wantSent, j, func(k *batteryKind) { k.value = exact })
		id, doc = base()
		over := doc[:1] + strings.Repeat(" ", limits.MaxMessageBytes+1-len(doc)) + doc[1:]
		kinds = append(kinds, batteryKind{name: "valid job padded to MaxMessageBytes+1", key: []byte(id), value: []byte(over),
			want: string(job.ReasonOversizeMessage)})
	}

	// Keys, with valid and with bad values. kcat passes a key as a command
	// line argument, so a key with a NUL byte is a raw kind below.
	binaryKey := []byte("\x01\x02\xff\xfe\x7f key \xc3\x28")
	hugeKey := bytes.Repeat([]byte("k"), 100<<10)
	sent("empty key", func(k *batteryKind) { k.key = []byte{} })
	sent("no key (null)", func(k *batteryKind) { k.key, k.nullKey = nil, true })
	sent("100 KB key", func(k *batteryKind) { k.key = hugeKey })
	sent("binary key", func(k *batteryKind) { k.key = binaryKey })
	sent("key differs from message_id", func(k *batteryKind) { k.key = []byte(job.NewMessageID(messageIDDomain)) })
	kinds = append(kinds,
		batteryKind{name: "empty key, bad value", key: []byte{}, value: []byte("not json"), want: string(job.ReasonMalformedJSON)},
		batteryKind{name: "no key (null), bad value", nullKey: true, value: []byte("not json"), want: string(job.ReasonMalformedJSON)},
		batteryKind{name: "100 KB key, bad value", key: hugeKey, value: []byte("not json"), want: string(job.ReasonMalformedJSON)},
		batteryKind{name: "binary key, bad value", key: binaryKey, value: []byte("not json"), want: string(job.ReasonMalformedJSON)})

	// Kafka headers on valid jobs: Postline's own headers are read as
	// untrusted, so garbage in them must not stop a valid job. A bad count
	// reads as attempt 1 (no throttles); postline-not-before belongs to the
	// retry scheduler and the worker does not wait for it on the jobs
	// topic (holding a record there would hold its partition).
	now := time.Now()
	sent("postline-attempt 0", headers(jobheader.KeyAttempt+"=0"))
	sent("postline-attempt -1", headers(jobheader.KeyAttempt+"=-1"))
	sent("postline-attempt 2147483647", headers(jobheader.KeyAttempt+"=2147483647"))
	sent("postline-attempt 2147483648", headers(jobheader.KeyAttempt+"=2147483648"))
	sent("postline-attempt 99999999999999999999", headers(jobheader.KeyAttempt+"=99999999999999999999"))
	sent("postline-attempt abc", headers(jobheader.KeyAttempt+"=abc"))
	sent("postline-attempt with spaces", headers(jobheader.KeyAttempt+"= 2 "))
	sent("postline-attempt repeated", headers(jobheader.KeyAttempt+"=1", jobheader.KeyAttempt+"=3", jobheader.KeyAttempt+"=x"))
	sent("postline-attempt null value", headers(jobheader.KeyAttempt))
	sent("postline-not-before far future", headers(jobheader.KeyNotBefore+"="+jobheader.FormatTime(now.AddDate(100, 0, 0))))
	sent("postline-not-before far past", headers(jobheader.KeyNotBefore+"=0001-01-01T00:00:00Z"))
	sent("postline-not-before garbage", headers(jobheader.KeyNotBefore+"=soon"))
	sent("postline-first-seen garbage", headers(jobheader.KeyFirstSeen+"=yesterday"))
	sent("postline-first-seen in the future", headers(jobheader.KeyFirstSeen+"="+jobheader.FormatTime(now.AddDate(10, 0, 0))))
	// Ten years old is past every priority's max age (24h for normal): the
	// job is dead, and the dead letter says so.
	accept("postline-first-seen 10 years ago", deadletter.ReasonMaxAge, valid(), headers(jobheader.KeyFirstSeen+"="+jobheader.FormatTime(now.AddDate(-10, 0, 0))))
	sent("postline-throttles huge", headers(jobheader.KeyThrottles+"=99999999999999999999"))
	sent("postline-throttles -5", headers(jobheader.KeyThrottles+"=-5"))
	sent("postline-last-class garbage", headers(jobheader.KeyLastClass+"=\xff garbage"))
	sent("traceparent garbage", headers("traceparent=garbage"))
	sent("traceparent all zeros", headers("traceparent=00-00000000000000000000000000000000-0000000000000000-01"))
	sent("traceparent version ff", headers("traceparent=ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	sent("tracestate garbage", headers("traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate=,,=,\xff"))
	{
		h := make([]string, 200)
		for i := range h {
			h[i] = fmt.Sprintf("x-battery-%03d=%d", i, i)
		}
		sent("200 headers", headers(h...))
	}
	sent("100 KB header value", headers("x-battery-big="+strings.Repeat("v", 100<<10)))
	sent("header keys with spaces and unicode", headers("key with spaces=1", "ключ=значение", "🔑=🔒", " =space"))
	sent("header with a binary value", headers("x-binary=\x01\xff\xfe\x80"))
	sent("header with a null value", headers("x-null"))
	// Dead-letter headers set by the producer must be replaced, not
	// believed: the letter is found by its real partition and offset.
	kinds = append(kinds,
		batteryKind{name: "spoofed postline-dlq-reason on a bad record", value: []byte("not json"),
			headers: []string{jobheader.KeyDLQReason + "=sent", jobheader.KeyDLQReason + "=smtp_permanent"}, want: string(job.ReasonMalformedJSON)},
		batteryKind{name: "spoofed postline-original-offset on a bad record", value: []byte("not json"),
			headers: []string{jobheader.KeyDLQOriginalOffset + "=0", jobheader.KeyDLQOriginalPartition + "=0"}, want: string(job.ReasonMalformedJSON)})

	// Extras that kcat cannot express (a NUL byte in a command line
	// argument, an empty header key), written with kafka-go.
	kinds = append(kinds,
		batteryKind{name: "key with NUL bytes, bad value (kafka-go)", key: []byte("bad\x00key\x00"), value: []byte("not json"),
			kafkaGo: true, want: string(job.ReasonMalformedJSON)})
	{
		j := valid()
		kinds = append(kinds,
			batteryKind{name: "header value with NUL bytes (kafka-go)", key: []byte(j.MessageID), value: encode(j), sentID: j.MessageID, want: wantSent,
				kafkaGo: true, rawHeaders: []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("1\x00")}, {Key: "x-nul", Value: []byte("a\x00b")}}})
		j = valid()
		kinds = append(kinds,
			batteryKind{name: "empty header key (kafka-go)", key: []byte(j.MessageID), value: encode(j), sentID: j.MessageID, want: wantSent,
				kafkaGo: true, rawHeaders: []kafka.Header{{Key: "", Value: []byte("v")}}})
	}

	// Every kind without its own key gets a unique one that names it: a
	// rejected record's key becomes a dead row, so it must not be any
	// other kind's Message-ID.
	for i := range kinds {
		k := &kinds[i]
		if k.key == nil && !k.nullKey {
			k.key = fmt.Appendf(nil, "bad-%03d.%s", i, job.NewMessageID(messageIDDomain))
		}
		// A rejected document that names a Message-ID must not arrive under
		// it: remember the ID so that a wrongly sent kind is reported as
		// sent, not as vanished.
		var doc struct {
			MessageID string `json:"message_id"`
		}
		if k.sentID == "" && json.Unmarshal(k.value, &doc) == nil && doc.MessageID != "" {
			k.sentID = strings.TrimSuffix(strings.TrimPrefix(doc.MessageID, "<"), ">")
		}
	}
	return kinds
}
