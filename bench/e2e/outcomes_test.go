package main

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/webhook"
)

// TestWebhookEndpoint: requests signed as the dispatcher signs them are
// taken (204) and counted once per event; copies count as requests only;
// a request that does not verify is refused (400) and counted as bad.
func TestWebhookEndpoint(t *testing.T) {
	secret, err := newWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	other, err := newWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	clock := t0
	ep, err := newWebhookEndpoint(secret, func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	signer, err := webhook.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := webhook.NewSigner(other)
	if err != nil {
		t.Fatal(err)
	}
	post := func(s *webhook.Signer, method, id string, signed, sent []byte) int {
		t.Helper()
		r := httptest.NewRequest(method, "/hooks", bytes.NewReader(sent))
		if err := s.Sign(r.Header, id, time.Now(), signed); err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		ep.ServeHTTP(w, r)
		return w.Code
	}
	body := []byte(`{"schema":"postline.event/v1","id":"evt_1","type":"accepted"}`)
	steps := []struct {
		name     string
		do       func() int
		wantCode int
		want     endpointStats
	}{
		{"first event", func() int { return post(signer, http.MethodPost, "evt_1", body, body) },
			http.StatusNoContent, endpointStats{Distinct: 1, Requests: 1, LastNew: t0}},
		{"a copy later", func() int {
			clock = t1
			return post(signer, http.MethodPost, "evt_1", body, body)
		}, http.StatusNoContent, endpointStats{Distinct: 1, Requests: 2, LastNew: t0}},
		{"tampered body", func() int { return post(signer, http.MethodPost, "evt_2", body, append(bytes.Clone(body), ' ')) },
			http.StatusBadRequest, endpointStats{Distinct: 1, Requests: 3, Bad: 1, LastNew: t0}},
		{"another secret", func() int { return post(stranger, http.MethodPost, "evt_3", body, body) },
			http.StatusBadRequest, endpointStats{Distinct: 1, Requests: 4, Bad: 2, LastNew: t0}},
		{"not a POST", func() int { return post(signer, http.MethodGet, "evt_4", body, body) },
			http.StatusBadRequest, endpointStats{Distinct: 1, Requests: 5, Bad: 3, LastNew: t0}},
		{"second event", func() int { return post(signer, http.MethodPost, "evt_5", body, body) },
			http.StatusNoContent, endpointStats{Distinct: 2, Requests: 6, Bad: 3, LastNew: t1}},
	}
	for _, st := range steps {
		if code := st.do(); code != st.wantCode {
			t.Errorf("%s: status %d, want %d", st.name, code, st.wantCode)
		}
		if got := ep.stats(); got != st.want {
			t.Errorf("%s: stats %+v, want %+v", st.name, got, st.want)
		}
	}
}

// TestOutcomesSettings: what the variant writes is what the dispatcher and
// the worker accept: the endpoints file parses to the one endpoint, its
// secret signs, and the return path key makes a signer for the domain.
func TestOutcomesSettings(t *testing.T) {
	const url = "http://127.0.0.1:40123/hooks"
	eps, err := webhook.ParseEndpoints([]byte(endpointsFile(url)), false)
	if err != nil {
		t.Fatalf("endpoints file: %v\n%s", err, endpointsFile(url))
	}
	if len(eps) != 1 || eps[0].ID != outcomesEndpointID || eps[0].URL.String() != url ||
		eps[0].SecretEnv != outcomesSecretEnv || len(eps[0].Types) != 0 || len(eps[0].Tenants) != 0 {
		t.Errorf("endpoints = %+v, want one endpoint %s at %s with every type and tenant", eps, outcomesEndpointID, url)
	}
	secret, err := newWebhookSecret()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.NewSigner(secret); err != nil {
		t.Errorf("secret refused by the dispatcher's signer: %v", err)
	}
	if again, _ := newWebhookSecret(); again == secret {
		t.Error("two secrets are equal")
	}
	key, err := newReturnPathKey()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := returnpath.ParseKeys(key)
	if err != nil {
		t.Fatalf("return path key refused: %v", err)
	}
	if _, err := returnpath.New(outcomesBounceDomain, keys); err != nil {
		t.Errorf("return path signer: %v", err)
	}
}

func TestLagTracker(t *testing.T) {
	tests := []struct {
		name    string
		samples [][2]int64 // published, received
		endAt   int        // markEnd after this many samples
		max     int64
		end     int64
	}{
		{"keeps up", [][2]int64{{0, 0}, {900, 850}, {2000, 1990}, {3000, 3000}}, 3, 50, 10},
		{"falls behind", [][2]int64{{0, 0}, {1000, 600}, {2000, 1100}, {3000, 1600}, {3000, 3000}}, 4, 1400, 1400},
		{"endpoint counted ahead of the topic", [][2]int64{{100, 105}}, 1, 0, 0},
		{"no samples", nil, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l lagTracker
			for i, s := range tt.samples {
				l.observe(s[0], s[1])
				if i+1 == tt.endAt {
					l.markEnd()
				}
			}
			if l.max != tt.max || l.end != tt.end || l.samples != len(tt.samples) {
				t.Errorf("max %d, end %d, %d samples; want %d, %d, %d", l.max, l.end, l.samples, tt.max, tt.end, len(tt.samples))
			}
		})
	}
}

func TestSumEndOffsets(t *testing.T) {
	ok := []kafka.PartitionOffsets{{Partition: 0, LastOffset: 10}, {Partition: 1, LastOffset: 0}, {Partition: 2, LastOffset: 32}}
	if n, err := sumEndOffsets(ok, 3); err != nil || n != 42 {
		t.Errorf("sumEndOffsets = %d, %v; want 42", n, err)
	}
	if _, err := sumEndOffsets(ok[:2], 3); err == nil || !strings.Contains(err.Error(), "2 of 3") {
		t.Errorf("a missing partition: err %v", err)
	}
	bad := append([]kafka.PartitionOffsets{}, ok...)
	bad[1].Error = errors.New("not leader")
	if _, err := sumEndOffsets(bad, 3); err == nil || !strings.Contains(err.Error(), "partition 1") {
		t.Errorf("a partition's error: err %v", err)
	}
}

// BenchmarkWebhookEndpoint is the endpoint's cost per request without the
// network: reading the body, verifying the signature and counting the
// event. It is what verifying every request, not a sample, costs the
// harness (whose CPU the outcomes row counts as the injector's).
func BenchmarkWebhookEndpoint(b *testing.B) {
	secret, err := newWebhookSecret()
	if err != nil {
		b.Fatal(err)
	}
	ep, err := newWebhookEndpoint(secret, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	signer, err := webhook.NewSigner(secret)
	if err != nil {
		b.Fatal(err)
	}
	// An accepted event is about 400 bytes.
	body := []byte(`{"schema":"postline.event/v1","id":"evt_a854a274513a1a73022979f35737675e","type":"accepted","at":"2026-12-01T14:02:07.412Z",` +
		`"message_id":"bench-1234@postline.test","stream":"transactional","recipient":"rcpt1234@sink.postline.test","recipient_index":0,` +
		`"attempt":0,"provider":"primary","confirm_by":"2026-12-02T14:02:07.412Z"}`)
	h := http.Header{}
	if err := signer.Sign(h, "evt_a854a274513a1a73022979f35737675e", time.Now(), body); err != nil {
		b.Fatal(err)
	}
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
		r.Header = h
		ep.ServeHTTP(w, r)
	}
	if st := ep.stats(); st.Bad != 0 {
		b.Fatalf("%d requests did not verify", st.Bad)
	}
}
