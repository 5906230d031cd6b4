package deploy

import (
	"strings"
	"testing"

	"github.com/postline/postline/kafkaconn"
)

// TestComposeKafkaTLSMatchesTheListeners checks that every Postline service
// speaks the security protocol of the kafka listener it dials: TLS exactly
// when the listener is SSL or SASL_SSL. The default POSTLINE_KAFKA_TLS=auto
// turns TLS on for any broker off loopback, kafka:9092 included, so a
// plaintext listener needs it off explicitly.
func TestComposeKafkaTLSMatchesTheListeners(t *testing.T) {
	p := loadCompose(t)
	k := service(t, p, "kafka")
	protocols := map[string]string{} // listener name -> security protocol
	for _, entry := range strings.Split(env(k, "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"), ",") {
		if name, protocol, ok := strings.Cut(entry, ":"); ok {
			protocols[name] = protocol
		}
	}
	listenerOf := map[string]string{} // advertised host:port -> listener name
	for _, l := range strings.Split(env(k, "KAFKA_ADVERTISED_LISTENERS"), ",") {
		if name, addr, ok := strings.Cut(l, "://"); ok {
			listenerOf[addr] = name
		}
	}
	checked := 0
	for name := range postlineServices(t, p) {
		s := p.Services[name]
		raw := env(s, "POSTLINE_KAFKA_BROKERS")
		if raw == "" {
			continue
		}
		brokers := strings.Split(raw, ",")
		mode := env(s, "POSTLINE_KAFKA_TLS")
		if mode == "" {
			mode = string(kafkaconn.TLSAuto)
		}
		tlsOn := kafkaconn.Config{Brokers: brokers, TLS: kafkaconn.TLSConfig{Mode: kafkaconn.TLSMode(mode)}}.TLSEnabled()
		for _, b := range brokers {
			protocol := protocols[listenerOf[b]]
			wantTLS := protocol == "SSL" || protocol == "SASL_SSL"
			if tlsOn != wantTLS {
				t.Errorf("service %s: POSTLINE_KAFKA_TLS=%s gives TLS %v towards %s, whose listener %s is %s", name, mode, tlsOn, b, listenerOf[b], protocol)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Error("no Postline service sets POSTLINE_KAFKA_BROKERS: nothing checked")
	}
}
