package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// The binaries TestMain built; empty under -short.
var (
	workerBin     string // ./cmd/worker
	schedulerBin  string // ./cmd/retry-scheduler
	postctlBin    string // ./cmd/postctl
	receiverBin   string // ./cmd/bounce-receiver
	dispatcherBin string // ./cmd/webhook-dispatcher
	consoleBin    string // ./cmd/console
	// binDir holds them; plainWorkerBin builds into it on demand.
	binDir string
)

// plainWorkerBin is ./cmd/worker built without the race detector, once, for
// the tests whose figure is a rate: an instrumented worker spends several
// times the CPU a user's does, and on two shared cores that measures the
// detector. Without -race it is workerBin.
var plainWorkerBin = sync.OnceValues(func() (string, error) {
	if !raceEnabled {
		return workerBin, nil
	}
	return buildBinary(binDir, "worker", false)
})

// Sizes and bounds shared by the tests.
const (
	// jobsPartitions is the partition count of each test's jobs topic.
	jobsPartitions = 4
	// messageIDDomain is the id-right of every Message-ID the tests publish.
	messageIDDomain = "e2e.postline.test"
	// startTimeout bounds a worker's start: binding its HTTP port.
	startTimeout = 30 * time.Second
	// readyTimeout bounds waiting for a worker to join its group.
	readyTimeout = 45 * time.Second
	// pollEvery is how often the harness's own loops poll (testkit.Eventually paces itself).
	pollEvery = 25 * time.Millisecond
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runTests(m))
}

// runTests builds the worker once (unless -short, where every test skips)
// and runs the tests.
func runTests(m *testing.M) int {
	if !testing.Short() {
		dir, err := os.MkdirTemp("", "postline-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		for _, b := range []struct {
			pkg string
			bin *string
		}{{"worker", &workerBin}, {"retry-scheduler", &schedulerBin}, {"postctl", &postctlBin},
			{"bounce-receiver", &receiverBin}, {"webhook-dispatcher", &dispatcherBin}, {"console", &consoleBin}} {
			bin, err := buildBinary(dir, b.pkg, raceEnabled)
			if err != nil {
				fmt.Fprintln(os.Stderr, "e2e:", err)
				return 1
			}
			*b.bin = bin
		}
	}
	return m.Run()
}

// buildBinary builds ./cmd/<name> from the module root into dir, with the
// race detector if race (into <name>-race, so both builds can sit side by
// side).
func buildBinary(dir, name string, race bool) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("find module root (go list -m): %w", err)
	}
	root := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	bin := filepath.Join(dir, name)
	args := []string{"build"}
	if race {
		bin += "-race"
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "-o", bin, "./cmd/"+name)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s in %s: %w\n%s", name, root, err, out)
	}
	return bin, nil
}

// stack is one test's share of the real services: its own jobs and
// dead-letter topics, consumer group, Postgres schema and Mailpit.
type stack struct {
	t      *testing.T
	jobs   string
	dlq    string
	events string
	group  string
	// retryPrefix names the stack's delay topics, one per default tier,
	// which the worker checks at start; failure tests bring their own.
	retryPrefix string
	// dbURL reaches Postgres directly, with search_path set to the schema.
	dbURL string
	// db is a pool on dbURL: the tests read rows through it, never through
	// a fault-injecting proxy.
	db   *pgxpool.Pool
	mail *testenv.Mailpit
	pub  *job.Publisher
	// raw writes records to the jobs topic as they are, for bad input.
	raw *kafkaclient.TopicWriter
}

// newStack carves out the test's services. It skips t under -short.
func newStack(t *testing.T) *stack {
	t.Helper()
	testenv.Integration(t, "Kafka, PostgreSQL and mailpit")
	if workerBin == "" {
		t.Fatal("the worker binary was not built")
	}
	s := &stack{
		t:      t,
		jobs:   testenv.UniqueName("e2e.jobs"),
		dlq:    testenv.UniqueName("e2e.dlq"),
		events: testenv.UniqueName("e2e.events"),
		group:  testenv.UniqueName("e2e-group"),

		retryPrefix: testenv.UniqueName("e2e.retry"),
	}
	s.dbURL, s.db = testenv.NewSchema(t)
	s.mail = testenv.StartMailpit(t)

	specs := topic.Defaults(s.jobs, s.dlq, jobsPartitions)
	specs[1].Partitions = 1
	specs = append(specs, retry.TopicSpecs(s.retryPrefix, retry.DefaultTiers, 1)...)
	events := topic.EventsSpec(s.events)
	events.Partitions = 2
	specs = append(specs, events)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := topic.Ensure(ctx, testenv.Kafka(), specs...); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.Kafka(), append([]string{s.jobs, s.dlq, s.events}, retry.DefaultTiers.Topics(s.retryPrefix)...)...); err != nil {
			t.Logf("delete topics: %v", err)
		}
	})

	pub, err := job.NewPublisher(testenv.Kafka().Config(), job.PublisherConfig{
		Topic:           s.jobs,
		MessageIDDomain: messageIDDomain,
	})
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	raw, err := testenv.Kafka().TopicWriter(kafkaclient.WriterConfig{Topic: s.jobs, Limits: map[string]int{s.jobs: topic.MaxMessageBytes}})
	if err != nil {
		t.Fatalf("raw writer: %v", err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	s.pub, s.raw = pub, raw
	return s
}

// workerEnv returns the environment of a worker named name on this stack,
// with overrides applied last. The session timeout is short (6s) so that a
// killed member's partitions move quickly, and the shutdown timeout (10s)
// keeps the consumer's drain (4/5 of it) below its rebalance timeout (15s).
// minimalEnv is the environment without any tuning.
func (s *stack) workerEnv(name string, overrides map[string]string) map[string]string {
	env := s.minimalEnv(name)
	maps.Copy(env, map[string]string{
		"POSTLINE_SESSION_TIMEOUT":    "6s",
		"POSTLINE_HEARTBEAT_INTERVAL": "500ms",
		"POSTLINE_SHUTDOWN_TIMEOUT":   "10s",
	})
	maps.Copy(env, overrides)
	return env
}

// minimalEnv returns only what points a worker named name at this stack's
// services; every other setting keeps its default.
func (s *stack) minimalEnv(name string) map[string]string {
	return map[string]string{
		"POSTLINE_KAFKA_BROKERS":      strings.Join(testenv.KafkaBrokers(), ","),
		"POSTLINE_JOBS_TOPIC":         s.jobs,
		"POSTLINE_DLQ_TOPIC":          s.dlq,
		"POSTLINE_EVENTS_TOPIC":       s.events,
		"POSTLINE_RETRY_TOPIC_PREFIX": s.retryPrefix,
		"POSTLINE_CONSUMER_GROUP":     s.group,
		"POSTLINE_DATABASE_URL":       s.dbURL,
		"POSTLINE_SMTP_HOST":          s.mail.SMTPHost(),
		"POSTLINE_SMTP_PORT":          strconv.Itoa(s.mail.SMTPPort()),
		// Mailpit accepts any AUTH: the canary password is sent and must
		// never show (see secrets_test.go).
		"POSTLINE_SMTP_USERNAME": smtpUser,
		"POSTLINE_SMTP_PASSWORD": smtpPassword,
		"POSTLINE_WORKER_ID":     name,
		"POSTLINE_HTTP_ADDR":     "127.0.0.1:0",
		"POSTLINE_LOG_LEVEL":     "info",
	}
}

// newJobs returns n valid jobs with fresh Message-IDs.
func newJobs(n int, tag string) []job.Job {
	jobs := make([]job.Job, n)
	for i := range jobs {
		jobs[i] = job.Job{
			Version:   job.SchemaVersion,
			MessageID: job.NewMessageID(messageIDDomain),
			From:      "Postline E2E <sender@example.test>",
			To:        []string{fmt.Sprintf("rcpt-%d@example.test", i)},
			Subject:   fmt.Sprintf("%s %d", tag, i),
			Text:      fmt.Sprintf("Hello from the %s test, mail %d. %s\n", tag, i, bodyCanary),
		}
	}
	return jobs
}

// publish publishes jobs in one call and returns their Message-IDs.
func (s *stack) publish(jobs ...job.Job) []string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids, err := s.pub.Publish(ctx, jobs...)
	if err != nil {
		s.t.Fatalf("publish %d jobs: %v", len(jobs), err)
	}
	return ids
}

// statusCounts counts the rows per status, reading Postgres directly.
func (s *stack) statusCounts(ctx context.Context) (map[string]int, error) {
	rows, err := s.db.Query(ctx, "SELECT status, count(*) FROM postline_messages GROUP BY status")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := make(map[string]int)
	for rows.Next() {
		var (
			st string
			n  int
		)
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		counts[st] = n
	}
	return counts, rows.Err()
}

// sentCount is the number of rows in status sent; -1 when the query fails
// (the table may not exist before the worker migrated).
func (s *stack) sentCount(ctx context.Context) int {
	counts, err := s.statusCounts(ctx)
	if err != nil {
		return -1
	}
	return counts["sent"]
}

// statuses returns the status of each of ids that has a row.
func (s *stack) statuses(ctx context.Context, ids []string) (map[string]string, error) {
	rows, err := s.db.Query(ctx, "SELECT message_id, status FROM postline_messages WHERE message_id = ANY($1)", ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]string, len(ids))
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, rows.Err()
}

// waitSent waits until n rows are sent.
func (s *stack) waitSent(n int, timeout time.Duration) {
	s.t.Helper()
	testkit.Eventually(s.t, timeout, fmt.Sprintf("%d rows sent", n), func(ctx context.Context) (bool, string) {
		counts, err := s.statusCounts(ctx)
		if err != nil {
			return false, err.Error()
		}
		return counts["sent"] >= n, fmt.Sprintf("rows by status %v", counts)
	})
}

// kafkaClient returns a client for admin requests.
func kafkaClient() *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(testenv.KafkaBrokers()...), Timeout: 10 * time.Second}
}

// committed returns the group's committed offset per partition of the jobs
// topic: the next offset to read, or -1 when it has committed none.
func (s *stack) committed(ctx context.Context) (map[int]int64, error) {
	partitions := make([]int, jobsPartitions)
	out := make(map[int]int64, jobsPartitions)
	for p := range partitions {
		partitions[p] = p
		out[p] = -1
	}
	res, err := kafkaClient().OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: s.group,
		Topics:  map[string][]int{s.jobs: partitions},
	})
	if err == nil {
		err = res.Error
	}
	switch {
	case errors.Is(err, kafka.GroupIdNotFound):
		return out, nil
	case err != nil:
		return nil, fmt.Errorf("offset fetch for group %s: %w", s.group, err)
	}
	for _, p := range res.Topics[s.jobs] {
		if p.Error != nil {
			return nil, fmt.Errorf("offset fetch for group %s partition %d: %w", s.group, p.Partition, p.Error)
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out, nil
}

// offsetRange is the first and next offset of a partition.
type offsetRange struct{ Start, End int64 }

// partitionRanges returns the offset range of every partition of name.
func partitionRanges(ctx context.Context, name string) (map[int]offsetRange, error) {
	infos, err := topic.Describe(ctx, testenv.Kafka(), name)
	if err != nil {
		return nil, err
	}
	out := make(map[int]offsetRange)
	for _, p := range infos[0].Partitions {
		out[p.ID] = offsetRange{Start: p.StartOffset, End: p.EndOffset}
	}
	return out, nil
}

// waitCommittedToEnd waits until the group has committed every partition of
// the jobs topic up to its end (an empty partition needs no commit): every
// published record is finished.
func (s *stack) waitCommittedToEnd(timeout time.Duration) {
	s.t.Helper()
	testkit.Eventually(s.t, timeout, "committed offsets at the end of every partition", func(ctx context.Context) (bool, string) {
		ranges, err := partitionRanges(ctx, s.jobs)
		if err != nil {
			return false, err.Error()
		}
		got, err := s.committed(ctx)
		if err != nil {
			return false, err.Error()
		}
		for p, r := range ranges {
			if got[p] != r.End && !(got[p] < 0 && r.Start == r.End) {
				return false, fmt.Sprintf("committed %v, offset ranges %v", got, ranges)
			}
		}
		return true, ""
	})
}

// readRecords reads n records of partition from offset with a reader that
// belongs to no group.
func readRecords(ctx context.Context, name string, partition int, from int64, n int) ([]kafka.Message, error) {
	if n == 0 {
		return nil, nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   testenv.KafkaBrokers(),
		Topic:     name,
		Partition: partition,
		MinBytes:  1,
		MaxBytes:  8 << 20,
		MaxWait:   200 * time.Millisecond,
	})
	defer r.Close()
	if err := r.SetOffset(from); err != nil {
		return nil, err
	}
	msgs := make([]kafka.Message, 0, n)
	for len(msgs) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			return msgs, fmt.Errorf("read %s/%d: got %d of %d records: %w", name, partition, len(msgs), n, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// offsetIndex maps partition and offset of the jobs topic to the record's
// key (the Message-ID).
type offsetIndex map[int]map[int64]string

// indexJobs reads the whole jobs topic and indexes its records' keys.
func (s *stack) indexJobs() offsetIndex {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ranges, err := partitionRanges(ctx, s.jobs)
	if err != nil {
		s.t.Fatalf("index jobs topic: %v", err)
	}
	idx := make(offsetIndex, len(ranges))
	for p, r := range ranges {
		msgs, err := readRecords(ctx, s.jobs, p, r.Start, int(r.End-r.Start))
		if err != nil {
			s.t.Fatalf("index jobs topic: %v", err)
		}
		idx[p] = make(map[int64]string, len(msgs))
		for _, m := range msgs {
			idx[p][m.Offset] = string(m.Key)
		}
	}
	return idx
}

// checkCommittedRecorded reads the group's committed offsets and checks, in
// Postgres directly, that every record below them has a terminal row:
// nothing was committed without a recorded fate. It returns the offsets.
func (s *stack) checkCommittedRecorded(ctx context.Context, idx offsetIndex) (map[int]int64, error) {
	committed, err := s.committed(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for p, c := range committed {
		for off := int64(0); off < c; off++ {
			id, ok := idx[p][off]
			if !ok {
				return nil, fmt.Errorf("partition %d committed at %d, but offset %d is not a published record", p, c, off)
			}
			ids = append(ids, id)
		}
	}
	st, err := s.statuses(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	var bad []string
	for p, c := range committed {
		for off := int64(0); off < c; off++ {
			id := idx[p][off]
			if got := st[id]; got != "sent" && got != "failed" && got != "dead" {
				bad = append(bad, fmt.Sprintf("%d/%d %s status %q", p, off, id, got))
			}
		}
	}
	if len(bad) > 0 {
		return committed, fmt.Errorf("committed offsets %v cover %d records without a terminal row, first: %v",
			committed, len(bad), bad[:min(len(bad), 5)])
	}
	return committed, nil
}

// mailbox is what Mailpit received, compared with the expected Message-IDs.
type mailbox struct {
	Total      int
	Distinct   int
	Duplicates int // Total - Distinct: extra copies
	Missing    []string
	Unexpected []string
}

func (m mailbox) String() string {
	return fmt.Sprintf("%d messages, %d distinct Message-IDs, %d duplicate copies, %d missing (first %v), %d unexpected (first %v)",
		m.Total, m.Distinct, m.Duplicates, len(m.Missing), m.Missing[:min(len(m.Missing), 3)],
		len(m.Unexpected), m.Unexpected[:min(len(m.Unexpected), 3)])
}

// mailbox waits until Mailpit holds at least len(want) messages and compares
// them with want.
func (s *stack) mailbox(want []string) mailbox {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.mail.WaitCount(ctx, len(want)); err != nil {
		s.t.Fatalf("mailpit: %v", err)
	}
	got, err := s.mail.MessageIDs(ctx)
	if err != nil {
		s.t.Fatalf("mailpit: %v", err)
	}
	seen := make(map[string]int, len(got))
	for _, id := range got {
		seen[strings.Trim(id, "<>")]++
	}
	wanted := make(map[string]bool, len(want))
	m := mailbox{Total: len(got), Distinct: len(seen), Duplicates: len(got) - len(seen)}
	for _, id := range want {
		wanted[id] = true
		if seen[id] == 0 {
			m.Missing = append(m.Missing, id)
		}
	}
	for id := range seen {
		if !wanted[id] {
			m.Unexpected = append(m.Unexpected, id)
		}
	}
	return m
}

// dlqRecord is a dead letter as read back.
type dlqRecord struct {
	kafka.Message
	Reason string
}

// readDLQ reads the first n dead letters within timeout.
func (s *stack) readDLQ(n int, timeout time.Duration) []dlqRecord {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msgs, err := readRecords(ctx, s.dlq, 0, kafka.FirstOffset, n)
	if err != nil {
		s.t.Fatalf("dead letters: %v", err)
	}
	checkNoSecretHeaders(s.t, s.dlq, msgs)
	out := make([]dlqRecord, len(msgs))
	for i, m := range msgs {
		out[i] = dlqRecord{Message: m, Reason: testkit.Header(m.Headers, jobheader.KeyDLQReason)}
	}
	return out
}

// throughout checks cond on every poll for the whole of d, failing t on the
// first error: it observes that something holds over a window, such as
// readiness staying false while Postgres is down.
func throughout(t *testing.T, d time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(4 * pollEvery)
	defer tick.Stop()
	for polls := 1; ; polls++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cond(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: poll %d: %v", what, polls, err)
		}
		if time.Now().After(end) {
			return
		}
		<-tick.C
	}
}

// workerProc is a worker process started by startWorker.
type workerProc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	logPath string
	addr    string        // host:port of /metrics, /healthz and /readyz
	exited  chan struct{} // closed once the process exited and its output is copied
	state   *os.ProcessState
	client  *http.Client
	leaks   leakSet // secrets seen in its /metrics, reported at cleanup
}

// startWorker runs the worker binary with env (and the test process's
// environment without its POSTLINE_* variables), logging to a file in
// t.TempDir(), and waits until its HTTP server listens. The process is
// killed when the test ends; the tail of its log is printed if the test
// failed.
func startWorker(t *testing.T, env map[string]string) *workerProc {
	t.Helper()
	return startProcess(t, workerBin, env["POSTLINE_WORKER_ID"], env)
}

// startProcess is startWorker for any binary that logs its HTTP address in
// a "worker starting" or "retry-scheduler starting" line (both binaries
// share the HTTP endpoints); name names the process in logs and failures.
func startProcess(t *testing.T, bin, name string, env map[string]string) *workerProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("worker %s: %v", name, err)
	}
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POSTLINE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		t.Fatalf("worker %s: %v", name, err)
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start worker %s: %v", name, err)
	}
	w := &workerProc{
		t: t, name: name, cmd: cmd, logPath: logPath,
		exited: make(chan struct{}),
		client: &http.Client{Timeout: 5 * time.Second},
	}

	addrs := make(chan string, 1)
	go func() {
		// Copy the JSON log to the file and spot the listening address;
		// then reap the process (Wait only after the pipe is drained).
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = logFile.Write(line)
			_, _ = logFile.Write([]byte{'\n'})
			if addr := listeningAddr(line); addr != "" {
				select {
				case addrs <- addr:
				default:
				}
			}
		}
		_, _ = io.Copy(logFile, stdout)
		_ = cmd.Wait()
		w.state = cmd.ProcessState
		_ = logFile.Close()
		close(w.exited)
	}()
	t.Cleanup(func() {
		if w.running() {
			w.scrapeForSecrets()
			_ = cmd.Process.Kill()
		}
		<-w.exited
		if log, err := os.ReadFile(logPath); err == nil {
			if i := bytes.Index(log, []byte("WARNING: DATA RACE")); i >= 0 {
				report := log[i:]
				if j := bytes.Index(report, []byte("\n==================")); j >= 0 {
					report = report[:j]
				}
				t.Errorf("worker %s reported a data race:\n%s", name, report)
			}
			checkNoSecrets(t, "the log of "+name, log)
		}
		w.leaks.report(t)
		if t.Failed() {
			t.Logf("worker %s: exit %v; last lines of %s:\n%s", name, w.state, logPath, tail(logPath, 40))
		}
	})

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case w.addr = <-addrs:
	case <-w.exited:
		t.Fatalf("worker %s exited at start (%v):\n%s", name, w.state, tail(logPath, 40))
	case <-timer.C:
		t.Fatalf("worker %s did not log its HTTP address within %s:\n%s", name, startTimeout, tail(logPath, 40))
	}
	return w
}

// startLines are the log lines in which the binaries name their HTTP
// address.
var startLines = []string{"worker starting", "retry-scheduler starting", "bounce-receiver starting", "webhook-dispatcher starting", "console starting"}

// listeningAddr returns the http_addr of a binary's start line (see
// startLines), or "" for any other line.
func listeningAddr(line []byte) string {
	if !bytes.Contains(line, []byte(` starting"`)) {
		return ""
	}
	var rec struct {
		Msg      string `json:"msg"`
		HTTPAddr string `json:"http_addr"`
	}
	if json.Unmarshal(line, &rec) != nil || !slices.Contains(startLines, rec.Msg) {
		return ""
	}
	return rec.HTTPAddr
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return redactSecrets(strings.Join(lines[max(0, len(lines)-n):], "\n"))
}

func (w *workerProc) running() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// get fetches path from the worker's HTTP server.
func (w *workerProc) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if path == "/metrics" {
		w.leaks.note("the /metrics of "+w.name, body)
	}
	return resp.StatusCode, body, err
}

// Ready asks /readyz: true when it answers 200, and the reason it gave.
func (w *workerProc) Ready(ctx context.Context) (bool, string) {
	code, body, err := w.get(ctx, "/readyz")
	if err != nil {
		return false, err.Error()
	}
	return code == http.StatusOK, strings.TrimSpace(string(body))
}

// Healthy asks /healthz.
func (w *workerProc) Healthy(ctx context.Context) bool {
	code, _, err := w.get(ctx, "/healthz")
	return err == nil && code == http.StatusOK
}

// WaitReady waits until /readyz answers 200, failing the test if the worker
// exits or timeout passes.
func (w *workerProc) WaitReady(timeout time.Duration) {
	w.t.Helper()
	testkit.Eventually(w.t, timeout, "worker "+w.name+" ready", func(ctx context.Context) (bool, string) {
		if !w.running() {
			w.t.Fatalf("worker %s exited (%v) before it was ready", w.name, w.state)
		}
		return w.Ready(ctx)
	})
}

// Metric scrapes /metrics and returns the sum of the samples of the counter,
// gauge or untyped metric name whose labels include every name=value pair
// of labels.
func (w *workerProc) Metric(ctx context.Context, name string, labels ...string) (float64, error) {
	families, err := w.families(ctx)
	if err != nil {
		return 0, err
	}
	return metricSum(families, w.name, name, labels...)
}

// metricSum is the sum of the series of name in families (worker's scrape)
// whose labels include every pair of labels.
func metricSum(families map[string]*dto.MetricFamily, worker, name string, labels ...string) (float64, error) {
	fam, ok := families[name]
	if !ok {
		return 0, fmt.Errorf("worker %s exposes no metric %s", worker, name)
	}
	var sum float64
next:
	for _, m := range fam.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, nil
}

func (w *workerProc) mustMetric(name string, labels ...string) float64 {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := w.Metric(ctx, name, labels...)
	if err != nil {
		w.t.Fatal(err)
	}
	return v
}

// Kill sends SIGKILL and waits for the process to die.
func (w *workerProc) Kill() {
	w.t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil && w.running() {
		w.t.Fatalf("kill worker %s: %v", w.name, err)
	}
	<-w.exited
}

// terminateWait bounds Terminate: a worker that ignores SIGTERM this long is
// a hang, not a slow shutdown.
const terminateWait = 2 * time.Minute

// Terminate sends SIGTERM and waits for the process to exit; it returns the
// exit code and the time from the signal to the exit.
func (w *workerProc) Terminate() (exitCode int, elapsed time.Duration) {
	w.t.Helper()
	w.scrapeForSecrets()
	start := time.Now()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		w.t.Fatalf("SIGTERM worker %s: %v", w.name, err)
	}
	timer := time.NewTimer(terminateWait)
	defer timer.Stop()
	select {
	case <-w.exited:
	case <-timer.C:
		w.Kill()
		w.t.Fatalf("worker %s still running %s after SIGTERM; killed", w.name, terminateWait)
	}
	return w.state.ExitCode(), time.Since(start)
}

// waitOwnPartitions waits until every one of workers owns partitions of the
// jobs topic, so the load that follows is shared by all of them.
func waitOwnPartitions(t *testing.T, workers ...*workerProc) {
	t.Helper()
	testkit.Eventually(t, readyTimeout, "every worker owns partitions", func(ctx context.Context) (bool, string) {
		var status []string
		for _, w := range workers {
			parts, err := w.Metric(ctx, "postline_consumer_assigned_partitions")
			if err != nil || parts == 0 {
				return false, fmt.Sprintf("%s: %v partitions (%v)", w.name, parts, err)
			}
			status = append(status, fmt.Sprintf("%s: %v", w.name, parts))
		}
		return true, strings.Join(status, ", ")
	})
}
