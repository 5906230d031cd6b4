package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// fastTiers are the delay tiers of the failure tests: short, so that a
// retry comes back within seconds.
const fastTiers = "1s,2s,4s"

// failureStack is a stack with its own delay topics and scheduler group, for
// the tests of failure handling (issue 3).
type failureStack struct {
	*stack
	prefix     string      // POSTLINE_RETRY_TOPIC_PREFIX
	tiers      retry.Tiers // POSTLINE_RETRY_TIERS
	schedGroup string      // POSTLINE_SCHEDULER_GROUP
}

// newFailureStack carves out a stack plus one single-partition delay topic
// per tier of tiers (deleted when the test ends).
func newFailureStack(t *testing.T, tiers string) *failureStack {
	t.Helper()
	s := newStack(t)
	if schedulerBin == "" || postctlBin == "" {
		t.Fatal("the retry-scheduler or postctl binary was not built")
	}
	tt, err := retry.ParseTiers(tiers)
	if err != nil {
		t.Fatal(err)
	}
	fs := &failureStack{
		stack:      s,
		prefix:     testenv.UniqueName("e2e.retry"),
		tiers:      tt,
		schedGroup: testenv.UniqueName("e2e-sched"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := topic.Ensure(ctx, testenv.Kafka(), retry.TopicSpecs(fs.prefix, tt, 1)...); err != nil {
		t.Fatalf("create delay topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.Kafka(), tt.Topics(fs.prefix)...); err != nil {
			t.Logf("delete delay topics: %v", err)
		}
	})
	return fs
}

// failEnv is the environment of a worker named name that sends through
// relays (a POSTLINE_SMTP_RELAYS value) and retries through this stack's
// delay topics, with short circuit cool-downs; overrides apply last.
func (s *failureStack) failEnv(name, relays string, overrides map[string]string) map[string]string {
	env := s.workerEnv(name, map[string]string{
		"POSTLINE_SMTP_RELAYS":          s.withMailpitAuth(relays),
		"POSTLINE_RETRY_TOPIC_PREFIX":   s.prefix,
		"POSTLINE_RETRY_TIERS":          s.tiers.String(),
		"POSTLINE_CIRCUIT_COOLDOWN":     "1s",
		"POSTLINE_CIRCUIT_MAX_COOLDOWN": "4s",
		"POSTLINE_CIRCUIT_REFRESH":      "500ms",
		"POSTLINE_SENDERS":              "4",
	})
	maps.Copy(env, overrides)
	return env
}

// withMailpitAuth gives each entry of relays that is this stack's Mailpit
// (relayURL's form) the canary SMTP credentials of secrets_test.go: Mailpit
// accepts any AUTH, so the failure suites run with an SMTP password in a
// relay URL, percent-encoded, which no output may show.
func (s *failureStack) withMailpitAuth(relays string) string {
	parts := strings.Split(relays, ",")
	for i, p := range parts {
		if rest, ok := strings.CutPrefix(p, "smtp://"+s.mail.SMTPAddr()+"?"); ok {
			parts[i] = "smtp://" + smtpUserinfo() + "@" + s.mail.SMTPAddr() + "?" + rest
		}
	}
	return strings.Join(parts, ",")
}

// startFailWorker starts a worker with failEnv and waits until it is ready.
func (s *failureStack) startFailWorker(name, relays string, overrides map[string]string) *workerProc {
	s.t.Helper()
	w := startWorker(s.t, s.failEnv(name, relays, overrides))
	w.WaitReady(readyTimeout)
	return w
}

// startScheduler starts a retry-scheduler on this stack's delay topics and
// waits until it is ready (a member of its group).
func (s *failureStack) startScheduler(name string) *workerProc {
	s.t.Helper()
	env := map[string]string{
		"POSTLINE_KAFKA_BROKERS":        strings.Join(testenv.KafkaBrokers(), ","),
		"POSTLINE_JOBS_TOPIC":           s.jobs,
		"POSTLINE_DLQ_TOPIC":            s.dlq,
		"POSTLINE_RETRY_TOPIC_PREFIX":   s.prefix,
		"POSTLINE_RETRY_TIERS":          s.tiers.String(),
		"POSTLINE_SCHEDULER_GROUP":      s.schedGroup,
		"POSTLINE_SCHEDULER_MAX_JITTER": "100ms",
		"POSTLINE_SESSION_TIMEOUT":      "6s",
		"POSTLINE_HEARTBEAT_INTERVAL":   "500ms",
		"POSTLINE_SCHEDULER_HTTP_ADDR":  "127.0.0.1:0",
		"POSTLINE_SHUTDOWN_TIMEOUT":     "5s",
		"POSTLINE_LOG_LEVEL":            "info",
	}
	p := startProcess(s.t, schedulerBin, name, env)
	p.WaitReady(readyTimeout)
	return p
}

// tierTopic is the delay topic of tier.
func (s *failureStack) tierTopic(tier time.Duration) string { return retry.TopicName(s.prefix, tier) }

// tierRecords reads every record in the delay topic of tier (one
// partition).
func (s *failureStack) tierRecords(ctx context.Context, tier time.Duration) ([]kafka.Message, error) {
	name := s.tierTopic(tier)
	ranges, err := partitionRanges(ctx, name)
	if err != nil {
		return nil, err
	}
	var out []kafka.Message
	for p, r := range ranges {
		msgs, err := readRecords(ctx, name, p, r.Start, int(r.End-r.Start))
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
	}
	return out, nil
}

// tierVolume returns the number of records ever written to each delay
// topic, by tier.
func (s *failureStack) tierVolume(ctx context.Context) (map[time.Duration]int64, error) {
	out := make(map[time.Duration]int64, len(s.tiers))
	for _, tier := range s.tiers {
		ranges, err := partitionRanges(ctx, s.tierTopic(tier))
		if err != nil {
			return nil, err
		}
		for _, r := range ranges {
			out[tier] += r.End
		}
	}
	return out, nil
}

// relayURL is a POSTLINE_SMTP_RELAYS entry for a plaintext loopback relay.
func relayURL(name, addr string, priority int) string {
	return fmt.Sprintf("smtp://%s?name=%s&priority=%d&tls=none", addr, name, priority)
}

// taggedJobs returns n valid jobs of priority whose recipients are
// "<tag>-<i>@example.test", so a smtptest script can tell them apart by
// RCPT.
func taggedJobs(n int, tag string, priority job.Priority) []job.Job {
	jobs := newJobs(n, tag)
	for i := range jobs {
		jobs[i].To = []string{rcptOf(tag, i)}
		jobs[i].Priority = priority
	}
	return jobs
}

// rcptOf is the recipient of taggedJobs' job i.
func rcptOf(tag string, i int) string { return fmt.Sprintf("%s-%d@example.test", tag, i) }

// msgRow is the part of a postline_messages row the failure tests check.
type msgRow struct {
	Status     string
	Attempt    int
	Provider   string
	ErrorClass string
}

// rows reads the rows of ids, by Message-ID.
func (s *stack) rows(ctx context.Context, ids []string) (map[string]msgRow, error) {
	rs, err := s.db.Query(ctx, `SELECT message_id, status, attempt, coalesce(provider, ''), coalesce(error_class, '')
		FROM postline_messages WHERE message_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := make(map[string]msgRow, len(ids))
	for rs.Next() {
		var (
			id string
			r  msgRow
		)
		if err := rs.Scan(&id, &r.Status, &r.Attempt, &r.Provider, &r.ErrorClass); err != nil {
			return nil, err
		}
		out[id] = r
	}
	return out, rs.Err()
}

// waitRows waits until every row of ids satisfies done, and returns them.
func (s *stack) waitRows(ids []string, timeout time.Duration, what string, done func(msgRow) bool) map[string]msgRow {
	s.t.Helper()
	var got map[string]msgRow
	testkit.Eventually(s.t, timeout, what, func(ctx context.Context) (bool, string) {
		rows, err := s.rows(ctx, ids)
		if err != nil {
			return false, err.Error()
		}
		got = rows
		pending := 0
		var first string
		for _, id := range ids {
			if r, ok := rows[id]; !ok || !done(r) {
				if pending == 0 {
					first = fmt.Sprintf("%s: %+v (row found: %v)", id, r, ok)
				}
				pending++
			}
		}
		return pending == 0, fmt.Sprintf("%d of %d rows pending, first %s", pending, len(ids), first)
	})
	return got
}

// statusIs returns a waitRows condition on the status.
func statusIs(status string) func(msgRow) bool {
	return func(r msgRow) bool { return r.Status == status }
}

// switchScript is a smtptest script that a test can replace while the
// server runs (a relay that starts failing, or recovers).
type switchScript struct {
	f atomic.Pointer[smtptest.ScriptFunc]
}

func newSwitchScript(f smtptest.ScriptFunc) *switchScript {
	s := &switchScript{}
	s.Set(f)
	return s
}

// Set makes f decide the replies from now on.
func (s *switchScript) Set(f smtptest.ScriptFunc) { s.f.Store(&f) }

// Script is the ScriptFunc to install with smtptest.WithScript.
func (s *switchScript) Script(c smtptest.Command) *smtptest.Reply {
	if f := s.f.Load(); f != nil && *f != nil {
		return (*f)(c)
	}
	return nil
}

// acceptAll lets every command through.
func acceptAll(smtptest.Command) *smtptest.Reply { return nil }

// commandLog records the commands a script saw, with their times.
type commandLog struct {
	mu   sync.Mutex
	seen map[string][]time.Time // verb + " " + arg -> times
}

// record notes c; use it at the top of a script.
func (l *commandLog) record(c smtptest.Command) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = make(map[string][]time.Time)
	}
	k := c.Verb + " " + c.Arg
	l.seen[k] = append(l.seen[k], time.Now())
}

// times returns when verb arg was seen.
func (l *commandLog) times(verb, arg string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen[verb+" "+arg])
}

// receivedCounts counts the accepted messages per Message-ID over servers.
func receivedCounts(servers ...*smtptest.Server) map[string]int {
	out := make(map[string]int)
	for _, srv := range servers {
		for _, m := range srv.Messages() {
			out[m.MessageID]++
		}
	}
	return out
}

// checkOnce fails t unless every id arrived exactly once over servers and
// nothing else arrived.
func checkOnce(t *testing.T, ids []string, servers ...*smtptest.Server) {
	t.Helper()
	counts := receivedCounts(servers...)
	var missing, dup []string
	for _, id := range ids {
		switch n := counts[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			dup = append(dup, fmt.Sprintf("%s x%d", id, n))
		}
		delete(counts, id)
	}
	if len(missing) > 0 || len(dup) > 0 || len(counts) > 0 {
		t.Fatalf("want each of %d Message-IDs once: %d missing (first %v), %d duplicated (first %v), %d unexpected",
			len(ids), len(missing), missing[:min(3, len(missing))], len(dup), dup[:min(3, len(dup))], len(counts))
	}
}

// families scrapes /metrics of w.
func (w *workerProc) families(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	code, body, err := w.get(ctx, "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", w.name, err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: HTTP %d", w.name, code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(bytes.NewReader(body))
}

// histogramQuantile estimates the q-quantile of the histogram name summed
// over all its label sets, as PromQL's histogram_quantile does (linear
// interpolation inside the bucket). It returns NaN when the histogram holds
// no observation, and the number of observations.
func histogramQuantile(fams map[string]*dto.MetricFamily, name string, q float64) (float64, uint64, error) {
	fam, ok := fams[name]
	if !ok {
		return 0, 0, fmt.Errorf("no metric %s", name)
	}
	cum := make(map[float64]uint64)
	var count uint64
	for _, m := range fam.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			return 0, 0, fmt.Errorf("metric %s is not a histogram", name)
		}
		count += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			cum[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	if count == 0 {
		return math.NaN(), 0, nil
	}
	bounds := slices.Collect(maps.Keys(cum))
	sort.Float64s(bounds)
	rank := q * float64(count)
	lower, below := 0.0, uint64(0)
	for _, ub := range bounds {
		if float64(cum[ub]) >= rank {
			inBucket := cum[ub] - below
			if inBucket == 0 {
				return ub, count, nil
			}
			return lower + (ub-lower)*(rank-float64(below))/float64(inBucket), count, nil
		}
		lower, below = ub, cum[ub]
	}
	// Above the largest finite bucket: report its bound, as PromQL does.
	return lower, count, nil
}

// postctl runs the postctl binary against this stack and returns its
// stdout; a non-zero exit fails the test.
func (s *failureStack) postctl(args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{
		"--brokers", strings.Join(testenv.KafkaBrokers(), ","),
		"--database-url", s.dbURL,
		"--topic", s.jobs,
		"--dlq-topic", s.dlq,
	}
	cmd := exec.CommandContext(ctx, postctlBin, append(args, base...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	checkNoSecrets(s.t, "the output of postctl "+strings.Join(args[:min(len(args), 2)], " "), append(stdout.Bytes(), stderr.Bytes()...))
	out, errOut := redactSecrets(stdout.String()), redactSecrets(stderr.String())
	if err != nil {
		s.t.Fatalf("postctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	s.t.Logf("postctl %s: %s%s", strings.Join(args, " "), out, errOut)
	return stdout.String()
}

// headerInt parses an integer header of m; -1 when missing or malformed.
func headerInt(m kafka.Message, key string) int {
	n, err := strconv.Atoi(testkit.Header(m.Headers, key))
	if err != nil {
		return -1
	}
	return n
}
