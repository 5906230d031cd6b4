package helm_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/webhook"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// checkWebhookDispatcher checks that the dispatcher reads the workers' database (the endpoints'
// retry queues live there), that its endpoints file is the mounted ConfigMap, that the binary's
// own parser accepts it, and that every endpoint's secret variable is set from the user's Secret.
func checkWebhookDispatcher(t *testing.T, m manifests, d *appsv1.Deployment, env map[string]string) {
	t.Helper()
	checkShared(t, m, d, env, "POSTLINE_EVENTS_TOPIC")
	checkShared(t, m, d, env, "POSTLINE_DATABASE_URL")
	if env["POSTLINE_DATABASE_URL"] == "" {
		t.Errorf("Deployment %s: no POSTLINE_DATABASE_URL: the dispatcher would queue retries in the binary's default database", d.Name)
	}
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

// returnPathKeysKey is secret.keys.returnPathKeys in values.yaml.
const returnPathKeysKey = "return-path-keys"

// generatedKeyBytes is what the chart generates: 32 random bytes, base64.
const generatedKeyBytes = 32

// TestOutcomeLoopFollowsTheBounceDomain proves that outcomes.bounceDomain alone turns on the
// whole outcome loop (return paths with keys the chart generates, the bounce-receiver, the
// webhook-dispatcher without endpoints) and that each part's enabled still decides when set.
func TestOutcomeLoopFollowsTheBounceDomain(t *testing.T) {
	helm := helmBinary(t)
	const domain = "bounces.example.com"
	tests := []struct {
		name                         string
		args                         []string
		wantDomain                   string
		wantReceiver, wantDispatcher bool
		wantGenerated, wantNoKey     bool
	}{
		{
			name:      "no bounce domain: neither the receiver nor the dispatcher, no keys",
			wantNoKey: true,
		},
		{
			name:           "only the bounce domain",
			args:           []string{"--set", "outcomes.bounceDomain=" + domain},
			wantDomain:     domain,
			wantReceiver:   true,
			wantDispatcher: true,
			wantGenerated:  true,
		},
		{
			name:           "the bounce domain, the receiver off",
			args:           []string{"--set", "outcomes.bounceDomain=" + domain, "--set", "bounceReceiver.enabled=false"},
			wantDomain:     domain,
			wantDispatcher: true,
			wantGenerated:  true,
		},
		{
			name:          "the bounce domain, the dispatcher off",
			args:          []string{"--set", "outcomes.bounceDomain=" + domain, "--set", "webhookDispatcher.enabled=false"},
			wantDomain:    domain,
			wantReceiver:  true,
			wantGenerated: true,
		},
		{
			// The workers publish the relays' answers on the events topic without a bounce domain.
			name:           "the dispatcher on without a bounce domain",
			args:           []string{"--set", "webhookDispatcher.enabled=true"},
			wantDispatcher: true,
			wantNoKey:      true,
		},
		{
			name:           "the bounce domain with keys of the user's: none generated",
			args:           []string{"-f", "testdata/outcomes.yaml"},
			wantDomain:     domain,
			wantReceiver:   true,
			wantDispatcher: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := render(helm, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			m := decode(t, out)
			worker := renderedEnv(t, m, m.component(t, "worker").Spec.Template.Spec.Containers[0])
			if got := worker["POSTLINE_BOUNCE_DOMAIN"]; got != tt.wantDomain {
				t.Errorf("worker POSTLINE_BOUNCE_DOMAIN %q, want %q", got, tt.wantDomain)
			}
			for component, want := range map[string]bool{"bounce-receiver": tt.wantReceiver, "webhook-dispatcher": tt.wantDispatcher} {
				if _, got := m.deployments[fullname+"-"+component]; got != want {
					t.Errorf("Deployment %s-%s rendered: %t, want %t", fullname, component, got, want)
				}
			}
			secret, ok := m.secrets[fullname]
			if !ok {
				t.Fatalf("no Secret %s among %v", fullname, sortedKeys(m.secrets))
			}
			keys, has := secret.StringData[returnPathKeysKey]
			switch {
			case tt.wantNoKey:
				if has {
					t.Errorf("Secret %s holds %s without a bounce domain: the workers refuse to start with keys and no domain", secret.Name, returnPathKeysKey)
				}
				return
			case !has:
				t.Fatalf("Secret %s lacks %s: the workers and the receiver cannot sign or verify return paths", secret.Name, returnPathKeysKey)
			}
			// The binaries' own parser must take the value.
			if _, err := returnpath.ParseKeys(keys); err != nil {
				t.Errorf("Secret %s: %s is refused by the binaries: %v", secret.Name, returnPathKeysKey, err)
			}
			raw, err := base64.StdEncoding.DecodeString(keys)
			generated := err == nil && len(raw) == generatedKeyBytes
			if generated != tt.wantGenerated {
				t.Errorf("Secret %s: %s is a generated key (%d random bytes, base64): %t, want %t", secret.Name, returnPathKeysKey, generatedKeyBytes, generated, tt.wantGenerated)
			}
			if !tt.wantGenerated {
				return
			}
			// A fixed key in the chart would be every installation's: each install draws its own.
			again, err := render(helm, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if other := decode(t, again).secrets[fullname].StringData[returnPathKeysKey]; other == keys {
				t.Errorf("two installs generated the same %s", returnPathKeysKey)
			}
		})
	}
}

// fakeAPIServer serves the little of the Kubernetes API that Helm's lookup reads: the discovery
// of v1 and one Secret (none when secret is nil). It records the paths requested.
type fakeAPIServer struct {
	*httptest.Server
	mu        sync.Mutex
	requested []string
}

func newFakeAPIServer(t *testing.T, secret *corev1.Secret) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{}
	secretPath := "/api/v1/namespaces/" + namespace + "/secrets/" + fullname
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requested = append(f.requested, r.Method+" "+r.URL.Path)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1":
			json.NewEncoder(w).Encode(metav1.APIResourceList{
				TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
				GroupVersion: "v1",
				APIResources: []metav1.APIResource{{Name: "secrets", SingularName: "secret", Namespaced: true, Kind: "Secret", Verbs: []string{"get"}}},
			})
		case r.Method == http.MethodGet && r.URL.Path == secretPath && secret != nil:
			json.NewEncoder(w).Encode(secret)
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound,
			})
		}
	}))
	t.Cleanup(f.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: %s}}]
current-context: fake
`, f.URL, namespace)
	if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	return f
}

func (f *fakeAPIServer) requestedPaths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requested)
}

// TestReturnPathKeysKeptAcrossUpgrades proves that generated return path keys survive an
// upgrade: a render that reads the release's Secret (helm upgrade; here helm template
// --dry-run=server against a fake API server) keeps the key it holds, and the pods are not
// rolled for it. Changed keys would make every report for mail already sent look forged.
func TestReturnPathKeysKeptAcrossUpgrades(t *testing.T) {
	helm := helmBinary(t)
	args := []string{"--set", "outcomes.bounceDomain=bounces.example.com"}
	out, err := render(helm, args...)
	if err != nil {
		t.Fatal(err)
	}
	installed := decode(t, out)
	installedKey := installed.secrets[fullname].StringData[returnPathKeysKey]
	if installedKey == "" {
		t.Fatalf("Secret %s: no %s generated", fullname, returnPathKeysKey)
	}
	// The Secret as the API server returns it: data, base64, never stringData.
	inCluster := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: fullname, Namespace: namespace},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{},
		}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	databaseURL := installed.secrets[fullname].StringData["database-url"]
	tests := []struct {
		name    string
		secret  *corev1.Secret
		args    []string
		wantKey string // "" wants a new generated key
	}{
		{
			name:    "the release's Secret holds the generated key",
			secret:  inCluster(map[string]string{"database-url": databaseURL, returnPathKeysKey: installedKey}),
			wantKey: installedKey,
		},
		{
			// A release installed before its bounce domain was set.
			name:   "the release's Secret holds no key",
			secret: inCluster(map[string]string{"database-url": databaseURL}),
		},
		{
			name:    "keys of the user's win over the kept one",
			secret:  inCluster(map[string]string{"database-url": databaseURL, returnPathKeysKey: installedKey}),
			args:    []string{"--set", "secret.returnPathKeys=k1-0123456789abcdef"},
			wantKey: "k1-0123456789abcdef",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newFakeAPIServer(t, tt.secret)
			out, err := render(helm, append(append([]string{"--dry-run=server"}, args...), tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			upgraded := decode(t, out)
			key := upgraded.secrets[fullname].StringData[returnPathKeysKey]
			switch {
			case tt.wantKey != "" && key != tt.wantKey:
				t.Errorf("Secret %s: %s changed on upgrade (requests to the API server: %v)", fullname, returnPathKeysKey, api.requestedPaths())
			case tt.wantKey == "" && (key == "" || key == installedKey):
				t.Errorf("Secret %s: %s %q, want a new generated key", fullname, returnPathKeysKey, key)
			}
			if tt.wantKey == installedKey {
				if !slices.Contains(api.requestedPaths(), "GET /api/v1/namespaces/"+namespace+"/secrets/"+fullname) {
					t.Errorf("the render never read Secret %s: requests %v", fullname, api.requestedPaths())
				}
				before := secretChecksum(t, installed)
				if after := secretChecksum(t, upgraded); after != before {
					t.Errorf("worker checksum/secret %s after the upgrade, %s before: kept keys would roll the pods", after, before)
				}
			}
		})
	}
}

// secretChecksum returns the worker pods' checksum/secret annotation.
func secretChecksum(t *testing.T, m manifests) string {
	t.Helper()
	sum := m.component(t, "worker").Spec.Template.Annotations["checksum/secret"]
	if sum == "" {
		t.Fatal("worker pods have no checksum/secret annotation")
	}
	return sum
}
