// Command webhook-receiver is a minimal application endpoint for Postline's
// webhooks: it verifies each request's Standard Webhooks signature with the
// standard library for it, decodes the event, drops copies by their
// webhook-id (delivery is at least once), and answers 204. GET /stats
// returns what it took, as JSON: the demo reads it, and an application can
// start from this file.
//
//	WEBHOOK_SECRET=whsec_... webhook-receiver -addr 127.0.0.1:8090
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postline/postline/event"
)

// maxBody bounds a request's body; an event is a few KB.
const maxBody = 1 << 20

// stats is what the receiver took.
type stats struct {
	Verified int                `json:"verified"` // requests whose signature verified
	Rejected int                `json:"rejected"` // requests whose signature or body did not
	Copies   int                `json:"copies"`   // verified requests for an event already taken
	ByType   map[event.Type]int `json:"by_type"`  // distinct events by type
}

type receiver struct {
	verifier *standardwebhooks.Webhook
	logger   *slog.Logger

	mu    sync.Mutex
	seen  map[string]bool
	stats stats
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/stats" {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rc.stats)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST events here, GET /stats", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err == nil {
		// Verify checks the HMAC over id.timestamp.body and that the
		// timestamp is recent, so a captured request cannot be replayed.
		err = rc.verifier.Verify(body, r.Header)
	}
	var e event.Event
	if err == nil {
		e, err = event.Decode(body)
	}
	if err == nil && e.ID != r.Header.Get("webhook-id") {
		err = errors.New("webhook-id is not the event's id")
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err != nil {
		rc.stats.Rejected++
		rc.logger.Warn("webhook rejected", "err", err)
		http.Error(w, "signature or body does not verify", http.StatusBadRequest)
		return
	}
	rc.stats.Verified++
	if rc.seen[e.ID] {
		rc.stats.Copies++
	} else {
		rc.seen[e.ID] = true
		rc.stats.ByType[e.Type]++
		rc.logger.Info("event", "type", e.Type, "message_id", e.MessageID, "at", e.At)
	}
	w.WriteHeader(http.StatusNoContent)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "address to listen on")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	verifier, err := standardwebhooks.NewWebhook(os.Getenv("WEBHOOK_SECRET"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook-receiver: WEBHOOK_SECRET:", err)
		os.Exit(2)
	}
	rc := &receiver{verifier: verifier, logger: logger, seen: map[string]bool{}, stats: stats{ByType: map[event.Type]int{}}}
	srv := &http.Server{Addr: *addr, Handler: rc, ReadHeaderTimeout: 5 * time.Second}
	logger.Info("webhook-receiver listening", "addr", *addr)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "webhook-receiver:", err)
		os.Exit(1)
	}
}
