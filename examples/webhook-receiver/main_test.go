package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postline/postline/event"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A signed event is taken once, a copy is counted as a copy, a forged
// signature is rejected, and /stats reports all three.
func TestReceiverVerifiesDedupesAndCounts(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{verifier: wh, logger: slog.New(slog.DiscardHandler), seen: map[string]bool{}, stats: stats{ByType: map[event.Type]int{}}}
	srv := httptest.NewServer(rc)
	defer srv.Close()

	e := event.Event{Schema: event.Schema, ID: "evt_1", Type: event.Bounced, At: time.Now().UTC(), MessageID: "m@x",
		Stream: event.StreamTransactional, Recipient: "r@example.com", Bounce: &event.Bounce{Type: event.BounceHard, Source: "dsn"}}
	body, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	post := func(sig string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hooks", strings.NewReader(string(body)))
		ts := time.Now()
		if sig == "" {
			if sig, err = wh.Sign(e.ID, ts, body); err != nil {
				t.Fatal(err)
			}
		}
		req.Header.Set("webhook-id", e.ID)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(""); got != http.StatusNoContent {
		t.Errorf("signed: %d, want 204", got)
	}
	if got := post(""); got != http.StatusNoContent {
		t.Errorf("copy: %d, want 204", got)
	}
	if got := post("v1,Zm9yZ2VkIHNpZ25hdHVyZSBvZiB0aGlydHktdHdvIGJ5dGVzISE="); got != http.StatusBadRequest {
		t.Errorf("forged: %d, want 400", got)
	}
	resp, err := http.Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Verified != 2 || st.Copies != 1 || st.Rejected != 1 || st.ByType[event.Bounced] != 1 {
		t.Errorf("stats %+v, want 2 verified, 1 copy, 1 rejected, 1 bounced", st)
	}
}
