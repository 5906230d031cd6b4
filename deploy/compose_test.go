package deploy

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/postline/postline/deploy/internal/settingsrc"
	"go.yaml.in/yaml/v3"
)

// repoRoot is the repository root as seen from this package's directory,
// where go test runs.
const repoRoot = ".."

// postlineBinaries are the commands the Dockerfile builds into the image.
var postlineBinaries = []string{"worker", "retry-scheduler", "bounce-receiver", "webhook-dispatcher", "console", "postctl"}

// loadCompose loads docker-compose.yml the way `docker compose` does: schema
// validation, interpolation (with an empty environment, so every ${VAR} needs
// a default), normalization and the consistency check.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	details := types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yml")}},
		Environment: types.Mapping{},
	}
	project, err := loader.LoadWithContext(context.Background(), details)
	if err != nil {
		t.Fatalf("load docker-compose.yml: %v", err)
	}
	return project
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return s
}

func env(s types.ServiceConfig, key string) string {
	if v := s.Environment[key]; v != nil {
		return *v
	}
	return ""
}

// binarySettings returns the POSTLINE_* variables a binary reads, from its
// source in cmd/<binary>: the env tags of its settings struct (worker,
// retry-scheduler) with the shared ones it embeds (config.Kafka), and the
// variable names it lists as string literals (postctl's envFlags).
func binarySettings(t *testing.T, binary string) map[string]bool {
	t.Helper()
	out, err := settingsrc.Read(repoRoot, filepath.Join("cmd", binary), true)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// postlineServices returns the services that run the Postline image, keyed
// by name, with the binary each runs.
func postlineServices(t *testing.T, p *types.Project) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, s := range p.Services {
		if s.Build == nil {
			continue
		}
		if len(s.Command) == 0 || !slices.Contains(postlineBinaries, s.Command[0]) {
			t.Errorf("service %s: command %q does not start one of the image's binaries %v", name, s.Command, postlineBinaries)
			continue
		}
		out[name] = s.Command[0]
	}
	return out
}

func TestComposeServicesUseRealSettings(t *testing.T) {
	p := loadCompose(t)
	services := postlineServices(t, p)
	for _, want := range []string{"migrate", "topics", "worker", "retry-scheduler", "bounce-receiver", "webhook-dispatcher"} {
		if _, ok := services[want]; !ok {
			t.Errorf("service %s: missing or not built from the Dockerfile", want)
		}
	}
	settings := map[string]map[string]bool{}
	for _, b := range postlineBinaries {
		settings[b] = binarySettings(t, b)
	}
	for name, binary := range services {
		for key := range p.Services[name].Environment {
			if strings.HasPrefix(key, "POSTLINE_") && !settings[binary][key] {
				t.Errorf("service %s: %s is not a setting of %s (see cmd/%s)", name, key, binary, binary)
			}
		}
	}
}

func TestComposeBuildsTheDockerfile(t *testing.T) {
	p := loadCompose(t)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for name := range postlineServices(t, p) {
		b := p.Services[name].Build
		if b.Context != root || b.Dockerfile != "Dockerfile" {
			t.Errorf("service %s: builds %s from context %s, want Dockerfile from the repo root %s", name, b.Dockerfile, b.Context, root)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "Dockerfile")); err != nil {
		t.Error(err)
	}
}

func TestComposeStartOrder(t *testing.T) {
	p := loadCompose(t)
	tests := []struct {
		service, dependency, condition string
	}{
		{"migrate", "postgres", types.ServiceConditionHealthy},
		{"topics", "kafka", types.ServiceConditionHealthy},
		{"worker", "migrate", types.ServiceConditionCompletedSuccessfully},
		{"worker", "topics", types.ServiceConditionCompletedSuccessfully},
		{"worker", "kafka", types.ServiceConditionHealthy},
		{"worker", "postgres", types.ServiceConditionHealthy},
		{"worker", "mailpit", types.ServiceConditionHealthy},
		{"retry-scheduler", "topics", types.ServiceConditionCompletedSuccessfully},
		{"retry-scheduler", "kafka", types.ServiceConditionHealthy},
		{"bounce-receiver", "migrate", types.ServiceConditionCompletedSuccessfully},
		{"bounce-receiver", "topics", types.ServiceConditionCompletedSuccessfully},
		{"bounce-receiver", "kafka", types.ServiceConditionHealthy},
		{"bounce-receiver", "postgres", types.ServiceConditionHealthy},
		{"webhook-dispatcher", "topics", types.ServiceConditionCompletedSuccessfully},
		{"webhook-dispatcher", "kafka", types.ServiceConditionHealthy},
		{"prometheus", "worker", types.ServiceConditionStarted},
		{"prometheus", "retry-scheduler", types.ServiceConditionStarted},
		{"prometheus", "bounce-receiver", types.ServiceConditionStarted},
		{"prometheus", "webhook-dispatcher", types.ServiceConditionStarted},
		{"console", "migrate", types.ServiceConditionCompletedSuccessfully},
		{"console", "console-cert", types.ServiceConditionCompletedSuccessfully},
		{"console", "kafka", types.ServiceConditionHealthy},
		{"prometheus", "console", types.ServiceConditionStarted},
		{"grafana", "prometheus", types.ServiceConditionHealthy},
	}
	for _, tt := range tests {
		got, ok := service(t, p, tt.service).DependsOn[tt.dependency]
		if !ok {
			t.Errorf("service %s: does not depend on %s", tt.service, tt.dependency)
		} else if got.Condition != tt.condition {
			t.Errorf("service %s: waits for %s to be %s, want %s", tt.service, tt.dependency, got.Condition, tt.condition)
		}
	}
	// Every condition must be one its dependency can meet.
	for name, s := range p.Services {
		for dep, d := range s.DependsOn {
			target := service(t, p, dep)
			switch d.Condition {
			case types.ServiceConditionHealthy:
				if target.HealthCheck == nil || target.HealthCheck.Disable || len(target.HealthCheck.Test) == 0 {
					t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
				}
			case types.ServiceConditionCompletedSuccessfully:
				if target.Restart != "" && target.Restart != types.RestartPolicyNo {
					t.Errorf("service %s waits for %s to complete, but %s restarts (%s)", name, dep, dep, target.Restart)
				}
			}
		}
	}
}

func TestComposeWorkersScaleOut(t *testing.T) {
	p := loadCompose(t)
	w := service(t, p, "worker")
	if w.Deploy == nil || w.Deploy.Replicas == nil || *w.Deploy.Replicas != 2 {
		t.Errorf("worker: want deploy.replicas 2, got %+v", w.Deploy)
	}
	for _, port := range w.Ports {
		if port.Published != "" {
			t.Errorf("worker: publishes host port %s, which two replicas cannot share", port.Published)
		}
	}
}

func TestComposeKafkaIsKRaft4(t *testing.T) {
	p := loadCompose(t)
	k := service(t, p, "kafka")
	image, tag, _ := strings.Cut(k.Image, ":")
	if image != "apache/kafka" || !strings.HasPrefix(tag, "4.") {
		t.Errorf("kafka: image %s, want apache/kafka:4.x", k.Image)
	}
	if roles := env(k, "KAFKA_PROCESS_ROLES"); !strings.Contains(roles, "controller") || !strings.Contains(roles, "broker") {
		t.Errorf("kafka: KAFKA_PROCESS_ROLES %q, want a combined KRaft node (broker,controller)", roles)
	}
	advertised := map[string]bool{}
	for _, l := range strings.Split(env(k, "KAFKA_ADVERTISED_LISTENERS"), ",") {
		if _, addr, ok := strings.Cut(l, "://"); ok {
			advertised[addr] = true
		}
	}
	for name := range postlineServices(t, p) {
		brokers := env(p.Services[name], "POSTLINE_KAFKA_BROKERS")
		if brokers == "" {
			continue
		}
		for _, b := range strings.Split(brokers, ",") {
			if !advertised[b] {
				t.Errorf("service %s: broker %s is not an advertised listener of kafka (%s)", name, b, env(k, "KAFKA_ADVERTISED_LISTENERS"))
			}
		}
	}
}

func TestComposeDatabaseAndRelayAddresses(t *testing.T) {
	p := loadCompose(t)
	pg := service(t, p, "postgres")
	for name := range postlineServices(t, p) {
		s := p.Services[name]
		if raw := env(s, "POSTLINE_DATABASE_URL"); raw != "" {
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("service %s: POSTLINE_DATABASE_URL: %v", name, err)
			}
			password, _ := u.User.Password()
			if u.Hostname() != "postgres" || u.User.Username() != env(pg, "POSTGRES_USER") ||
				password != env(pg, "POSTGRES_PASSWORD") || strings.TrimPrefix(u.Path, "/") != env(pg, "POSTGRES_DB") {
				t.Errorf("service %s: POSTLINE_DATABASE_URL %s does not match the postgres service's user, password and database", name, raw)
			}
		}
		if host := env(s, "POSTLINE_SMTP_HOST"); host != "" {
			if host != "mailpit" || env(s, "POSTLINE_SMTP_PORT") != "1025" {
				t.Errorf("service %s: relay %s:%s, want mailpit:1025", name, host, env(s, "POSTLINE_SMTP_PORT"))
			}
			if tls := env(s, "POSTLINE_SMTP_TLS"); tls != "none" {
				t.Errorf("service %s: POSTLINE_SMTP_TLS %q: Mailpit has no TLS, and auto demands it off loopback", name, tls)
			}
		}
	}
}

// bindMount returns the host source of the bind mount of s at target.
func bindMount(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			return v.Source
		}
	}
	t.Fatalf("service %s: no bind mount at %s", s.Name, target)
	return ""
}

func TestComposeMountsExistInRepo(t *testing.T) {
	p := loadCompose(t)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if rel, err := filepath.Rel(root, v.Source); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("service %s: bind mount %s is outside the repository", name, v.Source)
			} else if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("service %s: bind mount source: %v", name, err)
			}
		}
	}

	prom := service(t, p, "prometheus")
	promDir := bindMount(t, prom, "/etc/prometheus")
	if !slices.Contains(prom.Command, "--config.file=/etc/prometheus/prometheus.yml") {
		t.Errorf("prometheus: command %q does not load /etc/prometheus/prometheus.yml", prom.Command)
	}
	for _, f := range []string{"prometheus.yml", "alerts.yml"} {
		if _, err := os.Stat(filepath.Join(promDir, f)); err != nil {
			t.Errorf("prometheus: %v", err)
		}
	}

	grafana := service(t, p, "grafana")
	provisioning := bindMount(t, grafana, "/etc/grafana/provisioning")
	if want := filepath.Join(root, "deploy", "grafana", "provisioning"); provisioning != want {
		t.Errorf("grafana: provisioning from %s, want %s", provisioning, want)
	}
	dashboardsDir := filepath.Join(root, "deploy", "grafana", "dashboards")
	dashboards := "" // where the container sees deploy/grafana/dashboards
	for _, v := range grafana.Volumes {
		if v.Type == types.VolumeTypeBind && v.Source == dashboardsDir {
			dashboards = v.Target
		}
	}
	if dashboards == "" {
		t.Errorf("grafana: %s is not mounted", dashboardsDir)
	}
	// The dashboard providers must read the folder the dashboards are mounted at.
	providers, _ := filepath.Glob(filepath.Join(provisioning, "dashboards", "*.y*ml"))
	if len(providers) == 0 {
		t.Errorf("grafana: no dashboard provider in %s/dashboards", provisioning)
	}
	for _, path := range providers {
		var file struct {
			Providers []struct {
				Name    string `yaml:"name"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		readYAML(t, path, &file)
		for _, pr := range file.Providers {
			if pr.Options.Path != dashboards {
				t.Errorf("%s: provider %q reads %q, but compose mounts the dashboards at %q", path, pr.Name, pr.Options.Path, dashboards)
			}
		}
	}
}

// TestComposePrometheusScrapesTheServices checks prometheus.yml against the
// compose services: each Postline scrape job resolves a service's name and
// scrapes the port that service's binary serves /metrics on.
func TestComposePrometheusScrapesTheServices(t *testing.T) {
	p := loadCompose(t)
	var cfg prometheusConfig
	readYAML(t, filepath.Join(repoRoot, "deploy", "prometheus", "prometheus.yml"), &cfg)
	tests := []struct {
		job, service, addrSetting string
	}{
		{"postline-worker", "worker", "POSTLINE_HTTP_ADDR"},
		{"postline-retry-scheduler", "retry-scheduler", "POSTLINE_SCHEDULER_HTTP_ADDR"},
		{"postline-bounce-receiver", "bounce-receiver", "POSTLINE_RECEIVER_HTTP_ADDR"},
		{"postline-webhook-dispatcher", "webhook-dispatcher", "POSTLINE_WEBHOOKS_HTTP_ADDR"},
		{"postline-console", "console", "POSTLINE_CONSOLE_HTTP_ADDR"},
	}
	for _, tt := range tests {
		s := service(t, p, tt.service)
		_, port, err := net.SplitHostPort(env(s, tt.addrSetting))
		if err != nil {
			t.Fatalf("service %s: %s: %v", tt.service, tt.addrSetting, err)
		}
		want := net.JoinHostPort(tt.service, port)
		got := cfg.targets(tt.job)
		if !slices.Contains(got, want) {
			t.Errorf("prometheus.yml: job %s scrapes %v, want %s (service %s, %s)", tt.job, got, want, tt.service, tt.addrSetting)
		}
	}
}

// Postline's services run from the distroless image, so their health checks
// are postctl probe against their own /readyz port.
func TestComposeHealthChecksProbeReadyz(t *testing.T) {
	p := loadCompose(t)
	for _, tt := range []struct{ service, addrSetting string }{
		{"worker", "POSTLINE_HTTP_ADDR"},
		{"retry-scheduler", "POSTLINE_SCHEDULER_HTTP_ADDR"},
		{"bounce-receiver", "POSTLINE_RECEIVER_HTTP_ADDR"},
		{"webhook-dispatcher", "POSTLINE_WEBHOOKS_HTTP_ADDR"},
		{"console", "POSTLINE_CONSOLE_HTTP_ADDR"},
	} {
		s := service(t, p, tt.service)
		_, port, err := net.SplitHostPort(env(s, tt.addrSetting))
		if err != nil {
			t.Fatalf("service %s: %s: %v", tt.service, tt.addrSetting, err)
		}
		want := []string{"CMD", "postctl", "probe", "http://127.0.0.1:" + port + "/readyz"}
		if s.HealthCheck == nil || !slices.Equal(s.HealthCheck.Test, want) {
			t.Errorf("service %s: healthcheck %+v, want test %q", tt.service, s.HealthCheck, want)
		}
	}
}

// prometheusConfig is the part of prometheus.yml the tests read.
type prometheusConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

// targets returns the host:port targets of a job, DNS names joined with
// their port.
func (c prometheusConfig) targets(job string) []string {
	var out []string
	for _, sc := range c.ScrapeConfigs {
		if sc.JobName != job {
			continue
		}
		for _, st := range sc.StaticConfigs {
			out = append(out, st.Targets...)
		}
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				out = append(out, net.JoinHostPort(n, strconv.Itoa(d.Port)))
			}
		}
	}
	return out
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
