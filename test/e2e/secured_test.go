package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// securedEnv is the environment that points a binary at the stack's
// SASL_SSL listener (SCRAM-SHA-512, the stack's CA) and at Postgres with
// sslmode=verify-full: what a managed cluster asks of the worker.
func securedEnv(t *testing.T, s *stack) map[string]string {
	t.Helper()
	k := testenv.SecureKafka(t)
	return map[string]string{
		"POSTLINE_KAFKA_BROKERS":            strings.Join(k.Brokers, ","),
		"POSTLINE_KAFKA_TLS":                "on",
		"POSTLINE_KAFKA_TLS_CA_FILE":        k.TLS.CAFile,
		"POSTLINE_KAFKA_SASL_MECHANISM":     string(k.SASL.Mechanism),
		"POSTLINE_KAFKA_SASL_USERNAME":      k.SASL.Username,
		"POSTLINE_KAFKA_SASL_PASSWORD_FILE": os.Getenv("POSTLINE_TEST_KAFKA_SASL_PASSWORD_FILE"),
		"POSTLINE_DATABASE_URL":             verifyFullURL(t, s.dbURL, k.TLS.CAFile),
	}
}

// verifyFullURL is dbURL with TLS required and the server's certificate
// and name verified against ca.
func verifyFullURL(t *testing.T, dbURL, ca string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sslmode", "verify-full")
	q.Set("sslrootcert", ca)
	u.RawQuery = q.Encode()
	return u.String()
}

// The worker, the retry scheduler and postctl over the secured stack: jobs
// published over SASL_SSL are delivered, a retry copy goes through the
// scheduler and back, postctl reads status and topics, and no log or output
// holds the SASL password.
func TestSecuredStack(t *testing.T) {
	s := newStack(t)
	sec := securedEnv(t, s)
	secure := testenv.SecureKafka(t)
	cluster, err := kafkaclient.New(secure)
	if err != nil {
		t.Fatal(err)
	}
	tiers := retry.DefaultTiers // newStack made their topics

	env := s.workerEnv("secure-w", sec)
	env["POSTLINE_RETRY_TIERS"] = tiers.String()
	w := startWorker(t, env)
	w.WaitReady(readyTimeout)

	schedEnv := map[string]string{
		"POSTLINE_JOBS_TOPIC":           s.jobs,
		"POSTLINE_DLQ_TOPIC":            s.dlq,
		"POSTLINE_RETRY_TOPIC_PREFIX":   s.retryPrefix,
		"POSTLINE_RETRY_TIERS":          tiers.String(),
		"POSTLINE_SCHEDULER_GROUP":      testenv.UniqueName("e2e-secure-sched"),
		"POSTLINE_SCHEDULER_HTTP_ADDR":  "127.0.0.1:0",
		"POSTLINE_SCHEDULER_MAX_JITTER": "100ms",
		"POSTLINE_SESSION_TIMEOUT":      "6s",
		"POSTLINE_HEARTBEAT_INTERVAL":   "500ms",
	}
	for k, v := range sec {
		if k != "POSTLINE_DATABASE_URL" {
			schedEnv[k] = v
		}
	}
	sched := startProcess(t, schedulerBin, "secure-sched", schedEnv)
	sched.WaitReady(readyTimeout)

	// Publish over SASL_SSL with the producer package.
	pub, err := job.NewPublisher(cluster.Config(), job.PublisherConfig{Topic: s.jobs, MessageIDDomain: messageIDDomain})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ids, err := pub.Publish(ctx, newJobs(20, "secured")...)
	if err != nil {
		t.Fatalf("publish over SASL_SSL: %v", err)
	}

	// One more job, handed to the scheduler as a due retry copy: it must
	// come back through the jobs topic and be sent.
	retried := newJobs(1, "secured-retry")[0]
	retried.MessageID = job.NewMessageID(messageIDDomain)
	value, err := json.Marshal(retried)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := retry.NewWriter(retry.WriterConfig{Kafka: cluster, Prefix: s.retryPrefix, Tiers: tiers}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if err := rw.Publish(ctx, retry.Copy{Key: []byte(retried.MessageID), Value: value, Attempt: 1,
		NotBefore: time.Now(), Tier: tiers[0]}); err != nil {
		t.Fatalf("write a retry copy over SASL_SSL: %v", err)
	}
	ids = append(ids, retried.MessageID)

	if m := s.mailbox(ids); len(m.Missing) > 0 || m.Duplicates > 0 {
		t.Fatalf("mailbox over the secured stack: %+v", m)
	}
	// The scheduler counts a re-injection once the broker's acknowledgement
	// is back, and the worker can read the record, and send it, before
	// that reply has reached a scheduler on a loaded machine.
	testkit.Eventually(t, 30*time.Second, "the scheduler to count the retry copy re-injected", func(ctx context.Context) (bool, string) {
		n, err := sched.Metric(ctx, "postline_scheduler_reinjected_total")
		if err != nil {
			return false, err.Error()
		}
		return n >= 1, fmt.Sprintf("%v re-injected", n)
	})

	// postctl over the same settings.
	out := runPostctl(t, sec, "status", ids[0], "--topic", s.jobs, "--dlq-topic", s.dlq)
	if !strings.Contains(out, "sent") {
		t.Errorf("postctl status over TLS: %s", out)
	}
	out += runPostctl(t, sec, "topics", "describe", "--topic", s.jobs, "--dlq-topic", s.dlq, "--retry-topic-prefix", s.retryPrefix, "--retry-tiers", tiers.String())
	if !strings.Contains(out, s.jobs) {
		t.Errorf("postctl topics describe over SASL_SSL: %s", out)
	}

	if code, _ := w.Terminate(); code != 0 {
		t.Errorf("worker exit code %d", code)
	}
	if code, _ := sched.Terminate(); code != 0 {
		t.Errorf("scheduler exit code %d", code)
	}
	for _, p := range []*workerProc{w, sched} {
		log, err := os.ReadFile(p.logPath)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(log, []byte(secure.SASL.Password)) {
			t.Errorf("the log of %s holds the SASL password", p.name)
		}
	}
	if strings.Contains(out, secure.SASL.Password) {
		t.Error("postctl printed the SASL password")
	}
}

// A wrong password and an untrusted certificate stop the worker at start
// with an error that says which, within seconds: no crash loop inside the
// process, no hang, never ready, and the password is not printed.
func TestSecuredStackRefusals(t *testing.T) {
	s := newStack(t)
	wrongPass := t.TempDir() + "/wrong-password"
	const wrong = "Wr0ng-pa55word-for-the-test"
	if err := os.WriteFile(wrongPass, []byte(wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		override map[string]string
		want     string
	}{
		{"wrong password", map[string]string{"POSTLINE_KAFKA_SASL_PASSWORD_FILE": wrongPass}, "refused the SASL credentials"},
		{"untrusted certificate", map[string]string{"POSTLINE_KAFKA_TLS_CA_FILE": testenv.UntrustedCA(t)}, "certificate is not trusted"},
	}
	schedulerEnv := func(t *testing.T) map[string]string {
		env := map[string]string{
			"POSTLINE_JOBS_TOPIC":          s.jobs,
			"POSTLINE_DLQ_TOPIC":           s.dlq,
			"POSTLINE_RETRY_TOPIC_PREFIX":  s.retryPrefix,
			"POSTLINE_SCHEDULER_HTTP_ADDR": "127.0.0.1:0",
		}
		for k, v := range securedEnv(t, s) {
			if k != "POSTLINE_DATABASE_URL" {
				env[k] = v
			}
		}
		return env
	}
	for _, tt := range tests {
		for _, bin := range []string{"worker", "retry-scheduler"} {
			t.Run(bin+"/"+tt.name, func(t *testing.T) {
				var w *workerProc
				if bin == "worker" {
					env := s.workerEnv("refused", securedEnv(t, s))
					maps.Copy(env, tt.override)
					w = startWorker(t, env)
				} else {
					env := schedulerEnv(t)
					maps.Copy(env, tt.override)
					w = startProcess(t, schedulerBin, "refused-scheduler", env)
				}
				refused(t, w, tt.want, wrong)
			})
		}
	}
}

// refused checks that w, started with Kafka settings the cluster refuses,
// stops within seconds, never ready, with an exit code and a log that say
// why, and no password in the log.
func refused(t *testing.T, w *workerProc, want, wrong string) {
	t.Helper()
	start := time.Now()
	sawReady := false
	for w.running() && time.Since(start) < 45*time.Second {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		if ok, _ := w.Ready(ctx); ok {
			sawReady = true
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
	if w.running() {
		t.Fatalf("%s still runs %s after start: a refusal must end the start", w.name, time.Since(start).Round(time.Second))
	}
	if sawReady {
		t.Errorf("%s reported ready", w.name)
	}
	if code := w.state.ExitCode(); code == 0 {
		t.Errorf("%s: exit code 0, want non-zero", w.name)
	}
	log, _ := os.ReadFile(w.logPath)
	if !bytes.Contains(log, []byte(want)) {
		t.Errorf("the log of %s does not say %q:\n%s", w.name, want, tail(w.logPath, 10))
	}
	if bytes.Contains(log, []byte(wrong)) || bytes.Contains(log, []byte(testenv.SecureKafka(t).SASL.Password)) {
		t.Errorf("the log of %s holds a password", w.name)
	}
}

// runPostctl runs postctl with env (the test's POSTLINE_* variables
// dropped) and returns its output; a failure fails the test.
func runPostctl(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, postctlBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POSTLINE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := stdout.String() + stderr.String()
	checkNoSecrets(t, "the output of postctl "+strings.Join(args[:min(len(args), 2)], " "), []byte(out))
	if err != nil {
		t.Fatalf("postctl %s: %v\n%s", strings.Join(args, " "), err, redactSecrets(out))
	}
	return out
}
