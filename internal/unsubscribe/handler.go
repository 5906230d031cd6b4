package unsubscribe

import (
	"context"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// MaxBodyBytes bounds what a POST's body is read of: RFC 8058's is
// "List-Unsubscribe=One-Click", and nothing in it is needed.
const MaxBodyBytes = 4 << 10

// DefaultApplyTimeout bounds one POST's work (a read and a write of the
// suppression list, an event); past it the client is answered 503.
const DefaultApplyTimeout = 10 * time.Second

// Handler serves the one-click links under Path: a POST to Path/<token>
// unsubscribes (RFC 8058 sends the body List-Unsubscribe=One-Click; any
// POST to a valid token is taken), a GET shows a short page with a button
// that POSTs and changes nothing (mail scanners follow links), anything
// else is 405. A valid POST is answered 200 whether it changed anything
// or not, a token that is not valid 400, a failure of the lists or the
// events topic 503 with Retry-After. Register it on a mux for Path + "/".
type Handler struct {
	applier *Applier
	logger  *slog.Logger
	timeout time.Duration
}

// NewHandler returns the Handler of applier. A nil logger discards logs.
func NewHandler(applier *Applier, logger *slog.Logger) *Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{applier: applier, logger: logger, timeout: DefaultApplyTimeout}
}

var _ http.Handler = (*Handler)(nil)

// page is every answer's HTML: a title, a line, and on a GET of a valid
// link the form that unsubscribes.
var page = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="robots" content="noindex"><title>{{.Title}}</title></head>
<body><h1>{{.Title}}</h1><p>{{.Text}}</p>
{{- if .Form}}
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">Unsubscribe</button></form>
{{- end}}
</body></html>
`))

type pageData struct {
	Title, Text string
	// Form adds the button; the form has no action, so it posts to the
	// link as the browser shows it (a proxy in front may map another path
	// here).
	Form bool
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.URL.Path, Path+"/")
	if !ok || strings.Contains(token, "/") {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodPost:
		h.post(w, r, token)
	case http.MethodGet, http.MethodHead:
		if _, res := h.applier.Check(ChannelGet, token); res != ResultOK {
			h.write(w, http.StatusBadRequest, pageData{Title: "Link not valid",
				Text: "This unsubscribe link is not valid. Use the link of a recent message."})
			return
		}
		h.write(w, http.StatusOK, pageData{Title: "Unsubscribe",
			Text: "Unsubscribe this address from these messages?", Form: true})
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (h *Handler) post(w http.ResponseWriter, r *http.Request, token string) {
	// The body says nothing the token does not; it is read (bounded) so
	// that the connection can carry the next request.
	_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	res, err := h.applier.Apply(ctx, ChannelPost, token)
	switch res {
	case ResultOK, ResultReplayed:
		h.write(w, http.StatusOK, pageData{Title: "Unsubscribed",
			Text: "This address will get no more of these messages."})
	case ResultError:
		h.logger.Warn("unsubscribe not applied; the client is asked to try again", "channel", string(ChannelPost), "error", err)
		w.Header().Set("Retry-After", "30")
		h.write(w, http.StatusServiceUnavailable, pageData{Title: "Try again later",
			Text: "The unsubscribe could not be recorded just now. Please try again in a minute."})
	default:
		h.write(w, http.StatusBadRequest, pageData{Title: "Link not valid",
			Text: "This unsubscribe link is not valid. Use the link of a recent message."})
	}
}

func (h *Handler) write(w http.ResponseWriter, status int, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = page.Execute(w, d)
}
