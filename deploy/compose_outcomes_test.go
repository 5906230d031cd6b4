package deploy

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/webhook"
)

// TestComposeOutcomeLoopAgrees checks that the services of the outcome loop
// read what the others write: the bounce-receiver the workers' return paths
// (one bounce domain, one set of keys), and everyone one events topic, which
// the topics job creates.
func TestComposeOutcomeLoopAgrees(t *testing.T) {
	p := loadCompose(t)
	worker := service(t, p, "worker")
	receiver := service(t, p, "bounce-receiver")
	for _, setting := range []string{"POSTLINE_BOUNCE_DOMAIN", "POSTLINE_RETURN_PATH_KEYS"} {
		if env(worker, setting) == "" || env(worker, setting) != env(receiver, setting) {
			t.Errorf("%s: worker has %q, bounce-receiver %q: the receiver could not read the workers' return paths", setting, env(worker, setting), env(receiver, setting))
		}
	}
	keys, err := returnpath.ParseKeys(env(receiver, "POSTLINE_RETURN_PATH_KEYS"))
	if err == nil {
		_, err = returnpath.New(env(receiver, "POSTLINE_BOUNCE_DOMAIN"), keys)
	}
	if err != nil {
		t.Errorf("bounce-receiver: POSTLINE_BOUNCE_DOMAIN and POSTLINE_RETURN_PATH_KEYS: %v", err)
	}
	topic := env(service(t, p, "topics"), "POSTLINE_EVENTS_TOPIC")
	for _, name := range []string{"worker", "bounce-receiver", "webhook-dispatcher"} {
		if got := env(service(t, p, name), "POSTLINE_EVENTS_TOPIC"); got != topic || got == "" {
			t.Errorf("service %s: POSTLINE_EVENTS_TOPIC %q, want the topic the topics job creates, %q", name, got, topic)
		}
	}
	// The SMTP server is reachable from the host, where a test bounce comes from.
	_, smtpPort, err := net.SplitHostPort(env(receiver, "POSTLINE_BOUNCE_SMTP_ADDR"))
	if err != nil {
		t.Fatalf("bounce-receiver: POSTLINE_BOUNCE_SMTP_ADDR: %v", err)
	}
	if !slices.ContainsFunc(receiver.Ports, func(pc types.ServicePortConfig) bool {
		return pc.Target == mustPort(t, smtpPort) && pc.HostIP == "127.0.0.1" && pc.Published == smtpPort
	}) {
		t.Errorf("bounce-receiver: SMTP port %s is not published on 127.0.0.1:%s (ports %+v)", smtpPort, smtpPort, receiver.Ports)
	}
}

// TestComposeWebhookEndpoints checks the dispatcher's endpoints file the way
// the dispatcher does at start, that each endpoint's secret is set and
// signs, and that each endpoint is served: by a service sharing the
// dispatcher's network (the endpoints are on its loopback) that listens on
// the endpoint's address.
func TestComposeWebhookEndpoints(t *testing.T) {
	p := loadCompose(t)
	d := service(t, p, "webhook-dispatcher")
	file := env(d, "POSTLINE_WEBHOOKS_FILE")
	endpoints, err := webhook.LoadEndpoints(bindMount(t, d, file))
	if err != nil {
		t.Fatalf("webhook-dispatcher: POSTLINE_WEBHOOKS_FILE %s: %v", file, err)
	}
	var sidecars []types.ServiceConfig
	for _, s := range p.Services {
		if s.NetworkMode == "service:webhook-dispatcher" {
			sidecars = append(sidecars, s)
		}
	}
	for _, ep := range endpoints {
		secret := env(d, ep.SecretEnv)
		if _, err := webhook.NewSigner(secret); err != nil {
			t.Errorf("endpoint %s: secret_env %s: %v", ep.ID, ep.SecretEnv, err)
		}
		host := ep.URL.Host
		served := slices.ContainsFunc(sidecars, func(s types.ServiceConfig) bool {
			return slices.ContainsFunc(s.Command, func(arg string) bool { return strings.HasSuffix(arg, "="+host) || arg == host })
		})
		if !served {
			t.Errorf("endpoint %s: %s is served by no service on the dispatcher's network (network_mode service:webhook-dispatcher listening on %s)", ep.ID, ep.LogURL(), host)
		}
	}
}

func mustPort(t *testing.T, s string) uint32 {
	t.Helper()
	port, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		t.Fatalf("port %q: %v", s, err)
	}
	return uint32(port)
}
