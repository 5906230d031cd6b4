package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/smtp"
	"net/textproto"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/bounce"
	"github.com/postline/postline/internal/report"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/job"
)

// fate is what happens to one recipient of the mixed-outcome test; the
// recipient's local part starts with it, so the scripted relay and the
// report sender can tell the recipients apart.
type fate string

const (
	fateOK       fate = "ok"       // accepted, then a success DSN: delivered
	fateHard     fate = "hard"     // accepted, then a DSN 550 5.1.1: bounced hard, suppressed everywhere
	fateSoft     fate = "soft"     // accepted, then a DSN 4.2.2 or 5.2.2: bounced soft
	fateComplain fate = "complain" // accepted, then an ARF complaint: complained
	fateSilent   fate = "silent"   // accepted, no report: unconfirmed after the window
	fateGone     fate = "gone"     // refused at RCPT with 550 5.1.1: bounced (smtp)
	fateLater    fate = "later"    // 452 4.2.2 at RCPT once: deferred, accepted on the retry, delivered
	fateListed   fate = "listed"   // on a suppression list before publishing: suppressed at claim
	fateData     fate = "data"     // the mail's DATA is refused with 554: failed
)

// mixedFates are the fates a mail's recipients are drawn from, with their
// weights; fateData is not among them (a mail refused at DATA has only
// such recipients).
func mixedFates() []struct {
	f      fate
	weight int
} {
	return []struct {
		f      fate
		weight int
	}{
		{fateOK, 28}, {fateHard, 10}, {fateSoft, 10}, {fateComplain, 8}, {fateSilent, 10},
		{fateGone, 12}, {fateLater, 7}, {fateListed, 15},
	}
}

// reachesRelay reports whether the relay takes the mail for a recipient of
// fate f (at the first attempt, or for fateLater at the retry).
func (f fate) reachesRelay() bool {
	switch f {
	case fateOK, fateHard, fateSoft, fateComplain, fateSilent, fateLater:
		return true
	}
	return false
}

// wantRow is the recipient row a fate ends in: state, bounce type, source
// (status is the recipient's own, see mixedRcpt).
func (f fate) wantRow() recipientRow {
	switch f {
	case fateOK, fateLater:
		return recipientRow{state: "delivered", source: report.SourceDSN}
	case fateHard:
		return recipientRow{state: "bounced", bounceType: event.BounceHard, source: report.SourceDSN}
	case fateSoft:
		return recipientRow{state: "bounced", bounceType: event.BounceSoft, source: report.SourceDSN}
	case fateComplain:
		return recipientRow{state: "complained", source: report.SourceARF}
	case fateSilent:
		return recipientRow{state: "accepted", source: "smtp"}
	case fateGone:
		return recipientRow{state: "bounced", bounceType: event.BounceHard, source: "smtp"}
	case fateListed:
		return recipientRow{state: "suppressed", source: "suppression"}
	case fateData:
		return recipientRow{state: "failed", source: "smtp"}
	}
	panic("unknown fate " + string(f))
}

// wantEvents are the transitions a recipient of fate f goes through, in
// order.
func (f fate) wantEvents() []event.Type {
	switch f {
	case fateOK:
		return []event.Type{event.Accepted, event.Delivered}
	case fateHard, fateSoft, fateGone:
		if f == fateGone {
			return []event.Type{event.Bounced}
		}
		return []event.Type{event.Accepted, event.Bounced}
	case fateComplain:
		return []event.Type{event.Accepted, event.Complained}
	case fateSilent:
		return []event.Type{event.Accepted, event.Unconfirmed}
	case fateLater:
		return []event.Type{event.Deferred, event.Accepted, event.Delivered}
	case fateListed:
		return []event.Type{event.Suppressed}
	case fateData:
		return []event.Type{event.Failed}
	}
	panic("unknown fate " + string(f))
}

// mixedRcpt is one planned recipient.
type mixedRcpt struct {
	key  rcptKey
	addr string
	fate fate
	// status is the enhanced status its report carries ("" for none).
	status string
	// subject is its mail's Subject, which reports quote.
	subject string
}

// mixedMail is one planned job.
type mixedMail struct {
	id    string
	rcpts []mixedRcpt
	// dataRefused: the relay refuses the mail at DATA.
	dataRefused bool
}

// wantStatus is the job's final row status.
func (m mixedMail) wantStatus() string {
	suppressed, other := 0, 0
	for _, r := range m.rcpts {
		switch {
		case r.fate.reachesRelay():
			return "sent"
		case r.fate == fateListed:
			suppressed++
		default:
			other++
		}
	}
	if suppressed > 0 && other == 0 {
		return "suppressed"
	}
	return "failed"
}

// wantConfirmation is the job's final confirmation: none for mail no relay
// took; unconfirmed when a recipient stays silent past the window; else
// confirmed when a report confirmed someone, cancelled when all bounced.
func (m mixedMail) wantConfirmation() string {
	if m.wantStatus() != "sent" {
		return ""
	}
	confirmed := false
	for _, r := range m.rcpts {
		switch r.wantRow().state {
		case "accepted":
			return "unconfirmed"
		case "delivered", "complained":
			confirmed = true
		}
	}
	if confirmed {
		return "confirmed"
	}
	return "cancelled"
}

func (r mixedRcpt) wantRow() recipientRow {
	row := r.fate.wantRow()
	row.status = r.status
	return row
}

// mixedPlan is the whole test's jobs and what each recipient should end as.
type mixedPlan struct {
	jobs   []job.Job
	mails  []mixedMail
	byAddr map[string]*mixedRcpt
	byKey  map[rcptKey]*mixedRcpt
	// dataIDs are the Message-IDs the relay refuses at DATA.
	dataIDs map[string]bool
}

// newMixedPlan plans n jobs of 1 to 3 recipients, the first dataJobs of
// which the relay refuses at DATA, with fates drawn from rng.
func newMixedPlan(n, dataJobs int, rng *rand.Rand) *mixedPlan {
	p := &mixedPlan{jobs: newJobs(n, "mixed"), byAddr: map[string]*mixedRcpt{}, byKey: map[rcptKey]*mixedRcpt{},
		dataIDs: map[string]bool{}}
	fates := mixedFates()
	total := 0
	for _, f := range fates {
		total += f.weight
	}
	draw := func() fate {
		k := rng.IntN(total)
		for _, f := range fates {
			if k < f.weight {
				return f.f
			}
			k -= f.weight
		}
		panic("unreachable")
	}
	p.mails = make([]mixedMail, n)
	for i := range p.jobs {
		j := &p.jobs[i]
		m := mixedMail{id: j.MessageID, dataRefused: i < dataJobs}
		j.To = nil
		for idx := range 1 + rng.IntN(3) {
			f := fateData
			if !m.dataRefused {
				f = draw()
			}
			r := mixedRcpt{key: rcptKey{j.MessageID, idx}, addr: fmt.Sprintf("%s-%d-%d@example.test", f, i, idx), fate: f,
				subject: j.Subject}
			switch f {
			case fateHard, fateGone:
				r.status = "5.1.1"
			case fateSoft:
				r.status = []string{"4.2.2", "5.2.2"}[rng.IntN(2)]
			case fateOK, fateLater:
				r.status = "2.0.0"
			}
			j.To = append(j.To, r.addr)
			m.rcpts = append(m.rcpts, r)
		}
		if m.dataRefused {
			p.dataIDs[m.id] = true
		}
		p.mails[i] = m
	}
	for i := range p.mails {
		for k := range p.mails[i].rcpts {
			r := &p.mails[i].rcpts[k]
			p.byAddr[r.addr], p.byKey[r.key] = r, r
		}
	}
	return p
}

func (p *mixedPlan) ids() []string {
	out := make([]string, len(p.mails))
	for i, m := range p.mails {
		out[i] = m.id
	}
	return out
}

// ofFate returns the recipients of fate f.
func (p *mixedPlan) ofFate(f fate) []*mixedRcpt {
	var out []*mixedRcpt
	for i := range p.mails {
		for k := range p.mails[i].rcpts {
			if r := &p.mails[i].rcpts[k]; r.fate == f {
				out = append(out, r)
			}
		}
	}
	return out
}

// relayCount is the number of messages the relay accepts: one transaction
// per recipient (each has its own return path).
func (p *mixedPlan) relayCount() int {
	n := 0
	for _, r := range p.byKey {
		if r.fate.reachesRelay() {
			n++
		}
	}
	return n
}

// script is the relay's behaviour: recipients refused or deferred by their
// local part, mail refused at DATA by Message-ID.
func (p *mixedPlan) script(c smtptest.Command) *smtptest.Reply {
	switch c.Verb {
	case smtptest.VerbRcpt:
		switch {
		case strings.HasPrefix(c.Arg, string(fateGone)+"-"):
			return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user here"}
		case strings.HasPrefix(c.Arg, string(fateLater)+"-") && c.Attempt == 1:
			return &smtptest.Reply{Code: 452, Enhanced: "4.2.2", Text: "mailbox full, try again later"}
		}
	case smtptest.VerbData:
		if p.dataIDs[c.Arg] {
			return &smtptest.Reply{Code: 554, Enhanced: "5.6.0", Text: "message refused"}
		}
	}
	return nil
}

// outgoingReport is one report on its way to the receiver.
type outgoingReport struct {
	rcpt  string // the envelope recipient: a return path or the feedback address
	raw   []byte
	about string // the recipient address it is about, for failure messages
	tries int
}

// reportSender watches the relay and answers each message it takes, as the
// recipient's side would: a DSN or an ARF report to the receiver's SMTP
// server, over a few connections carrying many reports each. A report the
// receiver refuses for now (451: the worker has not recorded the send yet)
// is offered again after a short backoff, as an MTA's queue would.
type reportSender struct {
	addr   string // the receiver's SMTP server
	domain string
	plan   *mixedPlan
	queue  chan *outgoingReport
	ctx    context.Context

	outstanding atomic.Int64 // reports not yet taken
	sent        atomic.Int64 // reports taken
	early       atomic.Int64 // 451 answers (offered again)
	redials     atomic.Int64
	watched     atomic.Int64 // relay messages handled

	mu         sync.Mutex
	problems   []string
	returnPath map[string]string // recipient address -> the return path the relay saw
}

// startReportSender starts the watcher of relay and conns sending
// connections; they stop when the test ends.
func startReportSender(t *testing.T, addr, domain string, plan *mixedPlan, relay *smtptest.Server, conns int) *reportSender {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs := &reportSender{addr: addr, domain: domain, plan: plan, queue: make(chan *outgoingReport, 8192), ctx: ctx,
		returnPath: map[string]string{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); rs.watch(relay) }()
	for range conns {
		wg.Add(1)
		go func() { defer wg.Done(); rs.run() }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return rs
}

func (rs *reportSender) problem(format string, args ...any) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.problems = append(rs.problems, fmt.Sprintf(format, args...))
}

func (rs *reportSender) problemList() []string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.problems)
}

// watch turns every message the relay accepts into its report until every
// expected message has been seen.
func (rs *reportSender) watch(relay *smtptest.Server) {
	want := rs.plan.relayCount()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	seen := 0
	for {
		msgs := relay.Messages()
		for ; seen < len(msgs); seen++ {
			rs.handle(msgs[seen])
			rs.watched.Add(1)
		}
		if seen >= want {
			return
		}
		select {
		case <-rs.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// handle checks one relay message against the plan and queues its report.
func (rs *reportSender) handle(m smtptest.Received) {
	if len(m.To) != 1 {
		rs.problem("relay message %s has envelope recipients %v, want one per transaction", m.MessageID, m.To)
		return
	}
	addr := m.To[0]
	r, ok := rs.plan.byAddr[addr]
	switch {
	case !ok:
		rs.problem("the relay took mail for %s, which no job has", addr)
		return
	case !r.fate.reachesRelay():
		rs.problem("the relay took mail for %s (fate %s), which it should never have been sent", addr, r.fate)
		return
	case m.MessageID != r.key.id:
		rs.problem("the relay took mail for %s with Message-ID %s, want %s", addr, m.MessageID, r.key.id)
		return
	case !strings.HasPrefix(m.From, "bounce+") || !strings.HasSuffix(m.From, "@"+rs.domain):
		rs.problem("mail for %s went out with return path %q, want its own on %s", addr, m.From, rs.domain)
		return
	}
	rs.mu.Lock()
	_, dup := rs.returnPath[addr]
	rs.returnPath[addr] = m.From
	rs.mu.Unlock()
	if dup {
		rs.problem("the relay took mail for %s twice", addr)
		return
	}
	out, err := rs.reportFor(r, m.From)
	if err != nil {
		rs.problem("report for %s: %v", addr, err)
		return
	}
	if out == nil {
		return // silent: nobody reports
	}
	rs.outstanding.Add(1)
	rs.enqueue(out)
}

// reportFor builds the report the recipient's side sends for r, nil for
// none.
func (rs *reportSender) reportFor(r *mixedRcpt, returnPath string) (*outgoingReport, error) {
	now, subject := time.Now(), r.subject
	dsn := func(rep report.Report) (*outgoingReport, error) {
		rep.Recipient = r.addr
		raw, err := bounce.BuildDSN(bounce.DSN{Date: now, ReturnPath: returnPath, MessageID: r.key.id, OriginalTo: r.addr,
			Subject: subject, Recipients: []report.Report{rep}})
		return &outgoingReport{rcpt: returnPath, raw: raw, about: r.addr}, err
	}
	switch r.fate {
	case fateOK, fateLater:
		return dsn(report.Report{Kind: report.Delivered, Status: r.status, Code: 250, Diagnostic: "250 2.0.0 OK queued"})
	case fateHard:
		return dsn(report.Report{Kind: report.Bounced, Status: r.status, Code: 550, Diagnostic: "550 5.1.1 no such user"})
	case fateSoft:
		code := 452
		if strings.HasPrefix(r.status, "5") {
			code = 552
		}
		return dsn(report.Report{Kind: report.Bounced, Status: r.status, Code: code,
			Diagnostic: fmt.Sprintf("%d %s mailbox full, giving up", code, r.status)})
	case fateComplain:
		raw, err := bounce.BuildARF(bounce.ARF{To: "fbl@" + rs.domain, Date: now, Recipients: []string{r.addr},
			ReturnPath: returnPath, MessageID: r.key.id, OriginalTo: r.addr, Subject: subject})
		return &outgoingReport{rcpt: "fbl@" + rs.domain, raw: raw, about: r.addr}, err
	}
	return nil, nil
}

func (rs *reportSender) enqueue(out *outgoingReport) {
	select {
	case rs.queue <- out:
	case <-rs.ctx.Done():
	}
}

// run sends queued reports on one connection, redialling when it breaks.
func (rs *reportSender) run() {
	var c *smtp.Client
	defer func() {
		if c != nil {
			_ = c.Quit()
			_ = c.Close()
		}
	}()
	for {
		var out *outgoingReport
		select {
		case <-rs.ctx.Done():
			return
		case out = <-rs.queue:
		}
		if c == nil {
			d := net.Dialer{Timeout: 5 * time.Second}
			conn, err := d.DialContext(rs.ctx, "tcp", rs.addr)
			if err == nil {
				c, err = smtp.NewClient(conn, "127.0.0.1")
				if err != nil {
					_ = conn.Close()
				}
			}
			if err != nil {
				rs.retryLater(out, fmt.Errorf("dial: %w", err))
				continue
			}
		}
		err := rs.transact(c, out)
		var te *textproto.Error
		switch {
		case err == nil:
			rs.sent.Add(1)
			rs.outstanding.Add(-1)
		case errors.As(err, &te) && te.Code >= 400 && te.Code < 500:
			if te.Code == 451 {
				rs.early.Add(1)
			}
			_ = c.Reset()
			rs.retryLater(out, err)
		case errors.As(err, &te):
			_ = c.Reset()
			rs.problem("the receiver refused the report about %s: %v", out.about, err)
			rs.outstanding.Add(-1)
		default:
			// The connection broke: a new one takes the report again.
			_ = c.Close()
			c = nil
			rs.redials.Add(1)
			rs.retryLater(out, err)
		}
	}
}

// transact sends one report as an MTA would: from the null sender.
func (rs *reportSender) transact(c *smtp.Client, out *outgoingReport) error {
	if err := c.Mail(""); err != nil {
		return fmt.Errorf("MAIL: %w", err)
	}
	if err := c.Rcpt(out.rcpt); err != nil {
		return fmt.Errorf("RCPT %s: %w", out.rcpt, err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if _, err := w.Write(out.raw); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("end of DATA: %w", err)
	}
	return nil
}

// retryLater offers out again after a backoff that grows with its tries,
// or gives up on it after many.
func (rs *reportSender) retryLater(out *outgoingReport, err error) {
	out.tries++
	if out.tries > 40 {
		rs.problem("the report about %s was not taken after %d tries: %v", out.about, out.tries, err)
		rs.outstanding.Add(-1)
		return
	}
	wait := min(25*time.Millisecond<<min(out.tries, 6), time.Second)
	time.AfterFunc(wait, func() { rs.enqueue(out) })
}

// status reports whether every relay message has been handled and every
// report taken, with the counts.
func (rs *reportSender) status() (done bool, summary string) {
	watched, want := rs.watched.Load(), int64(rs.plan.relayCount())
	outstanding := rs.outstanding.Load()
	return watched >= want && outstanding == 0, fmt.Sprintf("relay messages handled %d of %d, reports taken %d, outstanding %d, 451s %d, redials %d",
		watched, want, rs.sent.Load(), outstanding, rs.early.Load(), rs.redials.Load())
}

// allEvents returns a copy of the events read so far.
func (l *eventLog) allEvents() []event.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]event.Event, 0, len(l.byID))
	for _, e := range l.byID {
		out = append(out, e)
	}
	return out
}

func (l *eventLog) stats() (copies int, bad []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.copies, slices.Clone(l.bad)
}

// byRecipient groups events per recipient, each list in the order of a
// recipient's life: by time, then by the order of the types.
func byRecipient(events []event.Event) map[rcptKey][]event.Event {
	order := map[event.Type]int{}
	for i, tp := range event.Types {
		order[tp] = i
	}
	out := map[rcptKey][]event.Event{}
	for _, e := range events {
		k := rcptKey{e.MessageID, e.RecipientIndex}
		out[k] = append(out[k], e)
	}
	for _, list := range out {
		sort.SliceStable(list, func(i, j int) bool { return eventBefore(list[i], list[j], order) })
	}
	return out
}

func typesOf(list []event.Event) []event.Type {
	out := make([]event.Type, len(list))
	for i, e := range list {
		out[i] = e.Type
	}
	return out
}

// receivedIDs returns the IDs of the verified webhook receipts.
func (w *webhookSink) receivedIDs() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]bool, len(w.received))
	for id := range w.received {
		out[id] = true
	}
	return out
}

// suppressionRow is one entry of a suppression list of tenant "".
type suppressionRow struct{ address, stream, reason string }

// suppressionRows reads every entry of tenant "".
func (s *stack) suppressionRows(ctx context.Context) (map[string][]suppressionRow, error) {
	rows, err := s.db.Query(ctx, `SELECT address, stream, reason FROM postline_suppressions WHERE tenant = ''`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]suppressionRow{}
	for rows.Next() {
		var r suppressionRow
		if err := rows.Scan(&r.address, &r.stream, &r.reason); err != nil {
			return nil, err
		}
		out[r.address] = append(out[r.address], r)
	}
	return out, rows.Err()
}

// mismatches collects the differences between what a check wanted and got:
// how many, by kind, and the first few described.
type mismatches struct {
	n     int
	kinds map[string]int
	first []string
}

func (m *mismatches) add(kind, format string, args ...any) {
	if m.kinds == nil {
		m.kinds = map[string]int{}
	}
	m.n++
	m.kinds[kind]++
	if len(m.first) < 6 {
		m.first = append(m.first, fmt.Sprintf(format, args...))
	}
}

func (m *mismatches) String() string {
	if m.n == 0 {
		return "none"
	}
	return fmt.Sprintf("%d mismatches %v; first: %s", m.n, m.kinds, strings.Join(m.first, "; "))
}

// describeRecipients says, for a failure message, each recipient of m with
// its fate, state and when a report resolved it.
func (s *stack) describeRecipients(ctx context.Context, m mixedMail) string {
	rows, err := s.db.Query(ctx, `SELECT idx, state, resolved_at FROM postline_recipients WHERE message_id = $1 ORDER BY idx`, m.id)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var (
			idx      int
			state    string
			resolved *time.Time
		)
		if err := rows.Scan(&idx, &state, &resolved); err != nil {
			return err.Error()
		}
		f := fate("?")
		if idx < len(m.rcpts) {
			f = m.rcpts[idx].fate
		}
		at := "never"
		if resolved != nil {
			at = resolved.UTC().Format("15:04:05.000000")
		}
		parts = append(parts, fmt.Sprintf("%d %s %s resolved %s", idx, f, state, at))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
