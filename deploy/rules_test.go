package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/testenv"
)

var prometheusDir = filepath.Join(repoRoot, "deploy", "prometheus")

// The documentation pages the alert rules are checked against, relative to
// the repository root: the alerts' runbooks, and the metric catalogue.
const (
	runbookPage = "docs/operations/alerts.md"
	metricsPage = "docs/metrics.md"
)

// promtool finds Prometheus's promtool: $POSTLINE_TEST_PROMTOOL, then PATH,
// then where scripts/stack.sh unpacks Debian's prometheus package.
func promtool(t *testing.T) string {
	t.Helper()
	testenv.Integration(t, "promtool from Debian's prometheus package")
	if p := os.Getenv("POSTLINE_TEST_PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	cache := os.Getenv("POSTLINE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("find promtool: %v", err)
		}
		cache = filepath.Join(home, ".cache", "postline")
	}
	p := filepath.Join(cache, "prometheus", "root", "usr", "bin", "promtool")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("find promtool: not in POSTLINE_TEST_PROMTOOL, PATH or %s; run scripts/stack.sh up (or scripts/stack.sh promtool-path)", p)
	}
	return p
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	bin := promtool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = prometheusDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

func TestPromtoolCheckConfig(t *testing.T) {
	// Also loads the rule files prometheus.yml names, as Prometheus would.
	runPromtool(t, "check", "config", "prometheus.yml")
}

func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", "alerts.yml")
}

func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, "test", "rules", "alerts_test.yml")
}

// alertRules is the part of alerts.yml the tests read.
type alertRules struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertsAreDocumented checks every alert's annotations, and that its
// runbook_url names its own runbook section, a heading of docs/operations/alerts.md.
func TestAlertsAreDocumented(t *testing.T) {
	var rules alertRules
	readYAML(t, filepath.Join(prometheusDir, "alerts.yml"), &rules)
	runbooks := pageAnchors(t, filepath.Join(repoRoot, runbookPage))
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			anchor := "alert-" + strings.ToLower(r.Alert)
			if want := runbookPage + "#" + anchor; r.Annotations["runbook_url"] != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !slices.Contains(runbooks, anchor) {
				t.Errorf("alert %s: %s has no runbook heading \"Alert: %s\" (#%s)", r.Alert, runbookPage, r.Alert, anchor)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
		}
	}
	if n == 0 {
		t.Fatal("alerts.yml: no alert")
	}
}

// TestAlertsUseRealNames checks the names the expressions depend on: every
// postline_* metric is in the metric table of docs/metrics.md, and every job
// label is a scrape job of prometheus.yml.
func TestAlertsUseRealNames(t *testing.T) {
	metricsDoc, err := os.ReadFile(filepath.Join(repoRoot, metricsPage))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(postline_[a-z0-9_]+)` \\|").FindAllStringSubmatch(string(metricsDoc), -1) {
		documented[m[1]] = true
	}
	if len(documented) == 0 {
		t.Fatal(metricsPage + ": no metric table rows found")
	}
	var cfg prometheusConfig
	readYAML(t, filepath.Join(prometheusDir, "prometheus.yml"), &cfg)
	if !slices.Contains(cfg.RuleFiles, "alerts.yml") {
		t.Errorf("prometheus.yml: rule_files %q does not load alerts.yml", cfg.RuleFiles)
	}
	jobs := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		jobs[sc.JobName] = true
	}

	var rules alertRules
	readYAML(t, filepath.Join(prometheusDir, "alerts.yml"), &rules)
	metric := regexp.MustCompile(`\bpostline_[a-z0-9_]+`)
	job := regexp.MustCompile(`job=~?"([^"]+)"`)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, name := range metric.FindAllString(r.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && documented[b] {
						base = b
					}
				}
				if !documented[base] {
					t.Errorf("alert %s: metric %s is not in the metric table of %s", r.Alert, name, metricsPage)
				}
			}
			for _, m := range job.FindAllStringSubmatch(r.Expr, -1) {
				for _, j := range strings.Split(m[1], "|") {
					if !jobs[j] {
						t.Errorf("alert %s: job %q is not a scrape job of prometheus.yml", r.Alert, j)
					}
				}
			}
		}
	}
}

// TestAlertsHaveFiringAndQuietCases checks that alerts_test.yml shows each
// alert firing and, at least once, staying quiet.
func TestAlertsHaveFiringAndQuietCases(t *testing.T) {
	var rules alertRules
	readYAML(t, filepath.Join(prometheusDir, "alerts.yml"), &rules)
	var cases struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, filepath.Join(prometheusDir, "alerts_test.yml"), &cases)
	if !slices.Equal(cases.RuleFiles, []string{"alerts.yml"}) {
		t.Errorf("alerts_test.yml: rule_files %q, want [alerts.yml]", cases.RuleFiles)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range cases.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !fires[r.Alert] {
				t.Errorf("alerts_test.yml: no case where %s fires", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("alerts_test.yml: no case where %s stays quiet", r.Alert)
			}
		}
	}
}
