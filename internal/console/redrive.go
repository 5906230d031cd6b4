package console

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/redrive"
)

// noRedrive says why the re-drive and dead-letter pages do nothing.
const noRedrive = "Re-drive is not available: this console runs without Kafka's dead-letter topic (or its jobs and events topics). Use postctl dlq redrive, or start the console with its Kafka settings."

// runRefreshSeconds is how often a run's page reloads while it is under way.
const runRefreshSeconds = 2

// redriveBody is the re-drive page's data.
type redriveBody struct {
	Form                 redriveForm
	Plan                 *redrive.Summary
	DefaultRate, MaxRate float64
	Unavailable          bool
	Running              *runView
	Runs                 []runView
}

func (s *Server) newRedriveBody(f redriveForm) redriveBody {
	b := redriveBody{Form: f, DefaultRate: redrive.DefaultRate, MaxRate: redrive.MaxRate, Unavailable: s.cfg.Redrive == nil,
		Runs: s.runs.recent()}
	for i := range b.Runs {
		if !b.Runs[i].Done {
			b.Running = &b.Runs[i]
		}
	}
	return b
}

// redrivePage shows the re-drive form, pre-filled from the query (a mail's
// page, the dead-letter list), and the console's recent runs. Viewers see
// the runs but no form.
func (s *Server) redrivePage(w http.ResponseWriter, r *http.Request, v visit) {
	f := readRedriveForm(r.URL.Query())
	f.Rate, f.Note = "", ""
	d := pageData{Title: "Re-drive dead letters", Nav: "redrive", Body: s.newRedriveBody(f)}.forVisit(&v)
	if s.cfg.Redrive == nil {
		d.Error = noRedrive
	}
	s.render(w, http.StatusOK, "redrive", d)
}

// auditedRedrive is a re-drive's count, start or end as the audit log
// keeps it.
type auditedRedrive struct {
	RunID  string           `json:"run_id,omitempty"`
	Filter redriveForm      `json:"filter"`
	Result *redrive.Summary `json:"result,omitempty"`
	Error  string           `json:"error,omitempty"`
}

// countRedrive is step 1: it checks the form and counts what a re-drive
// would take now (redrive's Plan, which changes nothing), then shows the
// counts with a confirmation form carrying the same filter.
func (s *Server) countRedrive(ctx context.Context, r *http.Request, v visit) (outcome, error) {
	req, err := parseRedrive(readRedriveForm(r.PostForm), consoleActor(v.session.Operator), time.Now())
	target := auditedRedrive{Filter: req.form}
	if err != nil {
		return outcome{target: target}, err
	}
	if s.cfg.Redrive == nil {
		return outcome{target: target}, unavailableError{noRedrive}
	}
	plan, err := s.cfg.Redrive.Plan(ctx, req.filter)
	if err != nil {
		s.log.Error("console: counting a re-drive failed", "operator", v.session.Operator, "error", err)
		return outcome{target: target}, unavailableError{"The console could not read the dead-letter topic (Kafka) or the mail rows (PostgreSQL): nothing was changed. Check postctl status, then count again."}
	}
	target.Result = &plan
	body := s.newRedriveBody(req.form)
	body.Plan = &plan
	return outcome{target: target, page: "redrive", data: pageData{Title: "Re-drive dead letters", Nav: "redrive", Body: body}}, nil
}

// startRedrive is step 2: it checks the confirmed form again and starts
// the re-drive in the background, then shows its run's page. One run at a
// time per console process.
func (s *Server) startRedrive(_ context.Context, r *http.Request, v visit) (any, string, error) {
	req, err := parseRedrive(readRedriveForm(r.PostForm), consoleActor(v.session.Operator), time.Now())
	target := auditedRedrive{Filter: req.form}
	if err != nil {
		return target, "", err
	}
	if s.cfg.Redrive == nil {
		return target, "", unavailableError{noRedrive}
	}
	planned, _ := strconv.Atoi(r.PostForm.Get("planned")) // shown only, as "of about N"
	run, started := s.runs.start(&redriveRun{Operator: v.session.Operator, Form: req.form, Planned: max(planned, 0), Started: time.Now()},
		func(ctx context.Context, run *redriveRun) { s.redrive(ctx, run, req, v) })
	if !started {
		return target, "", inputError{"A re-drive is under way already (run " + run.ID + ", by " + run.Operator +
			"): this console runs one at a time. Wait until its page says done, then count again."}
	}
	target.RunID = run.ID
	return target, "/redrive/runs/" + run.ID, nil
}

// redrive runs req as run, then records its result in the run and the
// audit log.
func (s *Server) redrive(ctx context.Context, run *redriveRun, req redriveRequest, v visit) {
	opts := req.opts
	opts.Progress = run.update
	sum, err := s.cfg.Redrive.Run(ctx, req.filter, opts)
	target, result, failure := auditedRedrive{RunID: run.ID, Filter: req.form, Result: &sum}, operator.ResultOK, ""
	if err != nil {
		s.log.Error("console: re-drive failed", "run", run.ID, "operator", v.session.Operator, "redriven", sum.Redriven, "error", err)
		result, failure = operator.ResultFailed, err.Error()
		target.Error = failure
	}
	run.finish(sum, failure, time.Now())
	// The request that started the run is long gone: its end is recorded
	// on a context of its own.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s.audit(actx, v, "redrive.run.done", target, result)
}

// redriveRunPage shows a run's progress, reloading itself until it is done.
func (s *Server) redriveRunPage(w http.ResponseWriter, r *http.Request, v visit) {
	run, ok := s.runs.get(r.PathValue("id"))
	if !ok {
		s.fail(w, r, &v, http.StatusNotFound, "This console has no such re-drive run: runs are kept in the memory of the console process that started them (its last "+
			strconv.Itoa(keptRuns)+"), which a restart or another replica does not share. The audit log (redrive.run.done) has every run's result.")
		return
	}
	view := run.view()
	d := pageData{Title: "Re-drive " + view.ID, Nav: "redrive", Body: view}.forVisit(&v)
	if !view.Done {
		d.Refresh = runRefreshSeconds
	}
	s.render(w, http.StatusOK, "redriverun", d)
}
