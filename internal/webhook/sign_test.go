package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// testSecret is a Standard Webhooks secret of 24 bytes.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestSignVerifiesWithTheLibrary(t *testing.T) {
	s, err := NewSigner(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"schema":"postline.event/v1","id":"evt_0123456789abcdef0123456789abcdef","type":"delivered"}`)
	h := http.Header{}
	now := time.Now()
	if err := s.Sign(h, "evt_0123456789abcdef0123456789abcdef", now, body); err != nil {
		t.Fatal(err)
	}
	if h.Get(HeaderID) != "evt_0123456789abcdef0123456789abcdef" || h.Get(HeaderTimestamp) != strconv.FormatInt(now.Unix(), 10) ||
		!strings.HasPrefix(h.Get(HeaderSignature), "v1,") {
		t.Fatalf("headers = %v", h)
	}
	wh, err := standardwebhooks.NewWebhook(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(body, h); err != nil {
		t.Errorf("library Verify: %v", err)
	}
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-3] = 'X'
	if err := wh.Verify(tampered, h); err == nil {
		t.Error("library Verify accepted a changed body")
	}
	other, _ := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte("another-secret-of-24-byt")))
	if err := other.Verify(body, h); err == nil {
		t.Error("library Verify accepted another secret")
	}
}

// An independent check of the signature: base64 of HMAC-SHA256, keyed with
// the decoded secret, of "id.timestamp.body", with the known vector of the
// Standard Webhooks test suite.
func TestSignMatchesHandComputedHMAC(t *testing.T) {
	s, err := NewSigner(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	id, ts, body := "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`)
	h := http.Header{}
	if err := s.Sign(h, id, ts, body); err != nil {
		t.Fatal(err)
	}
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(testSecret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if got := h.Get(HeaderSignature); got != want {
		t.Errorf("signature %q, hand-computed %q", got, want)
	}
	// The published vector for this id, time, body and secret.
	if got := h.Get(HeaderSignature); got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Errorf("signature %q differs from the Standard Webhooks test vector", got)
	}
}

func TestNewSignerErrorsKeepTheSecret(t *testing.T) {
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	long := "whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 65)))
	tests := []struct{ secret, want string }{
		{"", "secret is empty"},
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", `secret does not start with "whsec_"`},
		{"whsec_not*base64*at*all", `secret after "whsec_" is not standard base64`},
		{short, "secret holds 16 bytes, want 24 to 64"},
		{long, "secret holds 65 bytes, want 24 to 64"},
	}
	for _, tt := range tests {
		_, err := NewSigner(tt.secret)
		if err == nil || err.Error() != tt.want {
			t.Errorf("NewSigner(%q) = %v, want %q", tt.secret, err, tt.want)
			continue
		}
		if rest := strings.TrimPrefix(tt.secret, "whsec_"); rest != "" && strings.Contains(err.Error(), rest[:8]) {
			t.Errorf("error %q shows the secret", err)
		}
	}
	if _, err := NewSigner("whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 64)))); err != nil {
		t.Errorf("64-byte secret: %v", err)
	}
}
