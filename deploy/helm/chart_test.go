package helm_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/deploy/internal/settingsrc"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "postline"
	repoRoot  = "../.."
	release   = "mail"
	namespace = "postline"
	// fullname prefixes every resource of the release.
	fullname = release + "-postline"
	// componentLabel names the binary a pod runs.
	componentLabel = "app.kubernetes.io/component"
	// defaultPartitions is kafka.partitions in values.yaml.
	defaultPartitions = 8
)

// helmBinary returns the Helm to run: $POSTLINE_HELM when set, else the one scripts/tools.sh
// installs. On a cold Go cache that install builds Helm (a few minutes); later runs find the
// binary cached and take milliseconds. A failed install fails the test: the chart is then untested.
func helmBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping the Helm chart tests under -short: they install Helm with scripts/tools.sh")
	}
	if path := os.Getenv("POSTLINE_HELM"); path != "" {
		return path
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(repoRoot, "scripts", "tools.sh"), "helm")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/tools.sh helm: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// runHelm runs helm and returns its stdout; the error carries stderr, where Helm says why.
func runHelm(helm string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// render runs `helm template` on the chart with the given value flags.
func render(helm string, valueArgs ...string) (string, error) {
	return runHelm(helm, append([]string{"template", release, chartDir, "--namespace", namespace}, valueArgs...)...)
}

func TestLint(t *testing.T) {
	helm := helmBinary(t)
	tests := []struct {
		name string
		args []string
	}{
		{"default values", nil},
		{"everything enabled", []string{"-f", "testdata/everything.yaml"}},
		{"managed Kafka", []string{"-f", "testdata/managed-kafka.yaml"}},
		{"outcome loop", []string{"-f", "testdata/outcomes.yaml"}},
		{"bounce domain only", []string{"--set", "outcomes.bounceDomain=bounces.example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runHelm(helm, append([]string{"lint", "--strict", chartDir, "--namespace", namespace}, tt.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

func TestTemplate(t *testing.T) {
	helm := helmBinary(t)
	binaries := binarySettings(t)
	tests := []struct {
		name           string
		args           []string
		partitions     int
		existingSecret string
		wantKinds      map[string]int
	}{
		{
			name:       "default values",
			partitions: defaultPartitions,
			wantKinds: map[string]int{
				"Deployment": 2, "ConfigMap": 3, "Secret": 2, "Service": 2, "PodDisruptionBudget": 2, "Job": 2,
			},
		},
		{
			name:           "everything enabled",
			args:           []string{"-f", "testdata/everything.yaml"},
			partitions:     12,
			existingSecret: "postline-credentials",
			wantKinds: map[string]int{
				"Deployment": 5, "ConfigMap": 7, "Service": 7, "PodDisruptionBudget": 5, "Job": 2,
				"ServiceMonitor": 1, "PrometheusRule": 1, "ScaledObject": 1,
			},
		},
		{
			name:       "outcome loop: bounce domain, bounce-receiver with STARTTLS and hooks, webhook-dispatcher",
			args:       []string{"-f", "testdata/outcomes.yaml"},
			partitions: defaultPartitions,
			wantKinds: map[string]int{
				"Deployment": 4, "ConfigMap": 6, "Secret": 2, "Service": 5, "PodDisruptionBudget": 4, "Job": 2,
			},
		},
		{
			name:       "bounce domain only: generated return path keys, the bounce-receiver, an idle webhook-dispatcher",
			args:       []string{"--set", "outcomes.bounceDomain=bounces.example.com"},
			partitions: defaultPartitions,
			wantKinds: map[string]int{
				"Deployment": 4, "ConfigMap": 6, "Secret": 2, "Service": 5, "PodDisruptionBudget": 4, "Job": 2,
			},
		},
		{
			name: "optional parts off",
			args: []string{
				"--set", "hooks.migrate.enabled=false", "--set", "hooks.createTopics.enabled=false",
				"--set", "worker.podDisruptionBudget.enabled=false", "--set", "metrics.dashboards.enabled=false",
			},
			partitions: defaultPartitions,
			wantKinds:  map[string]int{"Deployment": 2, "ConfigMap": 2, "Secret": 1, "Service": 2, "PodDisruptionBudget": 1},
		},
		{
			name:       "managed Kafka: TLS with a private CA and a client certificate, SCRAM",
			args:       []string{"-f", "testdata/managed-kafka.yaml"},
			partitions: defaultPartitions,
			wantKinds: map[string]int{
				"Deployment": 2, "ConfigMap": 3, "Secret": 2, "Service": 2, "PodDisruptionBudget": 2, "Job": 2,
			},
		},
		{
			name:       "SASL password for the topics hook without the migrate hook",
			args:       []string{"-f", "testdata/managed-kafka.yaml", "--set", "hooks.migrate.enabled=false"},
			partitions: defaultPartitions,
			wantKinds: map[string]int{
				"Deployment": 2, "ConfigMap": 3, "Secret": 2, "Service": 2, "PodDisruptionBudget": 2, "Job": 1,
			},
		},
		{
			name:       "as many workers as partitions, relays with room for them",
			args:       []string{"--set", "worker.replicas=8", "--set", "relay.connectionBudget=128", "--set", "secret.smtpRelays=smtp://u:p@relay:587?name=a"},
			partitions: defaultPartitions,
			wantKinds: map[string]int{
				"Deployment": 2, "ConfigMap": 3, "Secret": 2, "Service": 2, "PodDisruptionBudget": 2, "Job": 2,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := render(helm, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			m := decode(t, out)
			if got := m.kindCounts(); !maps.Equal(got, tt.wantKinds) {
				t.Errorf("rendered kinds %v, want %v", got, tt.wantKinds)
			}
			for _, d := range m.deployments {
				checkPodSpec(t, "Deployment "+d.Name, d.Spec.Template.Spec)
				checkDeployment(t, m, d, binaries, tt.existingSecret)
			}
			for _, j := range m.jobs {
				checkPodSpec(t, "Job "+j.Name, j.Spec.Template.Spec)
				checkHookJob(t, m, j, binaries["postctl"], tt.partitions, tt.existingSecret)
			}
			checkWorkerReplicas(t, m, tt.partitions)
			checkSelectors(t, m)
			checkMonitoring(t, m)
		})
	}
}

// TestTemplateRejects proves the render fails, naming the values to change, where the chart
// would otherwise deploy something useless or broken.
func TestTemplateRejects(t *testing.T) {
	helm := helmBinary(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			name: "the console without its certificate",
			args: []string{"--set", "console.enabled=true"},
			want: "console.enabled needs console.tls.secretName",
		},
		{
			name: "KEDA maxReplicas above the partition count",
			args: []string{"--set", "autoscaling.keda.enabled=true", "--set", "autoscaling.keda.maxReplicas=12"},
			want: "autoscaling.keda.maxReplicas 12 exceeds kafka.partitions 8",
		},
		{
			name: "replicas above the partition count",
			args: []string{"--set", "worker.replicas=9"},
			want: "worker.replicas 9 exceeds kafka.partitions 8",
		},
		{
			name: "KEDA minReplicas above maxReplicas",
			args: []string{"--set", "autoscaling.keda.enabled=true", "--set", "autoscaling.keda.minReplicas=6", "--set", "autoscaling.keda.maxReplicas=4"},
			want: "autoscaling.keda.minReplicas 6 exceeds autoscaling.keda.maxReplicas 4",
		},
		{
			name: "more sender connections than the relays accept",
			args: []string{"--set", "autoscaling.keda.enabled=true", "--set", "relay.connectionBudget=100"},
			want: "8 worker replicas x POSTLINE_SENDERS 16 = 128 relay connections exceed relay.connectionBudget 100",
		},
		{
			name: "no database URL and no existing Secret",
			args: []string{"--set", "secret.databaseURL="},
			want: "secret.databaseURL is required unless secret.existingSecret",
		},
		{
			name: "SASL without a password",
			args: []string{"--set", "kafka.sasl.mechanism=SCRAM-SHA-512", "--set", "kafka.sasl.username=postline"},
			want: "kafka.sasl.mechanism SCRAM-SHA-512 needs secret.kafkaSASLPassword, or secret.existingSecret holding the key kafka-sasl-password",
		},
		{
			name: "SASL without a user name",
			args: []string{"--set", "kafka.sasl.mechanism=SCRAM-SHA-256", "--set", "secret.kafkaSASLPassword=p"},
			want: "kafka.sasl.mechanism SCRAM-SHA-256 needs kafka.sasl.username",
		},
		{
			name: "a user name without a mechanism",
			args: []string{"--set", "kafka.sasl.username=postline"},
			want: "kafka.sasl.username is set but kafka.sasl.mechanism is empty",
		},
		{
			name: "SASL PLAIN in clear",
			args: []string{"--set", "kafka.tls.mode=off", "--set", "kafka.sasl.mechanism=PLAIN", "--set", "kafka.sasl.username=u", "--set", "secret.kafkaSASLPassword=p"},
			want: "kafka.sasl.mechanism PLAIN sends the password in clear",
		},
		{
			name: "a CA for a plaintext connection",
			args: []string{"--set-json", "kafka.tls.mode=false", "--set", "kafka.tls.ca.secretName=kafka-ca"},
			want: "kafka.tls.mode is off, yet kafka.tls sets a CA",
		},
		{
			name: "a CA from a Secret and a ConfigMap",
			args: []string{"--set", "kafka.tls.ca.secretName=a", "--set", "kafka.tls.ca.configMapName=b"},
			want: "kafka.tls.ca: set secretName or configMapName, not both",
		},
		{
			name: "an unknown TLS mode",
			args: []string{"--set", "kafka.tls.mode=required"},
			want: "value must be one of 'auto', 'on', 'off'",
		},
		{
			name: "the Kafka password as a setting",
			args: []string{"--set", "worker.settings.POSTLINE_KAFKA_SASL_PASSWORD=p"},
			want: "invalid propertyName 'POSTLINE_KAFKA_SASL_PASSWORD'",
		},
		{
			name: "a misspelt setting",
			args: []string{"--set", "worker.settings.POSTLINE_SENDER=4"},
			want: "invalid propertyName 'POSTLINE_SENDER'",
		},
		{
			name: "a setting the chart derives from other values",
			args: []string{"--set", "worker.settings.POSTLINE_HTTP_ADDR=:9090"},
			want: "invalid propertyName 'POSTLINE_HTTP_ADDR'",
		},
		{
			name: "the bounce domain as a worker setting: workers and receiver must agree",
			args: []string{"--set", "worker.settings.POSTLINE_BOUNCE_DOMAIN=bounces.example.com"},
			want: "invalid propertyName 'POSTLINE_BOUNCE_DOMAIN'",
		},
		{
			name: "a bounce-receiver without a bounce domain",
			args: []string{"--set", "bounceReceiver.enabled=true", "--set", "secret.returnPathKeys=k1-0123456789abcdef"},
			want: "bounceReceiver.enabled needs outcomes.bounceDomain",
		},
		{
			name: "auto spelt out, where unset (null) is auto",
			args: []string{"--set", "outcomes.bounceDomain=bounces.example.com", "--set", "bounceReceiver.enabled=auto"},
			want: "at '/bounceReceiver/enabled': got string, want null or boolean",
		},
		{
			name: "the bounce-receiver's SMTP server on its metrics port",
			args: []string{"-f", "testdata/outcomes.yaml", "--set", "bounceReceiver.smtpPort=8083"},
			want: "bounceReceiver.smtpPort and bounceReceiver.port are both 8083",
		},
		{
			name: "the return path keys as a bounce-receiver setting",
			args: []string{"-f", "testdata/outcomes.yaml", "--set", "bounceReceiver.settings.POSTLINE_RETURN_PATH_KEYS=k"},
			want: "invalid propertyName 'POSTLINE_RETURN_PATH_KEYS'",
		},
		{
			name: "the Mailgun signing key as a bounce-receiver setting",
			args: []string{"-f", "testdata/outcomes.yaml", "--set", "bounceReceiver.settings.POSTLINE_MAILGUN_SIGNING_KEY=k"},
			want: "invalid propertyName 'POSTLINE_MAILGUN_SIGNING_KEY'",
		},
		{
			name: "webhook endpoints without the Secret of their signing secrets",
			args: []string{"-f", "testdata/outcomes.yaml", "--set", "webhookDispatcher.endpointSecrets.secretName="},
			want: "webhookDispatcher.endpoints need webhookDispatcher.endpointSecrets.secretName",
		},
		{
			name: "webhook endpoints without their Secret, the dispatcher on by the bounce domain",
			args: []string{"--set", "outcomes.bounceDomain=bounces.example.com", "--set-json", `webhookDispatcher.endpoints=[{"id":"a","url":"https://a.example.com/","secret_env":"A_SECRET"}]`},
			want: "webhookDispatcher.endpoints need webhookDispatcher.endpointSecrets.secretName",
		},
		{
			name: "a misspelt endpoint field, which the dispatcher would refuse at start",
			args: []string{"-f", "testdata/outcomes.yaml", "--set-json", `webhookDispatcher.endpoints=[{"id":"a","url":"https://a.example.com/","secret_env":"A_SECRET","type":["bounced"]}]`},
			want: "additional properties 'type' not allowed",
		},
		{
			name: "the endpoints file as a dispatcher setting",
			args: []string{"-f", "testdata/outcomes.yaml", "--set", "webhookDispatcher.settings.POSTLINE_WEBHOOKS_FILE=/x.yaml"},
			want: "invalid propertyName 'POSTLINE_WEBHOOKS_FILE'",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(helm, tt.args...)
			if err == nil {
				t.Fatalf("render succeeded, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("render failed with\n%v\nwant an error containing %q", err, tt.want)
			}
		})
	}
}

// withheldSettings are the binaries' settings the chart deliberately neither sets nor lets a user
// set, each with the reason. TestSettingsMatchBinaries checks they stay out of the Deployments.
var withheldSettings = map[string]string{
	"POSTLINE_KAFKA_SASL_PASSWORD": "the pods read the password from the mounted credentials Secret " +
		"(POSTLINE_KAFKA_SASL_PASSWORD_FILE); a value would sit in plain text in the ConfigMap",
}

// TestSettingsMatchBinaries proves that the settings a user may put in worker.settings and
// scheduler.settings (the schema's list) plus the ones the chart sets itself are exactly the
// binaries' settings, less the withheld ones: a new setting of a binary must be made settable
// (or set) by the chart, and no name may be settable twice.
func TestSettingsMatchBinaries(t *testing.T) {
	helm := helmBinary(t)
	binaries := binarySettings(t)
	// With empty settings maps, every POSTLINE_* name rendered is one the chart sets itself.
	out, err := render(helm, "-f", "testdata/outcomes.yaml", "--set", "worker.settings=null", "--set", "scheduler.settings=null",
		"--set", "bounceReceiver.settings=null", "--set", "webhookDispatcher.settings=null",
		"--set", "console.enabled=true", "--set", "console.tls.secretName=console-tls", "--set", "console.settings=null")
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	schema := readSchema(t)
	tests := []struct{ component, valuesKey string }{
		{"worker", "worker"},
		{"retry-scheduler", "scheduler"},
		{"bounce-receiver", "bounceReceiver"},
		{"webhook-dispatcher", "webhookDispatcher"},
		{"console", "console"},
	}
	for _, tt := range tests {
		t.Run(tt.component, func(t *testing.T) {
			d := m.component(t, tt.component)
			managed := map[string]bool{}
			for name := range renderedEnv(t, m, d.Spec.Template.Spec.Containers[0]) {
				if strings.HasPrefix(name, "POSTLINE_") && !endpointSecretEnv(m)[name] {
					managed[name] = true
				}
			}
			settable := map[string]bool{}
			for _, name := range schema.Properties[tt.valuesKey].Properties["settings"].PropertyNames.Enum {
				settable[name] = true
			}
			want := binaries[tt.component]
			for _, name := range sortedKeys(want) {
				if reason, ok := withheldSettings[name]; ok {
					if settable[name] || managed[name] {
						t.Errorf("the chart sets or allows %s, which it must withhold: %s", name, reason)
					}
					continue
				}
				if !settable[name] && !managed[name] {
					t.Errorf("%s reads %s, which the chart neither sets nor allows in %s.settings: add it to that propertyNames enum in values.schema.json", tt.component, name, tt.valuesKey)
				}
			}
			for _, name := range sortedKeys(settable) {
				if !want[name] {
					t.Errorf("values.schema.json allows %s.settings.%s, which is not a setting of %s", tt.valuesKey, name, tt.component)
				}
				if managed[name] {
					t.Errorf("values.schema.json allows %s.settings.%s, which the chart sets itself: remove it from the enum", tt.valuesKey, name)
				}
			}
		})
	}
}

// valuesSchema is the part of values.schema.json that lists the settable settings.
type valuesSchema struct {
	Properties map[string]struct {
		Properties map[string]struct {
			PropertyNames struct {
				Enum []string `json:"enum"`
			} `json:"propertyNames"`
		} `json:"properties"`
	} `json:"properties"`
}

func readSchema(t *testing.T) valuesSchema {
	t.Helper()
	var schema valuesSchema
	if err := json.Unmarshal(readFile(t, filepath.Join(chartDir, "values.schema.json")), &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	return schema
}

// scaledObject is the part of KEDA's keda.sh/v1alpha1 ScaledObject the chart renders; decoding
// strictly into it fails on any field the chart writes that this does not know. (KEDA's own Go
// module pulls in most of Kubernetes and several clouds' SDKs.)
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval"`
		CooldownPeriod  *int32 `json:"cooldownPeriod"`
		MinReplicaCount *int32 `json:"minReplicaCount"`
		MaxReplicaCount *int32 `json:"maxReplicaCount"`
		Triggers        []struct {
			Type              string            `json:"type"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
			} `json:"authenticationRef"`
		} `json:"triggers"`
	} `json:"spec"`
}

// manifests are the objects of one render, by name.
type manifests struct {
	deployments     map[string]*appsv1.Deployment
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	services        map[string]*corev1.Service
	budgets         map[string]*policyv1.PodDisruptionBudget
	jobs            map[string]*batchv1.Job
	serviceMonitors map[string]*monitoringv1.ServiceMonitor
	rules           map[string]*monitoringv1.PrometheusRule
	scaledObjects   map[string]*scaledObject
}

// decode splits helm template's output into documents and decodes each strictly (unknown,
// duplicate or miscased fields fail) into the Go type of its apiVersion and kind.
func decode(t *testing.T, out string) manifests {
	t.Helper()
	m := manifests{
		deployments: map[string]*appsv1.Deployment{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, services: map[string]*corev1.Service{},
		budgets: map[string]*policyv1.PodDisruptionBudget{}, jobs: map[string]*batchv1.Job{},
		serviceMonitors: map[string]*monitoringv1.ServiceMonitor{}, rules: map[string]*monitoringv1.PrometheusRule{},
		scaledObjects: map[string]*scaledObject{},
	}
	documentSeparator := regexp.MustCompile(`(?m)^---[ \t]*$`)
	sourceComment := regexp.MustCompile(`# Source: (\S+)`)
	for _, doc := range documentSeparator.Split(out, -1) {
		source := "unknown template"
		if match := sourceComment.FindStringSubmatch(doc); match != nil {
			source = match[1]
		}
		data, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		if string(data) == "null" {
			continue // only comments
		}
		var typ metav1.TypeMeta
		if err := json.Unmarshal(data, &typ); err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		switch typ.APIVersion + " " + typ.Kind {
		case "apps/v1 Deployment":
			add(t, source, data, m.deployments)
		case "v1 ConfigMap":
			add(t, source, data, m.configMaps)
		case "v1 Secret":
			add(t, source, data, m.secrets)
		case "v1 Service":
			add(t, source, data, m.services)
		case "policy/v1 PodDisruptionBudget":
			add(t, source, data, m.budgets)
		case "batch/v1 Job":
			add(t, source, data, m.jobs)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			add(t, source, data, m.serviceMonitors)
		case "monitoring.coreos.com/v1 PrometheusRule":
			add(t, source, data, m.rules)
		case "keda.sh/v1alpha1 ScaledObject":
			add(t, source, data, m.scaledObjects)
		default:
			t.Errorf("%s: %s %s has no Go type here to be checked against; add one to decode", source, typ.APIVersion, typ.Kind)
		}
	}
	return m
}

// named is a decoded object: every Kubernetes object has metadata.name.
type named interface{ GetName() string }

// add decodes data strictly into a new T and files it under its name; two objects of one kind
// and name would overwrite each other in a cluster, so they fail here.
func add[T any, P interface {
	*T
	named
}](t *testing.T, source string, data []byte, into map[string]P) {
	t.Helper()
	obj := P(new(T))
	strictErrs, err := sigsjson.UnmarshalStrict(data, obj)
	if err = errors.Join(append(strictErrs, err)...); err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	if _, dup := into[obj.GetName()]; dup {
		t.Fatalf("%s: a second object named %q of its kind", source, obj.GetName())
	}
	into[obj.GetName()] = obj
}

func (m manifests) kindCounts() map[string]int {
	counts := map[string]int{}
	for kind, n := range map[string]int{
		"Deployment": len(m.deployments), "ConfigMap": len(m.configMaps), "Secret": len(m.secrets),
		"Service": len(m.services), "PodDisruptionBudget": len(m.budgets), "Job": len(m.jobs),
		"ServiceMonitor": len(m.serviceMonitors), "PrometheusRule": len(m.rules), "ScaledObject": len(m.scaledObjects),
	} {
		if n > 0 {
			counts[kind] = n
		}
	}
	return counts
}

// component returns the Deployment running the named binary.
func (m manifests) component(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	d, ok := m.deployments[fullname+"-"+name]
	if !ok {
		t.Fatalf("no Deployment %s-%s among %v", fullname, name, sortedKeys(m.deployments))
	}
	return d
}

// binarySettings returns, per binary, the POSTLINE_* environment variables its source reads.
// worker, retry-scheduler, bounce-receiver and webhook-dispatcher declare theirs as `env` tags of their settings structs (see
// internal/config), some in structs of internal/config they embed (config.Kafka); postctl spells
// them out whole in its table of flag-backing variables and loads config.Kafka. Reading the source
// keeps the test fast and makes it follow every new or renamed setting.
func binarySettings(t *testing.T) map[string]map[string]bool {
	t.Helper()
	read := func(dir string, literals bool) map[string]bool {
		names, err := settingsrc.Read(repoRoot, dir, literals)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	return map[string]map[string]bool{
		"worker":             read("cmd/worker", false),
		"retry-scheduler":    read("cmd/retry-scheduler", false),
		"bounce-receiver":    read("cmd/bounce-receiver", false),
		"webhook-dispatcher": read("cmd/webhook-dispatcher", false),
		"console":            read("cmd/console", false),
		"postctl":            read("cmd/postctl", true),
	}
}

// renderedEnv returns the container's environment as Kubernetes builds it: the ConfigMaps of
// envFrom, then env (which wins). Values from a Secret or a field read as "<from NAME>".
func renderedEnv(t *testing.T, m manifests, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			t.Errorf("container %s: envFrom other than a ConfigMap", c.Name)
			continue
		}
		cm, ok := m.configMaps[from.ConfigMapRef.Name]
		if !ok {
			t.Errorf("container %s: envFrom ConfigMap %s is not rendered", c.Name, from.ConfigMapRef.Name)
			continue
		}
		maps.Copy(env, cm.Data)
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "<from " + e.ValueFrom.SecretKeyRef.Name + ">"
		default:
			env[e.Name] = "<from field>"
		}
	}
	return env
}

// checkPodSpec checks what every pod of the chart must have: a non-root user, a read-only root
// file system without privilege escalation, requests and limits, and no API token.
func checkPodSpec(t *testing.T, owner string, spec corev1.PodSpec) {
	t.Helper()
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("%s: pod may run as root: securityContext %+v", owner, sc)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: mounts a service-account token, yet calls no Kubernetes API", owner)
	}
	if len(spec.Containers) != 1 {
		t.Errorf("%s: %d containers, want 1", owner, len(spec.Containers))
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s container %s: root file system is writable", owner, c.Name)
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s container %s: allows privilege escalation", owner, c.Name)
		}
		for _, resource := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := c.Resources.Requests[resource]; !ok || q.IsZero() {
				t.Errorf("%s container %s: no %s request", owner, c.Name, resource)
			}
			if q, ok := c.Resources.Limits[resource]; !ok || q.IsZero() {
				t.Errorf("%s container %s: no %s limit", owner, c.Name, resource)
			}
		}
	}
}

// checkDeployment checks a component against its binary: every POSTLINE_* variable is one of its
// settings, the probes and the metrics port are where the binary serves them, credentials come
// from the expected Secret, and SIGTERM gets the binary's whole shutdown timeout.
func checkDeployment(t *testing.T, m manifests, d *appsv1.Deployment, binaries map[string]map[string]bool, existingSecret string) {
	t.Helper()
	component := d.Spec.Template.Labels[componentLabel]
	settings, ok := binaries[component]
	if !ok {
		t.Errorf("Deployment %s: component %q is no binary of this repository", d.Name, component)
		return
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := renderedEnv(t, m, c)
	// The setting holding the address of /metrics, /healthz and /readyz, per binary.
	httpAddrSetting := map[string]string{
		"worker": "POSTLINE_HTTP_ADDR", "retry-scheduler": "POSTLINE_SCHEDULER_HTTP_ADDR",
		"bounce-receiver": "POSTLINE_RECEIVER_HTTP_ADDR", "webhook-dispatcher": "POSTLINE_WEBHOOKS_HTTP_ADDR",
		"console": "POSTLINE_CONSOLE_HTTP_ADDR",
	}
	endpointSecrets := endpointSecretEnv(m)
	for _, name := range sortedKeys(env) {
		if strings.HasPrefix(name, "POSTLINE_") && !settings[name] && !(component == "webhook-dispatcher" && endpointSecrets[name]) {
			t.Errorf("Deployment %s: %s is not a setting of %s", d.Name, name, component)
		}
	}

	metricsPort := int32(0)
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			metricsPort = p.ContainerPort
		}
	}
	_, port, err := net.SplitHostPort(env[httpAddrSetting[component]])
	if err != nil || port != strconv.Itoa(int(metricsPort)) {
		t.Errorf("Deployment %s: %s=%q, but the metrics container port is %d", d.Name, httpAddrSetting[component], env[httpAddrSetting[component]], metricsPort)
	}
	for _, probe := range []struct {
		kind, path string
		probe      *corev1.Probe
	}{
		{"liveness", "/healthz", c.LivenessProbe},
		{"readiness", "/readyz", c.ReadinessProbe},
	} {
		if probe.probe == nil || probe.probe.HTTPGet == nil {
			t.Errorf("Deployment %s: no HTTP %s probe", d.Name, probe.kind)
			continue
		}
		get := probe.probe.HTTPGet
		if get.Path != probe.path || containerPort(c, get.Port) != metricsPort || metricsPort == 0 {
			t.Errorf("Deployment %s: %s probe gets %s on port %s, want %s on the metrics port %d", d.Name, probe.kind, get.Path, get.Port.String(), probe.path, metricsPort)
		}
	}

	for _, e := range c.Env {
		ref := e.ValueFrom
		if ref == nil || ref.SecretKeyRef == nil {
			continue
		}
		if component == "webhook-dispatcher" && endpointSecrets[e.Name] {
			// The endpoints' signing secrets come from the user's Secret, key named as the variable.
			if ref.SecretKeyRef.Name != webhookSecrets || ref.SecretKeyRef.Key != e.Name {
				t.Errorf("Deployment %s: %s reads key %s of Secret %s, want key %s of %s", d.Name, e.Name, ref.SecretKeyRef.Key, ref.SecretKeyRef.Name, e.Name, webhookSecrets)
			}
			continue
		}
		checkSecretRef(t, m, "Deployment "+d.Name, e.Name, ref.SecretKeyRef, existingSecret, false)
	}
	switch component {
	case "bounce-receiver":
		checkBounceReceiver(t, m, d, env)
	case "webhook-dispatcher":
		checkWebhookDispatcher(t, m, d, env)
	}

	shutdown, err := time.ParseDuration(env["POSTLINE_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Errorf("Deployment %s: POSTLINE_SHUTDOWN_TIMEOUT=%q: %v", d.Name, env["POSTLINE_SHUTDOWN_TIMEOUT"], err)
	}
	if grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second <= shutdown {
		t.Errorf("Deployment %s: terminationGracePeriodSeconds %s does not exceed the shutdown timeout %v: Kubernetes would kill the drain", d.Name, valueOf(grace), shutdown)
	}
}

// containerPort resolves a probe's or Service's port, by name or number, on the container.
func containerPort(c corev1.Container, port intstr.IntOrString) int32 {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort
		}
	}
	return 0
}

// checkSecretRef checks that a reference reads the existing Secret, or a rendered one holding the
// key (optional keys may be absent). Hooks run before the release's resources exist, so a Secret
// they read must be a hook itself, created before them.
func checkSecretRef(t *testing.T, m manifests, owner, env string, ref *corev1.SecretKeySelector, existingSecret string, hook bool) {
	t.Helper()
	if existingSecret != "" {
		if ref.Name != existingSecret {
			t.Errorf("%s: %s reads Secret %s, want the existing Secret %s", owner, env, ref.Name, existingSecret)
		}
		return
	}
	secret, ok := m.secrets[ref.Name]
	if !ok {
		t.Errorf("%s: %s reads Secret %s, which is not rendered", owner, env, ref.Name)
		return
	}
	if _, has := secret.StringData[ref.Key]; !has && (ref.Optional == nil || !*ref.Optional) {
		t.Errorf("%s: %s reads key %s that Secret %s lacks", owner, env, ref.Key, ref.Name)
	}
	if _, secretIsHook := secret.Annotations["helm.sh/hook"]; hook != secretIsHook {
		t.Errorf("%s: %s reads Secret %s whose helm.sh/hook annotation is %q: hooks must read hook Secrets, the rest the release's", owner, env, ref.Name, secret.Annotations["helm.sh/hook"])
	}
}

// checkHookJob checks a postctl hook: it runs before install and upgrade, after the Secret it
// reads, with postctl's own settings, and the topics hook creates the partitions the chart caps
// the workers at.
func checkHookJob(t *testing.T, m manifests, j *batchv1.Job, postctl map[string]bool, partitions int, existingSecret string) {
	t.Helper()
	phases := strings.Split(j.Annotations["helm.sh/hook"], ",")
	if !slices.Contains(phases, "pre-install") || !slices.Contains(phases, "pre-upgrade") {
		t.Errorf("Job %s: helm.sh/hook %q, want pre-install and pre-upgrade", j.Name, j.Annotations["helm.sh/hook"])
	}
	if !strings.Contains(j.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation") {
		t.Errorf("Job %s: helm.sh/hook-delete-policy %q lacks before-hook-creation: the next upgrade would find the old Job", j.Name, j.Annotations["helm.sh/hook-delete-policy"])
	}
	weight := hookWeight(t, "Job "+j.Name, j.Annotations)
	c := j.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"postctl"}) {
		t.Errorf("Job %s: command %v, want [postctl]", j.Name, c.Command)
	}
	switch j.Name {
	case fullname + "-migrate":
		if !slices.Equal(c.Args, []string{"migrate"}) {
			t.Errorf("Job %s: args %v, want [migrate]", j.Name, c.Args)
		}
	case fullname + "-create-topics":
		want := []string{"topics", "create", "--partitions", strconv.Itoa(partitions)}
		if len(c.Args) < len(want) || !slices.Equal(c.Args[:len(want)], want) {
			t.Errorf("Job %s: args %v, want them to start with %v", j.Name, c.Args, want)
		}
	default:
		t.Errorf("Job %s: no check for this hook", j.Name)
	}
	// A Secret mounted as files (the Kafka SASL password) must exist before the hook, like one
	// read into env.
	for _, v := range j.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret == nil {
				continue
			}
			secret, ok := m.secrets[src.Secret.Name]
			if !ok {
				continue // not the chart's: the user creates it before installing
			}
			if _, isHook := secret.Annotations["helm.sh/hook"]; !isHook || hookWeight(t, "Secret "+secret.Name, secret.Annotations) >= weight {
				t.Errorf("Job %s: mounts Secret %s, which is not a hook Secret created before it", j.Name, secret.Name)
			}
			for _, item := range src.Secret.Items {
				if _, has := secret.StringData[item.Key]; !has {
					t.Errorf("Job %s: mounts key %s that Secret %s lacks", j.Name, item.Key, secret.Name)
				}
			}
		}
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "POSTLINE_") && !postctl[e.Name] {
			t.Errorf("Job %s: %s is not a setting of postctl", j.Name, e.Name)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			checkSecretRef(t, m, "Job "+j.Name, e.Name, ref, existingSecret, true)
			if secret, ok := m.secrets[ref.Name]; ok && hookWeight(t, "Secret "+secret.Name, secret.Annotations) >= weight {
				t.Errorf("Job %s: runs no later than the hook Secret %s it reads", j.Name, secret.Name)
			}
		}
	}
}

func hookWeight(t *testing.T, owner string, annotations map[string]string) int {
	t.Helper()
	weight, err := strconv.Atoi(cmp.Or(annotations["helm.sh/hook-weight"], "0"))
	if err != nil {
		t.Errorf("%s: helm.sh/hook-weight: %v", owner, err)
	}
	return weight
}

// checkWorkerReplicas checks that no more workers than partitions can run: KEDA's maxReplicaCount
// when it scales them (and then the Deployment leaves replicas to it), else the Deployment's.
func checkWorkerReplicas(t *testing.T, m manifests, partitions int) {
	t.Helper()
	worker := m.component(t, "worker")
	if len(m.scaledObjects) == 0 {
		if r := worker.Spec.Replicas; r == nil || int(*r) > partitions || *r < 1 {
			t.Errorf("worker replicas %s, want 1 to %d (the partitions)", valueOf(r), partitions)
		}
		return
	}
	if worker.Spec.Replicas != nil {
		t.Errorf("worker Deployment sets replicas %d although KEDA scales it: every upgrade would reset the scale", *worker.Spec.Replicas)
	}
	env := renderedEnv(t, m, worker.Spec.Template.Spec.Containers[0])
	for _, so := range m.scaledObjects {
		if so.Spec.ScaleTargetRef.Name != worker.Name {
			t.Errorf("ScaledObject %s scales %q, want %s", so.Name, so.Spec.ScaleTargetRef.Name, worker.Name)
		}
		if max := so.Spec.MaxReplicaCount; max == nil || int(*max) > partitions {
			t.Errorf("ScaledObject %s: maxReplicaCount %s, want at most %d (the partitions)", so.Name, valueOf(max), partitions)
		}
		if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" {
			t.Errorf("ScaledObject %s: triggers %+v, want one kafka trigger", so.Name, so.Spec.Triggers)
			continue
		}
		meta := so.Spec.Triggers[0].Metadata
		for key, setting := range map[string]string{
			"consumerGroup":    "POSTLINE_CONSUMER_GROUP",
			"topic":            "POSTLINE_JOBS_TOPIC",
			"bootstrapServers": "POSTLINE_KAFKA_BROKERS",
		} {
			if meta[key] != env[setting] {
				t.Errorf("ScaledObject %s: trigger %s %q, but the workers' %s is %q", so.Name, key, meta[key], setting, env[setting])
			}
		}
		if threshold, err := strconv.Atoi(meta["lagThreshold"]); err != nil || threshold < 1 {
			t.Errorf("ScaledObject %s: lagThreshold %q, want a positive count", so.Name, meta["lagThreshold"])
		}
	}
}

// checkSelectors checks that each Service and PodDisruptionBudget selects exactly one component,
// and a Service's port reaches that component's metrics port.
func checkSelectors(t *testing.T, m manifests) {
	t.Helper()
	for _, s := range m.services {
		d := selectOne(t, m, "Service "+s.Name, labels.SelectorFromSet(s.Spec.Selector))
		if d == nil {
			continue
		}
		c := d.Spec.Template.Spec.Containers[0]
		metrics := s.Labels["postline.io/metrics"] == "true"
		for _, p := range s.Spec.Ports {
			if containerPort(c, p.TargetPort) == 0 {
				t.Errorf("Service %s: port %s targets %s, not a port of %s", s.Name, p.Name, p.TargetPort.String(), d.Name)
			}
			// A metrics Service serves only the metrics port; the others never expose it.
			if metrics != (p.Name == "metrics") {
				t.Errorf("Service %s (postline.io/metrics %q): port %s", s.Name, s.Labels["postline.io/metrics"], p.Name)
			}
		}
	}
	for _, b := range m.budgets {
		selector, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil {
			t.Errorf("PodDisruptionBudget %s: %v", b.Name, err)
			continue
		}
		selectOne(t, m, "PodDisruptionBudget "+b.Name, selector)
	}
}

func selectOne(t *testing.T, m manifests, owner string, selector labels.Selector) *appsv1.Deployment {
	t.Helper()
	var selected []*appsv1.Deployment
	for _, d := range m.deployments {
		if selector.Matches(labels.Set(d.Spec.Template.Labels)) {
			selected = append(selected, d)
		}
	}
	if len(selected) != 1 {
		t.Errorf("%s: selector %s matches %d Deployments, want 1", owner, selector, len(selected))
		return nil
	}
	return selected[0]
}

// checkMonitoring checks the ServiceMonitor, the PrometheusRule and the dashboards ConfigMap
// against what the rules and dashboards expect: scrape jobs named as in the alert rules, the
// rules of files/alerts.yml, and every file of files/dashboards.
func checkMonitoring(t *testing.T, m manifests) {
	t.Helper()
	alerts := string(readFile(t, filepath.Join(chartDir, "files", "alerts.yml")))
	for _, sm := range m.serviceMonitors {
		selector, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatalf("ServiceMonitor %s: %v", sm.Name, err)
		}
		jobs := map[string]bool{}
		for _, s := range m.services {
			if selector.Matches(labels.Set(s.Labels)) {
				jobs[s.Labels[sm.Spec.JobLabel]] = true
			}
		}
		for _, d := range m.deployments {
			component := d.Spec.Template.Labels[componentLabel]
			job := "postline-" + component
			if !jobs[job] {
				t.Errorf("ServiceMonitor %s: no selected Service gives job %q (from label %q); found %v", sm.Name, job, sm.Spec.JobLabel, sortedKeys(jobs))
			}
			if (component == "worker" || component == "retry-scheduler") && !strings.Contains(alerts, job) {
				t.Errorf("alert rules no longer mention job %q: check the ServiceMonitor's job names", job)
			}
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor %s: endpoints %+v, want /metrics on port metrics", sm.Name, sm.Spec.Endpoints)
		}
	}

	var ruleFile struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal([]byte(alerts), &ruleFile); err != nil {
		t.Fatalf("files/alerts.yml: %v", err)
	}
	var wantAlerts []string
	for _, g := range ruleFile.Groups {
		for _, r := range g.Rules {
			wantAlerts = append(wantAlerts, r.Alert)
		}
	}
	for _, pr := range m.rules {
		var got []string
		for _, g := range pr.Spec.Groups {
			for _, r := range g.Rules {
				got = append(got, r.Alert)
			}
		}
		if !slices.Equal(got, wantAlerts) || len(got) == 0 {
			t.Errorf("PrometheusRule %s: alerts %v, want those of files/alerts.yml %v", pr.Name, got, wantAlerts)
		}
	}

	dashboards, ok := m.configMaps[fullname+"-dashboards"]
	if !ok {
		return
	}
	if dashboards.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap %s: labels %v, want grafana_dashboard: \"1\" for Grafana's sidecar", dashboards.Name, dashboards.Labels)
	}
	files := baseNames(t, filepath.Join(chartDir, "files", "dashboards"), "*.json")
	if got := sortedKeys(dashboards.Data); !slices.Equal(got, files) {
		t.Errorf("ConfigMap %s: keys %v, want the dashboards %v", dashboards.Name, got, files)
	}
	for name, content := range dashboards.Data {
		if !json.Valid([]byte(content)) {
			t.Errorf("ConfigMap %s: %s is not valid JSON", dashboards.Name, name)
		}
	}
}

// valueOf prints an optional field: its value, or "unset".
func valueOf[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
