package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestRunRejectsBadSettings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"tiers", map[string]string{"POSTLINE_RETRY_TIERS": "30s,5s"}, nil, "setting POSTLINE_RETRY_TIERS: retry tiers \"30s,5s\": tier 5s follows the larger tier 30s"},
		{"tiers flag", nil, []string{"--retry-tiers", "5s,5s"}, "setting POSTLINE_RETRY_TIERS"},
		{"unparsable duration", map[string]string{"POSTLINE_SCHEDULER_MAX_JITTER": "soon"}, nil, "setting POSTLINE_SCHEDULER_MAX_JITTER (--scheduler-max-jitter): invalid value \"soon\""},
		{"negative jitter", map[string]string{"POSTLINE_SCHEDULER_MAX_JITTER": "-1s"}, nil, "setting POSTLINE_SCHEDULER_MAX_JITTER: -1s must not be negative"},
		{"shutdown timeout", map[string]string{"POSTLINE_SHUTDOWN_TIMEOUT": "0s"}, nil, "setting POSTLINE_SHUTDOWN_TIMEOUT: 0s must be positive"},
		{"heartbeat", map[string]string{"POSTLINE_HEARTBEAT_INTERVAL": "20s"}, nil, "setting POSTLINE_HEARTBEAT_INTERVAL"},
		{"session", map[string]string{"POSTLINE_SESSION_TIMEOUT": "-1s"}, nil, "setting POSTLINE_SESSION_TIMEOUT"},
		{"jobs topic is a delay topic", map[string]string{"POSTLINE_JOBS_TOPIC": "mail.retry.5s"}, nil, "setting POSTLINE_JOBS_TOPIC"},
		{"log level", map[string]string{"POSTLINE_LOG_LEVEL": "loud"}, nil, "setting POSTLINE_LOG_LEVEL: invalid value \"loud\""},
		{"http addr", map[string]string{"POSTLINE_SCHEDULER_HTTP_ADDR": "256.0.0.1:x"}, nil, "setting POSTLINE_SCHEDULER_HTTP_ADDR"},
		{"argument", nil, []string{"extra"}, "unexpected argument \"extra\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), tt.args, env(tt.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, env(nil), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run -h = %v, want flag.ErrHelp", err)
	}
	for _, s := range []string{"POSTLINE_RETRY_TIERS", "5s,30s,2m,10m,1h,6h", "POSTLINE_SCHEDULER_HTTP_ADDR", ":8082", "POSTLINE_SCHEDULER_GROUP", "postline-retry-scheduler"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("usage lacks %q", s)
		}
	}
}

func TestCmpJitter(t *testing.T) {
	for _, tt := range []struct{ in, want time.Duration }{{0, -1}, {time.Second, time.Second}, {5 * time.Millisecond, 5 * time.Millisecond}} {
		if got := cmpJitter(tt.in); got != tt.want {
			t.Errorf("cmpJitter(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// buildBinary builds ./cmd/retry-scheduler from the module root into dir.
func buildBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("find module root (go list -m): %v", err)
	}
	root := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	bin := filepath.Join(t.TempDir(), "retry-scheduler")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/retry-scheduler")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/retry-scheduler: %v\n%s", err, out)
	}
	return bin
}

// process is one running retry-scheduler binary.
type process struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result, once exited is closed
}

func startBinary(t *testing.T, bin, name string, env map[string]string) *process {
	t.Helper()
	addr := freeAddr(t)
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POSTLINE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "POSTLINE_SCHEDULER_HTTP_ADDR="+addr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{cmd: cmd, addr: addr, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return p
}

func (p *process) get(path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get("http://" + p.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// jobsReader reads the jobs topic and counts copies per key.
type jobsReader struct {
	mu    sync.Mutex
	byKey map[string][]consumer.Message
	early []string // keys that arrived before their not-before
}

func (r *jobsReader) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byKey)
}

func readJobs(t *testing.T, name string) *jobsReader {
	t.Helper()
	c, err := consumer.New(consumer.Config{
		Kafka: testenv.Kafka(), Topic: name, GroupID: testenv.UniqueName("reader"),
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond, DrainTimeout: time.Second,
		MaxWait: 50 * time.Millisecond,
	}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &jobsReader{byKey: make(map[string][]consumer.Message)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for m := range c.Messages() {
			now := time.Now()
			r.mu.Lock()
			r.byKey[string(m.Key)] = append(r.byKey[string(m.Key)], m)
			if nb, ok := jobheader.NotBefore(m.Headers); !ok || now.Before(nb) {
				r.early = append(r.early, string(m.Key))
			}
			r.mu.Unlock()
			c.MarkDone(m)
		}
	})
	wg.Go(func() { _ = c.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

// kill -9 of the scheduler binary while 200 copies fall due over about 3 s:
// a second scheduler in the same group re-injects the rest, none is lost,
// every duplicate is an exact copy, and SIGTERM stops it cleanly.
func TestIntegrationKill9LosesNothing(t *testing.T) {
	testenv.Integration(t, "Kafka")
	const records = 200
	brokers := testenv.KafkaBrokers()
	tiers := retry.Tiers{time.Second, 2 * time.Second, 5 * time.Second}
	prefix, jobs := testenv.UniqueName("retry"), testenv.UniqueName("jobs")
	specs := append(retry.TopicSpecs(prefix, tiers, 4), topic.Defaults(jobs, jobs+".dlq", 4)...)
	for i := range specs {
		specs[i].ReplicationFactor = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := topic.Ensure(ctx, testenv.KafkaCluster(brokers...), specs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		names := make([]string, len(specs))
		for i, s := range specs {
			names[i] = s.Name
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.KafkaCluster(brokers...), names...); err != nil {
			t.Errorf("delete topics: %v", err)
		}
	})
	bin := buildBinary(t)
	got := readJobs(t, jobs)
	env := map[string]string{
		"POSTLINE_KAFKA_BROKERS":      strings.Join(brokers, ","),
		"POSTLINE_JOBS_TOPIC":         jobs,
		"POSTLINE_DLQ_TOPIC":          jobs + ".dlq",
		"POSTLINE_RETRY_TOPIC_PREFIX": prefix,
		"POSTLINE_RETRY_TIERS":        tiers.String(),
		"POSTLINE_SCHEDULER_GROUP":    testenv.UniqueName("sched"),
		"POSTLINE_SESSION_TIMEOUT":    "6s", // the broker's minimum: the killed member's partitions move on soon
		"POSTLINE_HEARTBEAT_INTERVAL": "500ms",
	}
	a := startBinary(t, bin, "a", env)
	testkit.Eventually(t, 60*time.Second, "scheduler a to be ready", func() bool { code, _ := a.get("/readyz"); return code == http.StatusOK })

	w, err := retry.NewWriter(retry.WriterConfig{Kafka: testenv.KafkaCluster(brokers...), Prefix: prefix, Tiers: tiers}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	now := time.Now()
	copies := make([]retry.Copy, records)
	for i := range copies {
		d := 500*time.Millisecond + time.Duration(i)*3*time.Second/records
		copies[i] = retry.Copy{
			Key:       fmt.Appendf(nil, "kill9-%d@retry.test", i),
			Value:     fmt.Appendf(nil, `{"n":%d}`, i),
			Headers:   []kafka.Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}},
			Attempt:   2,
			NotBefore: now.Add(d),
			LastClass: "transient",
			Tier:      tiers.Pick(d),
		}
	}
	if err := w.Publish(ctx, copies...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	testkit.Eventually(t, 30*time.Second, "a third of the copies to be re-injected", func() bool { return got.distinct() >= records/3 })
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	atKill := got.distinct()
	if atKill == records {
		t.Fatal("every copy was re-injected before the kill; the test proves nothing")
	}

	b := startBinary(t, bin, "b", env)
	testkit.Eventually(t, 90*time.Second, "every copy after the restart", func() bool { return got.distinct() == records })
	code, metrics := b.get("/metrics")
	if code != http.StatusOK || !strings.Contains(metrics, "postline_scheduler_lateness_seconds_bucket") ||
		!strings.Contains(metrics, "postline_scheduler_reinjected_total") {
		t.Errorf("/metrics of b: status %d, lacks the scheduler metrics", code)
	}

	got.mu.Lock()
	dups := 0
	for key, ms := range got.byKey {
		for _, m := range ms[1:] {
			dups++
			if !bytes.Equal(m.Value, ms[0].Value) || jobheader.Attempt(m.Headers) != jobheader.Attempt(ms[0].Headers) ||
				!slices.EqualFunc(m.Headers, ms[0].Headers, func(x, y kafka.Header) bool { return x.Key == y.Key && bytes.Equal(x.Value, y.Value) }) {
				t.Errorf("%s: duplicate differs from the first copy", key)
			}
		}
	}
	early := slices.Clone(got.early)
	got.mu.Unlock()
	if len(early) > 0 {
		t.Errorf("%d copies arrived before their not-before time, e.g. %s", len(early), early[0])
	}
	t.Logf("%d of %d copies re-injected before kill -9; all %d after the restart; %d exact duplicates (deduped by the worker's claim)",
		atKill, records, records, dups)

	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.exited:
		if b.err != nil {
			t.Fatalf("scheduler b after SIGTERM: %v, want exit status 0", b.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("scheduler b did not exit within 30s of SIGTERM")
	}
}
