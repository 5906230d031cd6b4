package helm_test

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// kafkaPod is a pod that connects to Kafka: the Deployments and the topics hook.
type kafkaPod struct {
	owner string
	spec  corev1.PodSpec
	env   map[string]string
	// secret is the Secret the SASL password must come from: the release's for the Deployments,
	// the hooks' own for the hook (it runs before the release's exists).
	secret string
}

func kafkaPods(t *testing.T, m manifests, existingSecret string) []kafkaPod {
	t.Helper()
	release, hooks := fullname, fullname+"-hooks"
	if existingSecret != "" {
		release, hooks = existingSecret, existingSecret
	}
	var pods []kafkaPod
	for _, name := range sortedKeys(m.deployments) {
		d := m.deployments[name]
		pods = append(pods, kafkaPod{"Deployment " + name, d.Spec.Template.Spec, renderedEnv(t, m, d.Spec.Template.Spec.Containers[0]), release})
	}
	j, ok := m.jobs[fullname+"-create-topics"]
	if !ok {
		t.Fatalf("no Job %s-create-topics among %v", fullname, sortedKeys(m.jobs))
	}
	pods = append(pods, kafkaPod{"Job " + j.Name, j.Spec.Template.Spec, renderedEnv(t, m, j.Spec.Template.Spec.Containers[0]), hooks})
	return pods
}

// fileSource says where the file at path comes from in the pod: "secret NAME KEY" or
// "configMap NAME KEY", or "" when no read-only mount of a projected volume item holds it.
func fileSource(spec corev1.PodSpec, file string) string {
	c := spec.Containers[0]
	for _, mount := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, mount.MountPath+"/")
		if !ok || !mount.ReadOnly {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != mount.Name || v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				switch {
				case src.Secret != nil:
					for _, item := range src.Secret.Items {
						if path.Clean(item.Path) == rel {
							return "secret " + src.Secret.Name + " " + item.Key
						}
					}
				case src.ConfigMap != nil:
					for _, item := range src.ConfigMap.Items {
						if path.Clean(item.Path) == rel {
							return "configMap " + src.ConfigMap.Name + " " + item.Key
						}
					}
				}
			}
		}
	}
	return ""
}

// TestKafkaConnection renders the chart for the Kafkas a user runs it against and checks what
// every pod that connects (worker, scheduler, bounce-receiver, webhook-dispatcher, topics hook) is given: the same TLS and SASL
// settings, files from mounted Secrets and ConfigMaps, and the SASL password only as a file.
func TestKafkaConnection(t *testing.T) {
	helm := helmBinary(t)
	const password = "s3cr3t-kafka-password"
	tests := []struct {
		name           string
		args           []string
		existingSecret string
		want           map[string]string // settings every pod must have
		files          map[string]string // setting naming a file -> its source (fileSource)
	}{
		{
			name: "default: TLS unless loopback, no SASL, no files",
			want: map[string]string{
				"POSTLINE_KAFKA_BROKERS": "kafka:9092", "POSTLINE_KAFKA_TLS": "auto",
				"POSTLINE_KAFKA_TLS_CA_FILE": "", "POSTLINE_KAFKA_SASL_MECHANISM": "", "POSTLINE_KAFKA_SASL_PASSWORD_FILE": "",
				"POSTLINE_KAFKA_TLS_INSECURE_SKIP_VERIFY": "false",
			},
		},
		{
			name: "plaintext in-cluster Kafka, off given as YAML reads a bare off",
			args: []string{"--set-json", "kafka.tls.mode=false"},
			want: map[string]string{"POSTLINE_KAFKA_TLS": "off"},
		},
		{
			name: "managed Kafka: TLS with a private CA and a client certificate, SCRAM",
			args: []string{"-f", "testdata/managed-kafka.yaml"},
			want: map[string]string{
				"POSTLINE_KAFKA_BROKERS": "b-1.kafka.example.net:9096,b-2.kafka.example.net:9096",
				"POSTLINE_KAFKA_TLS":     "on", "POSTLINE_KAFKA_TLS_SERVER_NAME": "kafka.example.net",
				"POSTLINE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "POSTLINE_KAFKA_SASL_USERNAME": "postline",
			},
			files: map[string]string{
				"POSTLINE_KAFKA_TLS_CA_FILE":        "secret kafka-ca ca.pem",
				"POSTLINE_KAFKA_TLS_CERT_FILE":      "secret postline-kafka-client tls.crt",
				"POSTLINE_KAFKA_TLS_KEY_FILE":       "secret postline-kafka-client tls.key",
				"POSTLINE_KAFKA_SASL_PASSWORD_FILE": "secret <credentials> kafka-sasl-password",
			},
		},
		{
			name: "managed Kafka with the bounce-receiver and the webhook-dispatcher",
			args: []string{"-f", "testdata/managed-kafka.yaml", "-f", "testdata/outcomes.yaml"},
			want: map[string]string{
				"POSTLINE_KAFKA_TLS": "on", "POSTLINE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "POSTLINE_KAFKA_SASL_USERNAME": "postline",
			},
			files: map[string]string{
				"POSTLINE_KAFKA_TLS_CA_FILE":        "secret kafka-ca ca.pem",
				"POSTLINE_KAFKA_TLS_CERT_FILE":      "secret postline-kafka-client tls.crt",
				"POSTLINE_KAFKA_SASL_PASSWORD_FILE": "secret <credentials> kafka-sasl-password",
			},
		},
		{
			name: "CA from a ConfigMap, password in an existing Secret",
			args: []string{
				"--set", "kafka.tls.ca.configMapName=kafka-ca-bundle", "--set", "kafka.sasl.mechanism=SCRAM-SHA-256",
				"--set", "kafka.sasl.username=postline", "--set", "secret.existingSecret=postline-credentials",
			},
			existingSecret: "postline-credentials",
			want:           map[string]string{"POSTLINE_KAFKA_TLS": "auto", "POSTLINE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"},
			files: map[string]string{
				"POSTLINE_KAFKA_TLS_CA_FILE":        "configMap kafka-ca-bundle ca.crt",
				"POSTLINE_KAFKA_SASL_PASSWORD_FILE": "secret <credentials> kafka-sasl-password",
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
			for _, cm := range m.configMaps {
				for k, v := range cm.Data {
					if strings.Contains(v, password) {
						t.Errorf("ConfigMap %s: %s holds the SASL password", cm.Name, k)
					}
				}
			}
			var first map[string]string
			for _, p := range kafkaPods(t, m, tt.existingSecret) {
				if _, ok := p.env["POSTLINE_KAFKA_SASL_PASSWORD"]; ok {
					t.Errorf("%s: sets POSTLINE_KAFKA_SASL_PASSWORD; the password must come as a file", p.owner)
				}
				for k, v := range p.env {
					if strings.Contains(v, password) {
						t.Errorf("%s: %s holds the SASL password", p.owner, k)
					}
				}
				for k, want := range tt.want {
					if got, ok := p.env[k]; !ok || got != want {
						t.Errorf("%s: %s=%q (set: %v), want %q", p.owner, k, got, ok, want)
					}
				}
				for k, want := range tt.files {
					want = strings.Replace(want, "<credentials>", p.secret, 1)
					if got := fileSource(p.spec, p.env[k]); p.env[k] == "" || got != want {
						t.Errorf("%s: %s=%q is %q, want a mounted file from %s", p.owner, k, p.env[k], got, want)
					}
				}
				// Every pod reaches the same Kafka the same way.
				kafka := map[string]string{}
				for k, v := range p.env {
					if strings.HasPrefix(k, "POSTLINE_KAFKA_") && k != "POSTLINE_KAFKA_CLIENT_ID" {
						kafka[k] = v
					}
				}
				if first == nil {
					first = kafka
				} else if !maps.Equal(first, kafka) {
					t.Errorf("%s: Kafka settings %v differ from the other pods' %v", p.owner, kafka, first)
				}
				if len(tt.files) == 0 && slices.ContainsFunc(p.spec.Volumes, func(v corev1.Volume) bool { return v.Name == "kafka" }) {
					t.Errorf("%s: mounts Kafka files, yet none is configured", p.owner)
				}
			}
			if tt.existingSecret == "" && tt.files["POSTLINE_KAFKA_SASL_PASSWORD_FILE"] != "" {
				for _, name := range []string{fullname, fullname + "-hooks"} {
					s, ok := m.secrets[name]
					if !ok || s.StringData["kafka-sasl-password"] != password {
						t.Errorf("Secret %s: does not hold the SASL password under kafka-sasl-password", name)
					}
				}
			}
		})
	}
}
