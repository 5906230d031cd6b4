package console

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/operator"
)

// fleetReadTimeout bounds each fleet read of a page, so that a Kafka that
// does not answer gives an error state well within the server's write
// timeout.
const fleetReadTimeout = 20 * time.Second

// noFleet says why the queues and relays pages show nothing.
const noFleet = "Queues and relays are not available in this console: it runs without the fleet read layer. Use postctl lag, postctl relays and postctl dlq stats."

const noFleetAPI = "queues and relays are not available: the console runs without the fleet read layer"

// queuesBody is the queues page's data. A part that could not be read is
// nil, with its error saying what to do.
type queuesBody struct {
	Form           histogramForm
	Unavailable    bool
	Queues         *fleet.Queues
	QueuesError    string
	Histogram      *histogramTable
	HistogramError string
}

// queuesAudit is a queues page's view as the audit log keeps it: the
// histogram's window, or that the window asked was refused (its text may
// not even be storable).
type queuesAudit struct {
	Window        *auditedWindow `json:"dead_letters,omitempty"`
	InvalidWindow bool           `json:"invalid_window,omitempty"`
}

// queuesPage shows what waits in Kafka, as postctl lag and postctl dlq
// stats print it: the workers' lag per partition of the jobs topic with
// its member, the retries waiting per tier, and the dead letters of a
// window by reason in buckets. Each part that Kafka did not answer for
// says so in its place; the page is then a 503.
func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request, v visit) {
	d := pageData{Title: "Queues", Nav: "queues"}.forVisit(&v)
	body := queuesBody{Form: readHistogramForm(r.URL.Query()), Unavailable: s.cfg.Fleet == nil}
	if body.Unavailable {
		d.Error, d.Body = noFleet, body
		s.render(w, http.StatusServiceUnavailable, "queues", d)
		return
	}
	hq, formErr := parseHistogramQuery(body.Form, time.Now(), maxPageBuckets)
	audited := queuesAudit{InvalidWindow: formErr != nil}
	if formErr == nil {
		win := window(hq, body.Form.Bucket)
		audited.Window = &win
	}
	// Audited before it is read: nothing is shown without its entry.
	if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, "queues.view", audited, operator.ResultOK, v.client); err != nil {
		s.storeFailed(w, r, &v, "writing the audit entry", err)
		return
	}
	status := http.StatusOK
	// On a failure of the scheduler's group only, Queues is the workers' part.
	if body.Queues, body.QueuesError = s.readQueues(r.Context()); body.QueuesError != "" {
		status = http.StatusServiceUnavailable
	}
	if formErr != nil { // an inputError: its text says which field
		d.Error, status = formErr.Error()+" Correct it and show again.", http.StatusBadRequest
		body.HistogramError = "The dead letters are shown once the window above is corrected."
	} else {
		h, problem := s.readHistogram(r.Context(), hq)
		if problem != "" {
			body.HistogramError, status = problem, http.StatusServiceUnavailable
		} else {
			t := newHistogramTable(h, body.Form.Bucket)
			body.Histogram = &t
		}
	}
	d.Body = body
	s.render(w, status, "queues", d)
}

// readQueues reads the queues, or says what to tell the operator (the
// failure itself is logged), with the workers' part when only the
// scheduler's group failed.
func (s *Server) readQueues(ctx context.Context) (q *fleet.Queues, problem string) {
	ctx, cancel := context.WithTimeout(ctx, fleetReadTimeout)
	defer cancel()
	read, err := s.cfg.Fleet.Queues(ctx)
	if err == nil {
		return &read, ""
	}
	s.log.Error("console: reading the queues failed", "error", err)
	var ge *fleet.GroupLagError
	switch {
	case errors.As(err, &ge) && ge.Scheduler:
		return &read, "The console could not read the retry scheduler's group " + ge.Group +
			" on the delay topics from Kafka. Check that Kafka answers (postctl status) and that POSTLINE_SCHEDULER_GROUP, " +
			"POSTLINE_RETRY_TOPIC_PREFIX and POSTLINE_RETRY_TIERS are the retry scheduler's, then reload."
	case errors.As(err, &ge):
		return nil, "The console could not read the lag of the workers' group " + ge.Group +
			" on the jobs topic from Kafka. Check that Kafka answers (postctl status) and that POSTLINE_CONSUMER_GROUP " +
			"and POSTLINE_JOBS_TOPIC are the workers', then reload."
	case errors.Is(err, fleet.ErrNotConfigured):
		return nil, "This console reads no queues: it runs without the jobs topic and the workers' group. Use postctl lag."
	}
	return nil, "The console could not read the queues from Kafka. Check that Kafka answers (postctl status), then reload."
}

// readHistogram counts the dead letters of q's window by reason, or says
// what to tell the operator.
func (s *Server) readHistogram(ctx context.Context, q fleet.HistogramQuery) (fleet.Histogram, string) {
	ctx, cancel := context.WithTimeout(ctx, fleetReadTimeout)
	defer cancel()
	read, err := s.cfg.Fleet.DeadLetterHistogram(ctx, q)
	if err == nil {
		return read, ""
	}
	s.log.Error("console: counting dead letters failed", "error", err)
	var qe *fleet.QueryError
	switch {
	case errors.As(err, &qe):
		return fleet.Histogram{}, "The window was refused (" + qe.Error() + "). Take a larger bucket or a shorter window."
	case errors.Is(err, fleet.ErrNotConfigured):
		return fleet.Histogram{}, "This console counts no dead letters: it runs without the dead-letter topic. Use postctl dlq stats."
	}
	return fleet.Histogram{}, "The console could not read the dead-letter topic (POSTLINE_DLQ_TOPIC) from Kafka. " +
		"Check that Kafka answers (postctl status), then reload; a shorter window reads less."
}
