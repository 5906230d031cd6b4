package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/postline/postline/internal/redrive"
)

// keptRuns is how many finished re-drive runs a console remembers.
const keptRuns = 20

// redriveRun is one re-drive started from the console, in the memory of
// the console process that runs it.
type redriveRun struct {
	ID       string
	Operator string
	Form     redriveForm
	Planned  int // what the count said it would re-drive
	Started  time.Time

	mu       sync.Mutex
	progress redrive.Summary
	finished time.Time
	failure  string
}

// runView is a run as a page shows it, copied under its lock.
type runView struct {
	ID, Operator string
	Form         redriveForm
	Planned      int
	Started      time.Time
	Progress     redrive.Summary
	Done         bool
	Finished     time.Time
	Failure      string
}

func (r *redriveRun) view() runView {
	r.mu.Lock()
	defer r.mu.Unlock()
	return runView{ID: r.ID, Operator: r.Operator, Form: r.Form, Planned: r.Planned, Started: r.Started, Progress: r.progress,
		Done: !r.finished.IsZero(), Finished: r.finished, Failure: r.failure}
}

func (r *redriveRun) update(s redrive.Summary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress = s
}

func (r *redriveRun) finish(s redrive.Summary, failure string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress, r.failure, r.finished = s, failure, at
}

// redriveRuns are the console's re-drive runs: one under way at a time
// per console process (a second one is refused until it ends), and the
// last keptRuns. They live in memory: a restart forgets them (the audit
// log keeps every run's start and result), and another replica does not
// see them.
type redriveRuns struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	active *redriveRun
	byID   map[string]*redriveRun
	order  []string // oldest first
}

func newRedriveRuns() *redriveRuns {
	ctx, cancel := context.WithCancel(context.Background())
	return &redriveRuns{ctx: ctx, cancel: cancel, byID: map[string]*redriveRun{}}
}

// start runs do in the background as a new run, unless one is under way:
// then it returns that one and false. do's context ends with stop.
func (rs *redriveRuns) start(run *redriveRun, do func(ctx context.Context, run *redriveRun)) (*redriveRun, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.active != nil {
		return rs.active, false
	}
	run.ID = newRunID()
	rs.active, rs.byID[run.ID] = run, run
	rs.order = append(rs.order, run.ID)
	if len(rs.order) > keptRuns {
		delete(rs.byID, rs.order[0])
		rs.order = rs.order[1:]
	}
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		do(rs.ctx, run)
		rs.mu.Lock()
		rs.active = nil
		rs.mu.Unlock()
	}()
	return run, true
}

// get is the run id, if remembered.
func (rs *redriveRuns) get(id string) (*redriveRun, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.byID[id]
	return r, ok
}

// recent are the remembered runs, newest first.
func (rs *redriveRuns) recent() []runView {
	rs.mu.Lock()
	runs := make([]*redriveRun, 0, len(rs.order))
	for _, id := range slices.Backward(rs.order) {
		runs = append(runs, rs.byID[id])
	}
	rs.mu.Unlock()
	out := make([]runView, len(runs))
	for i, r := range runs {
		out[i] = r.view()
	}
	return out
}

// stop ends the run under way, if any, and waits for it.
func (rs *redriveRuns) stop() {
	rs.cancel()
	rs.wg.Wait()
}

func newRunID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail
	return hex.EncodeToString(b)
}
