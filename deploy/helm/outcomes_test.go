package helm_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/postline/postline/internal/webhook"
	appsv1 "k8s.io/api/apps/v1"
)

// webhookSecrets is webhookDispatcher.endpointSecrets.secretName in testdata/outcomes.yaml and
// testdata/everything.yaml: the user's Secret of the endpoints' signing secrets.
const webhookSecrets = "postline-webhook-secrets"

// endpointsConfigMap is the ConfigMap holding the webhook-dispatcher's endpoints file.
const endpointsConfigMap = fullname + "-webhook-endpoints"

// endpointSecretEnv returns the variables the rendered endpoints file names as secret_env: the
// dispatcher reads each endpoint's secret from one, so they are no settings of the binary. An
// unparsable file has none; checkWebhookDispatcher reports it.
func endpointSecretEnv(m manifests) map[string]bool {
	names := map[string]bool{}
	cm, ok := m.configMaps[endpointsConfigMap]
	if !ok {
		return names
	}
	endpoints, err := webhook.ParseEndpoints([]byte(cm.Data["endpoints.yaml"]), false)
	if err != nil {
		return names
	}
	for _, ep := range endpoints {
		names[ep.SecretEnv] = true
	}
	return names
}

// namedPort returns the container port of the given name, or 0.
func namedPort(d *appsv1.Deployment, name string) int32 {
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// checkAddrPort checks that the address setting listens on the named container port, or, when
// the setting is empty (the server is off), that no such port is declared.
func checkAddrPort(t *testing.T, d *appsv1.Deployment, env map[string]string, setting, port string, optional bool) {
	t.Helper()
	addr := env[setting]
	if addr == "" && optional {
		if p := namedPort(d, port); p != 0 {
			t.Errorf("Deployment %s: %s is empty (off), yet container port %s is %d", d.Name, setting, port, p)
		}
		return
	}
	_, got, err := net.SplitHostPort(addr)
	if want := namedPort(d, port); err != nil || want == 0 || got != strconv.Itoa(int(want)) {
		t.Errorf("Deployment %s: %s=%q, but container port %s is %d", d.Name, setting, addr, port, want)
	}
}

// checkShared checks that a component agrees with the workers on a setting both read.
func checkShared(t *testing.T, m manifests, d *appsv1.Deployment, env map[string]string, setting string) {
	t.Helper()
	worker := renderedEnv(t, m, m.component(t, "worker").Spec.Template.Spec.Containers[0])
	if env[setting] != worker[setting] {
		t.Errorf("Deployment %s: %s=%q, but the workers' is %q", d.Name, setting, env[setting], worker[setting])
	}
}

// checkBounceReceiver checks the receiver's servers against its ports, its STARTTLS files against
// their mounted Secret, and that it reads what the workers write: the same bounce domain, events
// topic and return path keys.
func checkBounceReceiver(t *testing.T, m manifests, d *appsv1.Deployment, env map[string]string) {
	t.Helper()
	checkAddrPort(t, d, env, "POSTLINE_BOUNCE_SMTP_ADDR", "smtp", false)
	checkAddrPort(t, d, env, "POSTLINE_HOOKS_ADDR", "hooks", true)
	for _, setting := range []string{"POSTLINE_BOUNCE_DOMAIN", "POSTLINE_EVENTS_TOPIC", "POSTLINE_RETURN_PATH_KEYS"} {
		checkShared(t, m, d, env, setting)
	}
	if env["POSTLINE_BOUNCE_DOMAIN"] == "" || env["POSTLINE_RETURN_PATH_KEYS"] == "" {
		t.Errorf("Deployment %s: POSTLINE_BOUNCE_DOMAIN %q, POSTLINE_RETURN_PATH_KEYS %q: the receiver refuses to start without both", d.Name, env["POSTLINE_BOUNCE_DOMAIN"], env["POSTLINE_RETURN_PATH_KEYS"])
	}
	cert, key := env["POSTLINE_BOUNCE_TLS_CERT_FILE"], env["POSTLINE_BOUNCE_TLS_KEY_FILE"]
	if (cert == "") != (key == "") {
		t.Errorf("Deployment %s: STARTTLS certificate %q and key %q: set both or neither", d.Name, cert, key)
	}
	spec := d.Spec.Template.Spec
	if cert != "" {
		certSource, keySource := fileSource(spec, cert), fileSource(spec, key)
		if certSource == "" || keySource == "" || certSource[:len(certSource)-len("tls.crt")] != keySource[:len(keySource)-len("tls.key")] {
			t.Errorf("Deployment %s: STARTTLS certificate from %q and key from %q, want tls.crt and tls.key of one mounted Secret", d.Name, certSource, keySource)
		}
	}
}

// checkWebhookDispatcher checks that the dispatcher's endpoints file is the mounted ConfigMap,
// that the binary's own parser accepts it, and that every endpoint's secret variable is set from
// the user's Secret.
func checkWebhookDispatcher(t *testing.T, m manifests, d *appsv1.Deployment, env map[string]string) {
	t.Helper()
	checkShared(t, m, d, env, "POSTLINE_EVENTS_TOPIC")
	file := env["POSTLINE_WEBHOOKS_FILE"]
	if got, want := fileSource(d.Spec.Template.Spec, file), "configMap "+endpointsConfigMap+" endpoints.yaml"; file == "" || got != want {
		t.Errorf("Deployment %s: POSTLINE_WEBHOOKS_FILE=%q comes from %q, want %s", d.Name, file, got, want)
	}
	cm, ok := m.configMaps[endpointsConfigMap]
	if !ok {
		t.Fatalf("Deployment %s: no ConfigMap %s", d.Name, endpointsConfigMap)
	}
	endpoints, err := webhook.ParseEndpoints([]byte(cm.Data["endpoints.yaml"]), false)
	if err != nil {
		t.Fatalf("ConfigMap %s: the dispatcher would refuse its endpoints file: %v", cm.Name, err)
	}
	for _, ep := range endpoints {
		if got := env[ep.SecretEnv]; got != "<from "+webhookSecrets+">" {
			t.Errorf("Deployment %s: endpoint %s's secret %s is %q, want it from Secret %s", d.Name, ep.ID, ep.SecretEnv, got, webhookSecrets)
		}
	}
}
