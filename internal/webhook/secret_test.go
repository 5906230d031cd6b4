package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestSecretNeverPrinted(t *testing.T) {
	ep := Endpoint{ID: "billing", URL: mustURL(t, "https://b.example/h?token=x"), SecretEnv: "BILLING_SECRET", Secret: Secret(testSecret)}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("endpoint", "endpoint", ep, "secret", ep.Secret)
	j, err := json.Marshal(ep)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprintf("%v", ep), fmt.Sprintf("%+v", ep), fmt.Sprintf("%#v", ep), fmt.Sprint(ep.Secret),
		fmt.Sprintf("%s", ep.Secret), logs.String(), string(j)} {
		if strings.Contains(out, testSecret[6:]) {
			t.Errorf("the secret shows in %s", out)
		}
		if !strings.Contains(out, "[redacted]") {
			t.Errorf("no [redacted] in %s", out)
		}
	}
	if string(ep.Secret) != testSecret {
		t.Error("the value itself changed")
	}
}
