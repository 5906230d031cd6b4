package e2e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/deploy/grafana"
	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/bounce"
	"github.com/postline/postline/internal/report"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/templatestore"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// Scrape jobs of the test's Prometheus: the job names of
// deploy/prometheus/prometheus.yml, which the alert rules match.
const (
	workerJob     = "postline-worker"
	schedulerJob  = "postline-retry-scheduler"
	receiverJob   = "postline-bounce-receiver"
	dispatcherJob = "postline-webhook-dispatcher"
)

// prometheusRateInterval stands in for Grafana's $__rate_interval: four
// scrape intervals of the test's Prometheus (1s), as Grafana computes it.
const prometheusRateInterval = 5 * time.Second

// TestPrometheusSeesEveryDashboardQueryAndAlert proves the dashboards and
// alert rules against a real Prometheus (Debian's package) scraping every
// Postline process under load: a worker and a retry scheduler, whose
// adaptive policy sends 300 jobs through a rate-limited relay
// (bench/relay) that drops a few transactions and rejects a few recipients,
// so that sends, throttling, cuts, retries through the delay tiers and dead
// letters all happen; and the outcome loop, a bounce-receiver (its provider
// webhooks on) and a webhook-dispatcher posting every event to a verifying
// endpoint. After the load, the receiver takes a hard bounce, a complaint
// and a forged report over SMTP, and one more job to the bounced address is
// suppressed at claim. Then:
//   - promlint finds no problem in any process's metrics;
//   - every metric a dashboard query or an alert names exists in a real
//     scrape, and every metric of docs/metrics.md (grafana.Catalogue, kept
//     equal to it by deploy/grafana's tests) is exported by the process
//     the catalogue says serves it;
//   - every dashboard query returns data (a non-NaN sample at some time of
//     the run), and so does each metric-bearing operand of every alert
//     expression (alertOperands: the condition itself is false in a
//     healthy run), and Prometheus evaluates every rule without error.
//
// It takes about 30 seconds: the load must pass through the delay tiers.
func TestPrometheusSeesEveryDashboardQueryAndAlert(t *testing.T) {
	t.Parallel()
	const jobs = 300
	s := newFailureStack(t, fastTiers)
	promBin := prometheusBin(t)
	rulesPath, err := filepath.Abs(filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := readAlertRules(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) == 0 {
		t.Fatalf("no alert rules in %s", rulesPath)
	}

	r, err := relay.Start(relay.Config{Rate: 40, Burst: 10, TransientDrop: 0.05, PermanentReject: 0.05, Seed: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	sched := s.startScheduler("scheduler")
	// The outcome loop: the workers sign per-recipient return paths of
	// domain, which the receiver reads back; the dispatcher posts the
	// events of both to sink.
	const domain = "bounces.e2e.postline.test"
	keys, signer := outcomeKeys(t, domain)
	// Two listeners of the receiver's: distinct ports, asked for together.
	addrs := freeAddrs(t, 2)
	smtpAddr, hooksAddr := addrs[0], addrs[1]
	recv := s.startReceiver(t, domain, keys, smtpAddr, map[string]string{
		// The provider webhooks on, so that their series exist; none is
		// called here (the providerhook tests post real payloads).
		"POSTLINE_HOOKS_ADDR":          hooksAddr,
		"POSTLINE_MAILGUN_SIGNING_KEY": "e2e-mailgun-signing-key",
		"POSTLINE_SES_TOPIC_ARNS":      "arn:aws:sns:eu-west-1:123456789012:e2e-ses",
	})
	sink := newWebhookSink(t)
	disp := s.startDispatcher(t, sink)
	// rate=80 is the fleet rate the worker paces to (so fleet_rate exists);
	// the relay takes only 40/s, so it throttles and the controllers cut.
	relays := fmt.Sprintf("smtp://%s?name=relay&tls=none&max_conns=8&rate=80", r.Addr())
	w := s.startFailWorker("worker", relays, map[string]string{
		"POSTLINE_SENDERS":           "8",
		"POSTLINE_RETRY_POLICY":      "adaptive",
		"POSTLINE_LAG_INTERVAL":      "1s",
		"POSTLINE_CIRCUIT_THRESHOLD": "1000", // throttling must not open the breaker for the whole run
		"POSTLINE_RETRY_BUDGETS":     "urgent=100+5/s,normal=20+5/s,bulk=5+1/s",
		// Dropped transactions go through the delay tiers, not in-process
		// retries: the backoff histogram then grows throughout the run, and
		// its series exist before most observations (rate() cannot see
		// the observation that created a series).
		"POSTLINE_FAST_RETRIES":     "-1",
		"POSTLINE_BOUNCE_DOMAIN":    domain,
		"POSTLINE_RETURN_PATH_KEYS": keys,
	})
	prom := startPrometheus(t, promBin, rulesPath, map[string]*workerProc{
		workerJob: w, schedulerJob: sched, receiverJob: recv, dispatcherJob: disp,
	})
	prom.waitTargetsUp(t)

	// A few of the jobs name a stored template, so that the template
	// panels have compositions to show.
	const templated = 20
	templates := s.templateStore(t)
	v := pushTemplate(t, templates, templatestore.Draft{Name: "dashboards", Subject: "Order {{.order}}", TextBody: "Hello {{.name}}.\n"})
	setLabel(t, templates, "dashboards", "active", v, 0)

	// Their recipients are not the plain jobs' (rcpt-<i>@): a plain job's
	// recipient the relay refuses 550 is suppressed, and a templated job
	// to the same address would end suppressed instead of sent or failed.
	tmpl := templateJobs(templated, "dashboards")
	for i := range tmpl {
		tmpl[i].To = []string{fmt.Sprintf("templated-%d@example.test", i)}
	}

	loadStart := time.Now()
	load := append(newJobs(jobs-templated, "prometheus"), tmpl...)
	ids := s.publish(load...)
	testkit.Eventually(t, 90*time.Second, "every job in a terminal state", func(ctx context.Context) (bool, string) {
		counts, err := s.statusCounts(ctx)
		if err != nil {
			return false, err.Error()
		}
		return counts["sent"]+counts["failed"]+counts["dead"] == jobs, fmt.Sprint(counts)
	})
	st := r.Stats()
	t.Logf("relay: %d attempts, %d accepted, %d deferred", st.Attempts(), st.Accepted, st.Deferred())
	// The load must have exercised what the panels and alerts show.
	for _, m := range []struct {
		name   string
		labels []string
	}{
		{"postline_delivery_attempts_total", []string{"result", "throttled"}},
		{"postline_adaptive_decreases_total", nil},
		{"postline_retry_records_total", nil},
		{"postline_deadletter_records_total", []string{"reason", "smtp_permanent"}},
		{"postline_compose_renders_total", []string{"result", "rendered"}},
	} {
		if v := w.mustMetric(m.name, m.labels...); v < 1 {
			t.Errorf("%s%v is %v after the load, want some", m.name, m.labels, v)
		}
	}
	if v := sched.mustMetric("postline_scheduler_reinjected_total"); v < 1 {
		t.Errorf("the scheduler re-injected %v copies, want some", v)
	}
	exerciseOutcomes(t, s.stack, w, recv, sink, signer, smtpAddr, load, ids)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	processes := map[grafana.Process][]*workerProc{
		grafana.WorkerAndScheduler: {w, sched},
		grafana.BounceReceiver:     {recv},
		grafana.WebhookDispatcher:  {disp},
	}
	scraped := make(map[string]bool)
	scrapedBy := make(map[grafana.Process]map[string]bool)
	for _, process := range grafana.Processes {
		scrapedBy[process] = make(map[string]bool)
		for _, p := range processes[process] {
			lintMetrics(ctx, t, p)
			fams, err := p.families(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for name := range fams {
				scraped[name] = true
				scrapedBy[process][name] = true
			}
		}
	}
	for _, m := range grafana.Catalogue() {
		if !scrapedBy[m.Process][m.Name] {
			t.Errorf("docs/metrics.md lists %s under %s, but no scrape of %s has it", m.Name, m.Process, m.Process)
		}
	}

	type check struct{ what, query string }
	var checks []check
	for _, q := range grafana.Queries() {
		checks = append(checks, check{fmt.Sprintf("panel %q query %s", q.Panel, q.RefID), q.PromQL(prometheusRateInterval)})
	}
	for _, rule := range rules {
		operands, err := alertOperands(rule.Expr, time.Second)
		if err != nil {
			t.Fatalf("alert %s: %v", rule.Alert, err)
		}
		for i, op := range operands {
			checks = append(checks, check{fmt.Sprintf("alert %s operand %d", rule.Alert, i+1), op})
		}
	}
	for _, c := range checks {
		names, err := metricNames(c.query)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		for _, name := range names {
			// up is Prometheus's own series per target, not scraped.
			if name != "up" && !scraped[name] {
				t.Errorf("%s names metric %s, which no process exports: %s", c.what, name, c.query)
			}
		}
	}

	// Poll: the last scrapes after the load may still be on their way.
	pending := checks
	testkit.Eventually(t, 20*time.Second, "every dashboard query and alert operand to return data", func(ctx context.Context) (bool, string) {
		end := time.Now()
		var still []check
		var status []string
		for _, c := range pending {
			ok, err := prom.hasData(ctx, c.query, loadStart, end)
			if !ok {
				still = append(still, c)
				status = append(status, fmt.Sprintf("%s: %s (%v)", c.what, c.query, err))
			}
		}
		pending = still
		return len(pending) == 0, fmt.Sprintf("%d without data:\n%s", len(status), strings.Join(status, "\n"))
	})

	t.Logf("%d dashboard queries and alert operands returned data", len(checks))

	testkit.Eventually(t, 10*time.Second, "Prometheus to evaluate every alert rule without error", func(ctx context.Context) (bool, string) {
		return prom.rulesHealthy(ctx, rules)
	})
}

// exerciseOutcomes drives what the outcome dashboard and alerts show after
// the load: of the jobs whose recipient the relay accepted, the receiver
// takes a hard bounce for one, a complaint for another and a report with a
// forged return path for a third, over SMTP as an MTA sends them; then one
// more job to the bounced address is suppressed at claim, and the endpoint
// gets the webhooks of the bounce and the complaint.
func exerciseOutcomes(t *testing.T, s *stack, w, recv *workerProc, sink *webhookSink, signer *returnpath.Signer,
	smtpAddr string, load []job.Job, ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := s.recipients(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	var accepted []int // indexes into load and ids
	for i, id := range ids {
		if rows[rcptKey{id, 0}].state == "accepted" && len(accepted) < 3 {
			accepted = append(accepted, i)
		}
	}
	if len(accepted) < 3 {
		t.Fatalf("%d of %d recipients accepted by the relay, want at least 3 to report on", len(accepted), len(ids))
	}
	bounced, complained, forgedFor := accepted[0], accepted[1], accepted[2]
	addr := func(i int) string { return load[i].To[0] }
	now := time.Now()
	hard, err := bounce.BuildDSN(bounce.DSN{Date: now, ReturnPath: signer.Address(ids[bounced], 0), MessageID: ids[bounced],
		OriginalTo: addr(bounced), Recipients: []report.Report{{Kind: report.Bounced, Recipient: addr(bounced),
			Status: "5.1.1", Code: 550, Diagnostic: "550 5.1.1 no such user"}}})
	if err != nil {
		t.Fatal(err)
	}
	arf, err := bounce.BuildARF(bounce.ARF{To: "fbl@" + signer.Domain(), Date: now, Recipients: []string{addr(complained)},
		ReturnPath: signer.Address(ids[complained], 0), MessageID: ids[complained], OriginalTo: addr(complained), Subject: load[complained].Subject})
	if err != nil {
		t.Fatal(err)
	}
	_, forger := outcomeKeys(t, signer.Domain())
	forgedPath := forger.Address(ids[forgedFor], 0)
	forged, err := bounce.BuildDSN(bounce.DSN{Date: now, ReturnPath: forgedPath, MessageID: ids[forgedFor], OriginalTo: addr(forgedFor),
		Recipients: []report.Report{{Kind: report.Bounced, Recipient: addr(forgedFor), Status: "5.1.1", Code: 550,
			Diagnostic: "550 5.1.1 no such user"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		rcpt string
		raw  []byte
	}{{signer.Address(ids[bounced], 0), hard}, {"fbl@" + signer.Domain(), arf}, {forgedPath, forged}} {
		if err := sendReport(smtpAddr, r.rcpt, r.raw); err != nil {
			t.Fatalf("report to %s: %v", r.rcpt, err)
		}
	}
	testkit.Eventually(t, 30*time.Second, "the bounce and the complaint applied, the forgery counted", func(ctx context.Context) (bool, string) {
		rows, err := s.recipients(ctx, ids)
		if err != nil {
			return false, err.Error()
		}
		n, err := recv.Metric(ctx, "postline_outcome_reports_total", "result", "forged")
		b, c := rows[rcptKey{ids[bounced], 0}], rows[rcptKey{ids[complained], 0}]
		return b.state == "bounced" && b.bounceType == "hard" && c.state == "complained" && err == nil && n == 1,
			fmt.Sprintf("bounced %+v, complained %+v, forged reports %v (%v)", b, c, n, err)
	})

	again := newJobs(1, "suppressed")
	again[0].To = []string{addr(bounced)}
	s.publish(again...)
	testkit.Eventually(t, 30*time.Second, "the job to the bounced address suppressed at claim", func(ctx context.Context) (bool, string) {
		n, err := w.Metric(ctx, "postline_delivery_suppressed_recipients_total")
		return err == nil && n >= 1, fmt.Sprintf("suppressed recipients %v (%v)", n, err)
	})
	testkit.Eventually(t, 30*time.Second, "the webhooks of the bounce and the complaint", func(context.Context) (bool, string) {
		got := sink.byType()
		return got[event.Bounced] >= 1 && got[event.Complained] >= 1 && len(sink.problems()) == 0,
			fmt.Sprintf("webhooks by type %v, problems %v", got, sink.problems())
	})
}

// prometheusBin finds the Prometheus server: $POSTLINE_TEST_PROMETHEUS_BIN
// (set by `eval "$(scripts/stack.sh env)"`), else scripts/stack.sh
// prometheus-path, which unpacks Debian's package once.
func prometheusBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("POSTLINE_TEST_PROMETHEUS_BIN"); p != "" {
		return p
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "stack.sh"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script, "prometheus-path").Output()
	if err != nil {
		t.Fatalf("find prometheus: POSTLINE_TEST_PROMETHEUS_BIN is not set and %s prometheus-path failed: %v", script, err)
	}
	return strings.TrimSpace(string(out))
}

// promServer is a Prometheus server started by startPrometheus.
type promServer struct {
	api     promv1.API
	targets map[string]*workerProc // by scrape job
}

// startPrometheus runs the Prometheus server at bin on a free loopback port,
// scraping each of targets every second under its job name and evaluating
// the rule file at rulesPath every second, and waits until it is ready. The
// server is killed when the test ends; the tail of its log is printed if the
// test failed.
func startPrometheus(t *testing.T, bin, rulesPath string, targets map[string]*workerProc) *promServer {
	t.Helper()
	dir := t.TempDir()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\nrule_files: [%q]\nscrape_configs:\n", rulesPath)
	for _, job := range slices.Sorted(maps.Keys(targets)) {
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs: [{targets: [%q]}]\n", job, targets[job].addr)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus: last lines of %s:\n%s", logPath, tail(logPath, 30))
		}
	})

	client, err := promapi.NewClient(promapi.Config{Address: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	httpClient := &http.Client{Timeout: 5 * time.Second}
	testkit.Eventually(t, startTimeout, "Prometheus to be ready", func(ctx context.Context) (bool, string) {
		select {
		case <-exited:
			t.Fatalf("prometheus exited at start:\n%s", tail(logPath, 30))
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/-/ready", nil)
		if err != nil {
			return false, err.Error()
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return &promServer{api: promv1.NewAPI(client), targets: targets}
}

// freeLoopbackAddr returns a loopback address whose port was free a moment
// ago: Prometheus does not report the port it bound for ":0".
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// waitTargetsUp waits until Prometheus has scraped every target
// successfully.
func (p *promServer) waitTargetsUp(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, "every scrape target up", func(ctx context.Context) (bool, string) {
		res, err := p.api.Targets(ctx)
		if err != nil {
			return false, err.Error()
		}
		up := make(map[string]bool)
		var status []string
		for _, at := range res.Active {
			job := string(at.Labels["job"])
			up[job] = at.Health == promv1.HealthGood
			status = append(status, fmt.Sprintf("%s %s %s", job, at.Health, at.LastError))
		}
		for job := range p.targets {
			if !up[job] {
				return false, strings.Join(status, "; ")
			}
		}
		return true, ""
	})
}

// hasData reports whether query has at least one sample that is not NaN
// between start and end, at a resolution of one second: a panel over that
// time would show something. The error says why not.
func (p *promServer) hasData(ctx context.Context, query string, start, end time.Time) (bool, error) {
	v, _, _, err := p.api.QueryRange(ctx, query, promv1.Range{Start: start, End: end, Step: time.Second})
	if err != nil {
		return false, err
	}
	matrix, ok := v.(model.Matrix)
	if !ok {
		return false, fmt.Errorf("result is a %s, not a matrix", v.Type())
	}
	for _, series := range matrix {
		for _, sample := range series.Values {
			if !math.IsNaN(float64(sample.Value)) {
				return true, nil
			}
		}
	}
	return false, fmt.Errorf("%d series, every sample NaN", len(matrix))
}

// rulesHealthy reports whether Prometheus has loaded every one of rules and
// evaluated each without error, and otherwise which are not.
func (p *promServer) rulesHealthy(ctx context.Context, rules []alertRule) (bool, string) {
	res, err := p.api.Rules(ctx, nil)
	if err != nil {
		return false, err.Error()
	}
	health := make(map[string]string)
	for _, g := range res.Groups {
		for _, r := range g.Rules {
			if ar, ok := r.(promv1.AlertingRule); ok {
				health[ar.Name] = string(ar.Health) + " " + ar.LastError
			}
		}
	}
	var bad []string
	for _, r := range rules {
		if h, ok := health[r.Alert]; !ok || strings.TrimSpace(h) != promv1.RuleHealthGood {
			bad = append(bad, fmt.Sprintf("%s: %q", r.Alert, h))
		}
	}
	return len(bad) == 0, strings.Join(bad, "; ")
}
