package console

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/webhook"
)

// MailReader finds mail and reads a mail's life: internal/mailquery's
// Reader. Life's error for an unknown Message-ID wraps Config.NotFound.
type MailReader interface {
	Find(ctx context.Context, f mailquery.Filter) (mailquery.Page, error)
	Life(ctx context.Context, messageID string) (mailquery.Life, error)
}

// Suppressions are the suppression lists (a *suppression.Store).
type Suppressions interface {
	List(ctx context.Context, f suppression.Filter) ([]suppression.Entry, error)
	Add(ctx context.Context, entries []suppression.Entry) (int, error)
	Remove(ctx context.Context, keys []suppression.Key) (int, error)
	// Check and Import serve an import: which keys are listed already,
	// then every entry in one transaction.
	Check(ctx context.Context, keys []suppression.Key) (map[suppression.Key]suppression.Entry, error)
	Import(ctx context.Context, entries []suppression.Entry) (int, error)
}

// Redriver lists, counts and re-drives dead letters (a *redrive.Redriver
// with its Store, Lists, Publisher and Events).
type Redriver interface {
	List(ctx context.Context, f redrive.Filter, fn func(redrive.DeadLetter) error) error
	Plan(ctx context.Context, f redrive.Filter) (redrive.Summary, error)
	Run(ctx context.Context, f redrive.Filter, o redrive.Options) (redrive.Summary, error)
}

// WebhookQueue is the webhook dispatchers' per-endpoint state and queue
// (a *webhook.Queue).
type WebhookQueue interface {
	Endpoints(ctx context.Context) ([]webhook.EndpointReport, error)
	SetDisabled(ctx context.Context, endpoint string, disable bool, reason, actor string, now time.Time) (bool, error)
	Replay(ctx context.Context, f webhook.ReplayFilter, rate float64, dryRun bool, actor string, now time.Time) (int, error)
	Requeue(ctx context.Context, ps []webhook.Pending, rate float64, selected webhook.ReplayFilter, actor string, now time.Time) (int, error)
	Log(ctx context.Context, endpoint string, limit int) ([]webhook.LogEntry, error)
}

// FleetReader reads the fleet views the queues and relays pages show, as
// postctl lag, relays and dlq stats print them (a *fleet.Reader).
type FleetReader interface {
	Queues(ctx context.Context) (fleet.Queues, error)
	Relays(ctx context.Context) (fleet.Relays, error)
	DeadLetterHistogram(ctx context.Context, q fleet.HistogramQuery) (fleet.Histogram, error)
}

// Accounts log operators in and out and find their sessions (an
// *operator.Store).
type Accounts interface {
	Login(ctx context.Context, name, password, client string) (operator.Session, error)
	Lookup(ctx context.Context, token string) (operator.Session, error)
	Logout(ctx context.Context, token string) error
}

// Audit is the audit log (an *operator.AuditLog).
type Audit interface {
	Write(ctx context.Context, actor, action string, target any, result, client string) error
	Read(ctx context.Context, f operator.AuditFilter) ([]operator.AuditEntry, error)
}

// Config is what a Server serves from.
type Config struct {
	Accounts     Accounts
	Audit        Audit
	Suppressions Suppressions
	// Mail is the mail read layer; nil leaves the search and mail pages
	// saying so.
	Mail MailReader
	// NotFound is the error Mail.Life's error wraps for a Message-ID no
	// mail has (mailquery.ErrNotFound): that mail's page is a 404.
	NotFound error
	// Redrive is the dead-letter topic's re-drive; nil leaves the
	// re-drive and dead-letter pages saying so.
	Redrive Redriver
	// Webhooks is the webhook endpoints' queue; nil leaves the webhooks
	// page saying so.
	Webhooks WebhookQueue
	// WebhookEvents reads the events topic from a time on, for a replay
	// of events from the topic; nil offers the endpoints' dead letters
	// only.
	WebhookEvents func(from time.Time) webhook.EventScanner
	// Fleet reads the queues' lag, the dead letters by reason and the
	// relays' breakers and rates; nil leaves the queues and relays pages
	// saying so.
	Fleet FleetReader
	// Secure is true when the console is served over TLS: cookies are
	// Secure (with the __Host- prefix) and HSTS is sent.
	Secure bool
	// Logger gets request failures; nil discards them.
	Logger *slog.Logger
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Server is the console's http.Handler.
type Server struct {
	cfg     Config
	pages   *pages
	mux     *http.ServeMux
	log     *slog.Logger
	runs    *redriveRuns
	imports *pendingImports
}

// New returns the console's handler.
func New(cfg Config) (*Server, error) {
	if cfg.Accounts == nil || cfg.Audit == nil || cfg.Suppressions == nil {
		return nil, errors.New("console: Accounts, Audit and Suppressions are required")
	}
	if cfg.Mail != nil && cfg.NotFound == nil {
		return nil, errors.New("console: NotFound is required with Mail: without it an unknown Message-ID reads as a failure")
	}
	pg, err := parsePages(templateFS)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, pages: pg, mux: http.NewServeMux(), log: logger, runs: newRedriveRuns(), imports: newPendingImports()}
	s.routes()
	return s, nil
}

// routes registers every page, action and API call.
func (s *Server) routes() {
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles(static)))
	s.mux.HandleFunc("GET /login", s.loginForm)
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.Handle("POST /logout", s.signedIn(s.logout))
	s.mux.Handle("GET /{$}", http.RedirectHandler("/mail", http.StatusSeeOther))
	s.mux.Handle("GET /mail", s.page(s.searchPage))
	s.mux.Handle("GET /mail/view", s.page(s.lifePage))
	s.mux.Handle("GET /suppressions", s.page(s.suppressionsPage))
	s.mux.Handle("POST /suppressions/add", s.action("suppression.add", s.addSuppression))
	s.mux.Handle("POST /suppressions/remove", s.action("suppression.remove", s.removeSuppression))
	s.mux.Handle("GET /suppressions/import", s.page(s.importPage))
	s.mux.Handle("POST /suppressions/import/preview", s.guarded("suppression.import.preview", maxUploadBytes, s.previewImport))
	s.mux.Handle("POST /suppressions/import", s.action("suppression.import", s.confirmImport))
	s.mux.Handle("GET /deadletters", s.page(s.deadLettersPage))
	s.mux.Handle("GET /redrive", s.page(s.redrivePage))
	s.mux.Handle("POST /redrive/count", s.guarded("redrive.count", 0, s.countRedrive))
	s.mux.Handle("POST /redrive/run", s.action("redrive.run", s.startRedrive))
	s.mux.Handle("GET /redrive/runs/{id}", s.page(s.redriveRunPage))
	s.mux.Handle("GET /webhooks", s.page(s.webhooksPage))
	s.mux.Handle("POST /webhooks/enable", s.action("webhook.enable", s.setWebhook(false)))
	s.mux.Handle("POST /webhooks/disable", s.action("webhook.disable", s.setWebhook(true)))
	s.mux.Handle("GET /webhooks/replay", s.page(s.webhookReplayPage))
	s.mux.Handle("POST /webhooks/replay/count", s.guarded("webhook.replay.count", 0, s.countWebhookReplay))
	s.mux.Handle("POST /webhooks/replay", s.action("webhook.replay", s.replayWebhook))
	s.mux.Handle("GET /queues", s.page(s.queuesPage))
	s.mux.Handle("GET /relays", s.page(s.relaysPage))
	s.mux.Handle("GET /audit", s.page(s.auditPage))
	s.mux.Handle("GET /api/v1/mail", s.api(s.apiSearch))
	s.mux.Handle("GET /api/v1/mail/life", s.api(s.apiLife))
	s.mux.Handle("GET /api/v1/queues", s.fleetAPI(s.apiQueues))
	s.mux.Handle("GET /api/v1/deadletters/histogram", s.fleetAPI(s.apiHistogram))
	s.mux.Handle("GET /api/v1/relays", s.fleetAPI(s.apiRelays))
}

// ServeHTTP implements http.Handler: every response carries the security
// headers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header(), s.cfg.Secure)
	s.mux.ServeHTTP(w, r)
}

// Close stops a re-drive under way (its rows stay as a stopped re-drive
// leaves them: see internal/redrive) and waits until its end is recorded.
// The server keeps serving pages.
func (s *Server) Close() { s.runs.stop() }

// notFound reports whether err is the mail reader's "no such mail".
func (s *Server) notFound(err error) bool {
	return s.cfg.NotFound != nil && errors.Is(err, s.cfg.NotFound)
}
