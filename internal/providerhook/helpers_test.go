package providerhook

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/report"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sample reads a file of testdata.
func sample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bounceToken is the TokenFunc of the tests: bounce+<token>@bounces.example.net.
func bounceToken(addr string) (string, bool) {
	local, domain, ok := strings.Cut(addr, "@")
	if !ok || domain != "bounces.example.net" {
		return "", false
	}
	tok, ok := strings.CutPrefix(local, "bounce+")
	return tok, ok && tok != ""
}

// sink is a Reports that records what it is given and fails while err is set.
type sink struct {
	mu    sync.Mutex
	calls [][]report.Report
	err   error
}

func (s *sink) ApplySigned(_ context.Context, reports []report.Report) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.calls = append(s.calls, reports)
	return nil
}

func (s *sink) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *sink) got() [][]report.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]report.Report(nil), s.calls...)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// post sends body to h and returns the status code.
func post(t testing.TB, h http.Handler, body []byte) int {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)))
	return w.Code
}

func requests(t testing.TB, m *metrics, result string) float64 {
	t.Helper()
	return testutil.ToFloat64(m.requests.WithLabelValues(m.provider, result))
}

// testKey is one RSA key for the whole run: generating it is slow.
var testKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// otherKey is a second key, for signatures the served certificate does not
// verify.
var otherKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// snsServer plays Amazon SNS's side: it serves the signing certificate of
// testKey at /cert.pem and counts confirmations at /confirm.
type snsServer struct {
	*httptest.Server
	certFetches atomic.Int64
	confirms    atomic.Int64
	failCert    atomic.Bool
}

func newSNSServer(t *testing.T) *snsServer {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sns.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &testKey().PublicKey, testKey())
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	s := &snsServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cert.pem", func(w http.ResponseWriter, _ *http.Request) {
		s.certFetches.Add(1)
		if s.failCert.Load() {
			http.Error(w, "unavailable", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(certPEM)
	})
	mux.HandleFunc("GET /confirm", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("Token") == "" {
			http.Error(w, "no token", http.StatusBadRequest)
			return
		}
		s.confirms.Add(1)
		_, _ = w.Write([]byte("<ConfirmSubscriptionResponse/>"))
	})
	s.Server = httptest.NewTLSServer(mux)
	t.Cleanup(s.Close)
	return s
}

// sesConfig is a config whose host check allows the test server only.
func (s *snsServer) sesConfig() SESConfig {
	return SESConfig{
		SNSHostPattern: `^127\.0\.0\.1$`,
		HTTPClient:     s.Client(),
		Token:          bounceToken,
	}
}

// sign sets m's SigningCertURL to the test server and its Signature, by key,
// of m's canonical text with the hash of version.
func (s *snsServer) sign(t testing.TB, m *snsMessage, version string, key *rsa.PrivateKey) {
	t.Helper()
	m.SigningCertURL = s.URL + "/cert.pem"
	m.SignatureVersion = version
	signWith(t, m, key)
}

func signWith(t testing.TB, m *snsMessage, key *rsa.PrivateKey) {
	t.Helper()
	canonical, err := m.stringToSign()
	if err != nil {
		t.Fatal(err)
	}
	var sig []byte
	switch m.SignatureVersion {
	case "1":
		d := sha1.Sum([]byte(canonical))
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA1, d[:])
	default:
		d := sha256.Sum256([]byte(canonical))
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	m.Signature = base64.StdEncoding.EncodeToString(sig)
}

// envelope returns the published SNS envelope of kind ("notification",
// "subscription-confirmation", "unsubscribe-confirmation"), unsigned.
func envelope(t testing.TB, kind string) *snsMessage {
	t.Helper()
	var m snsMessage
	if err := json.Unmarshal(sample(t, "sns/"+kind+".json"), &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// sesNotificationMessage wraps the published SES document file in the
// published SNS Notification envelope, signed by the test server.
func (s *snsServer) sesNotificationMessage(t testing.TB, file, version string) *snsMessage {
	t.Helper()
	m := envelope(t, "notification")
	m.Subject = nil // SES notifications carry no Subject
	m.Message = string(sample(t, "ses/"+file))
	s.sign(t, m, version, testKey())
	return m
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newTestSES(t *testing.T, cfg SESConfig, reports Reports) *SES {
	t.Helper()
	h, err := NewSES(cfg, reports, discard(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

var errApply = errors.New("store unavailable")

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}
