package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

// Sizes of TestThousandMixedOutcomes.
const (
	mixedJobs = 1000
	// mixedDataJobs of them are refused at DATA.
	mixedDataJobs = 5
	// mixedWindow is the workers' confirmation window: reports come within
	// seconds of the relay taking a mail, silence lasts.
	mixedWindow = 30 * time.Second
	// mixedReportConns is how many SMTP connections carry the reports.
	mixedReportConns = 4
)

// TestThousandMixedOutcomes runs 1,000 jobs of one to three recipients
// through the whole outcome loop on the real stack: two workers sending
// through a scripted relay, the retry-scheduler on short tiers, the
// bounce-receiver taking DSNs and complaints over SMTP, the webhook
// dispatcher signing every event to an endpoint that verifies it. Each
// recipient's local part decides its fate (see fate): delivered, bounced
// hard or soft by a DSN, complained of, silent past the confirmation
// window, refused at RCPT, deferred once and delivered on the retry,
// suppressed before publishing, or failed with its mail refused at DATA.
// The reports go out as the relay takes each mail, over a few connections
// at once, as an MTA with several delivery processes sends them: reports
// about recipients of one mail may be applied concurrently.
//
// Once every state is final it checks that every recipient row is exactly
// its expected state (none missing, none extra), that the events topic,
// read as an application would (event.Reader, deduplicated by ID), holds
// exactly each recipient's transitions with the right details, that the
// endpoint verified every webhook and got every event, that the mails and
// their confirmations, the dead letters and the suppression lists are as
// the fates say, and that postctl unconfirmed lists the silent mail.
func TestThousandMixedOutcomes(t *testing.T) {
	began := time.Now()
	s := newFailureStack(t, "1s,2s")
	const domain = "bounces.mixed.e2e.postline.test"
	// The fates are drawn at random; POSTLINE_TEST_MIXED_SEED replays a
	// run's plan.
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("POSTLINE_TEST_MIXED_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("POSTLINE_TEST_MIXED_SEED %q: %v", v, err)
		}
		seed = n
	}
	t.Logf("plan seed %d (POSTLINE_TEST_MIXED_SEED replays it)", seed)
	plan := newMixedPlan(mixedJobs, mixedDataJobs, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))

	relay := smtptest.NewServer(t, smtptest.WithScript(plan.script))
	keys, _ := outcomeKeys(t, domain)
	smtpAddr := freeAddr(t)
	recv := s.startReceiver(t, domain, keys, smtpAddr, nil)
	sink := newWebhookSink(t)
	s.startDispatcher(t, sink)
	events := s.readEvents(t)
	s.startScheduler("scheduler")
	overrides := map[string]string{
		"POSTLINE_RETRY_TOPIC_PREFIX": s.prefix,
		"POSTLINE_RETRY_TIERS":        s.tiers.String(),
		"POSTLINE_CONFIRM_WINDOW":     mixedWindow.String(),
		"POSTLINE_UNCONFIRMED_SWEEP":  "1s",
		// Every deferred recipient is retried at once: the budgets are
		// not what this test is about.
		"POSTLINE_RETRY_BUDGETS": "urgent=1000+100/s+50%,normal=1000+100/s+50%,bulk=1000+100/s+50%",
	}
	w1 := startWorker(t, s.outcomeWorkerEnv("w1", relay.Addr(), domain, keys, overrides))
	w2 := startWorker(t, s.outcomeWorkerEnv("w2", relay.Addr(), domain, keys, overrides))
	w1.WaitReady(readyTimeout)
	w2.WaitReady(readyTimeout)
	waitOwnPartitions(t, w1, w2)

	// The listed recipients are suppressed before anything is published.
	lists, err := suppression.New(suppression.Config{}, s.db, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var entries []suppression.Entry
	for _, r := range plan.ofFate(fateListed) {
		entries = append(entries, suppression.Entry{Stream: suppression.StreamAll, Address: r.addr,
			Reason: suppression.ReasonManual, Source: "e2e", CreatedAt: time.Now()})
	}
	if _, err := lists.Add(t.Context(), entries); err != nil {
		t.Fatalf("suppress the listed recipients: %v", err)
	}

	reports := startReportSender(t, smtpAddr, domain, plan, relay, mixedReportConns)
	ready := time.Now()
	ids := s.publish(plan.jobs...)
	if !slices.Equal(ids, plan.ids()) {
		t.Fatal("the publisher returned other Message-IDs than the jobs carry")
	}
	t.Logf("stack ready in %s; published %d jobs with %d recipients (%d reach the relay) in %s",
		ready.Sub(began).Round(time.Millisecond), len(ids), len(plan.byKey), plan.relayCount(),
		time.Since(ready).Round(time.Millisecond))

	// Every recipient and mail row final. The full comparison is polled at
	// most twice a second.
	var last struct {
		at     time.Time
		status string
	}
	testkit.Eventually(t, 90*time.Second, "every recipient and mail in its final state", func(ctx context.Context) (bool, string) {
		if time.Since(last.at) < 500*time.Millisecond {
			return false, last.status
		}
		last.at = time.Now()
		mm, err := s.compareMixedRows(ctx, plan, ids)
		if err != nil {
			last.status = err.Error()
			return false, last.status
		}
		_, sent := reports.status()
		last.status = fmt.Sprintf("%s; reports: %s; problems %v", mm, sent, reports.problemList())
		return mm.n == 0, last.status
	})
	final := time.Now()
	t.Logf("every recipient and mail row final %s after publishing", final.Sub(ready).Round(time.Millisecond))
	if p := reports.problemList(); len(p) > 0 {
		t.Errorf("%d problems with the relay's messages or the reports, first: %v", len(p), p[:min(len(p), 5)])
	}
	if done, st := reports.status(); !done {
		t.Errorf("reports not all taken: %s", st)
	}
	if n := relay.Count(); n != plan.relayCount() {
		t.Errorf("the relay took %d messages, want %d (one per recipient it accepts)", n, plan.relayCount())
	}

	// The events topic holds exactly the transitions, and the endpoint got
	// every event.
	var (
		got   map[rcptKey][]event.Event
		topic []event.Event
	)
	testkit.Eventually(t, mixedWindow+90*time.Second, "every transition on the events topic and at the webhook endpoint", func(context.Context) (bool, string) {
		topic = events.allEvents()
		got = byRecipient(topic)
		mm := compareMixedTransitions(plan, got)
		hooks := sink.receivedIDs()
		missing := 0
		for _, e := range topic {
			if !hooks[e.ID] {
				missing++
			}
		}
		return mm.n == 0 && missing == 0, fmt.Sprintf("topic: %d events, %s; webhooks: %d received, %d of the topic's missing",
			len(topic), mm, len(hooks), missing)
	})
	complete := time.Now()
	t.Logf("every event on the topic and at the endpoint %s after publishing", complete.Sub(ready).Round(time.Millisecond))

	// Every mail's confirmation: the sweep marks the silent mail right
	// after publishing its unconfirmed events, and reports settled the
	// others when they resolved their last open recipient.
	last.at = time.Time{}
	if ok, status := testkit.Poll(20*time.Second, func(ctx context.Context) (bool, string) {
		if time.Since(last.at) < 500*time.Millisecond {
			return false, last.status
		}
		last.at = time.Now()
		mm, err := s.compareMixedConfirmations(ctx, plan, ids)
		if err != nil {
			last.status = err.Error()
			return false, last.status
		}
		last.status = mm.String()
		return mm.n == 0, last.status
	}); !ok {
		t.Errorf("confirmations of the mails: %s", status)
	}
	lives, err := s.lives(t.Context(), ids)
	if err != nil {
		t.Fatal(err)
	}
	checkMixedEvents(t, plan, got, lives)
	if copies, bad := events.stats(); len(bad) > 0 {
		t.Errorf("the events reader failed on %d records, first: %v", len(bad), bad[:min(len(bad), 3)])
	} else {
		t.Logf("events topic: %d distinct events, %d copies dropped by ID", len(topic), copies)
	}
	if p := sink.problems(); len(p) > 0 {
		t.Errorf("%d webhook requests did not verify, first: %v", len(p), p[:min(len(p), 3)])
	}
	onTopic := map[string]bool{}
	for _, e := range topic {
		onTopic[e.ID] = true
	}
	for id := range sink.receivedIDs() {
		if !onTopic[id] {
			t.Errorf("the webhook endpoint got event %s, which the events topic does not hold", id)
			break
		}
	}
	t.Logf("webhooks by type: %v", sink.byType())

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	checkMixedUnconfirmed(t, s, plan)
	checkMixedDeadLetters(ctx, t, s, plan)
	checkMixedSuppressions(ctx, t, s, plan)
	reportMetrics := 0
	for _, r := range plan.byKey {
		if f := r.fate; f.reachesRelay() && f != fateSilent {
			reportMetrics++
		}
	}
	if n := recv.mustMetric("postline_outcome_reports_total", "result", "applied"); int(n) != reportMetrics {
		t.Errorf("the receiver applied %v reports, want %d", n, reportMetrics)
	}
	if n := recv.mustMetric("postline_outcome_reports_total", "result", "forged"); n != 0 {
		t.Errorf("the receiver counted %v forged reports, want none", n)
	}

	// What happened, in numbers.
	rows, err := s.recipients(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	byState := map[string]int{}
	for _, r := range rows {
		k := r.state
		if r.bounceType != "" && r.state == "bounced" {
			k += "/" + r.bounceType + "/" + r.source
		}
		byState[k]++
	}
	byFate := map[fate]int{}
	for _, r := range plan.byKey {
		byFate[r.fate]++
	}
	statuses, _ := s.statuses(ctx, ids)
	byStatus := map[string]int{}
	for _, st := range statuses {
		byStatus[st]++
	}
	conf, _ := s.confirmations(ctx, ids)
	byConf := map[string]int{}
	for _, c := range conf {
		byConf[cmp.Or(c, "none")]++
	}
	_, sent := reports.status()
	t.Logf("%d recipients by fate %v", len(plan.byKey), byFate)
	t.Logf("recipients by final state %v", byState)
	t.Logf("mails by status %v, by confirmation %v", byStatus, byConf)
	t.Logf("reports: %s", sent)
	t.Logf("wall time %s (stack start %s, publish to final rows %s, to every event %s)", time.Since(began).Round(time.Millisecond),
		ready.Sub(began).Round(time.Millisecond), final.Sub(ready).Round(time.Millisecond), complete.Sub(ready).Round(time.Millisecond))
}

// compareMixedRows compares the recipient rows, the mail rows and their
// confirmations with the plan.
func (s *stack) compareMixedRows(ctx context.Context, plan *mixedPlan, ids []string) (*mismatches, error) {
	rows, err := s.recipients(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("recipients: %w", err)
	}
	statuses, err := s.statuses(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("statuses: %w", err)
	}
	mm := &mismatches{}
	for k, r := range plan.byKey {
		got, ok := rows[k]
		switch want := r.wantRow(); {
		case !ok:
			mm.add("missing row", "%s (%s): no row", r.addr, r.fate)
		case got != want:
			mm.add(r.wantRow().state+"≠"+got.state, "%s: %+v, want %+v", r.addr, got, want)
		}
	}
	for k := range rows {
		if plan.byKey[k] == nil {
			mm.add("extra row", "recipient row %v that no job has", k)
		}
	}
	for _, m := range plan.mails {
		if got, want := statuses[m.id], m.wantStatus(); got != want {
			mm.add("status "+want+"≠"+got, "mail %s: status %q, want %q", m.id, got, want)
		}
	}
	return mm, nil
}

// compareMixedConfirmations compares the mails' confirmations with the
// plan.
func (s *stack) compareMixedConfirmations(ctx context.Context, plan *mixedPlan, ids []string) (*mismatches, error) {
	conf, err := s.confirmations(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("confirmations: %w", err)
	}
	mm := &mismatches{}
	for _, m := range plan.mails {
		if got, want := conf[m.id], m.wantConfirmation(); got != want {
			mm.add("confirmation "+want+"≠"+got, "mail %s: confirmation %q, want %q; its recipients: %s",
				m.id, got, want, s.describeRecipients(ctx, m))
		}
	}
	return mm, nil
}

// compareMixedTransitions compares each recipient's event types with its
// fate's, and finds events about recipients no job has.
func compareMixedTransitions(plan *mixedPlan, got map[rcptKey][]event.Event) *mismatches {
	mm := &mismatches{}
	for k, r := range plan.byKey {
		if g, want := typesOf(got[k]), r.fate.wantEvents(); !slices.Equal(g, want) {
			mm.add(string(r.fate), "%s: events %v, want %v", r.addr, g, want)
		}
	}
	for k, list := range got {
		if plan.byKey[k] == nil {
			mm.add("unknown recipient", "events %v about %v, which no job has", typesOf(list), k)
		}
	}
	return mm
}

// checkMixedEvents checks what each event says beyond its type.
// lives are the mails' lives, which their event IDs hash in.
func checkMixedEvents(t *testing.T, plan *mixedPlan, got map[rcptKey][]event.Event, lives map[string]int64) {
	t.Helper()
	mm := &mismatches{}
	for k, r := range plan.byKey {
		list := got[k]
		var deferred *event.Event
		for i := range list {
			e := &list[i]
			if e.Recipient != r.addr || e.Stream != event.StreamTransactional {
				mm.add("recipient", "%s %s: recipient %q stream %q", r.addr, e.Type, e.Recipient, e.Stream)
			}
			if e.ID != event.NewLifeID(k.id, lives[k.id], k.idx, e.Type, e.Attempt) || lives[k.id] == 0 {
				mm.add("id", "%s %s: id %s is not the transition's", r.addr, e.Type, e.ID)
			}
			switch e.Type {
			case event.Accepted:
				if want := map[bool]int{true: 2, false: 1}[r.fate == fateLater]; e.Attempt != want {
					mm.add("accepted attempt", "%s: accepted at attempt %d, want %d", r.addr, e.Attempt, want)
				}
				if deferred != nil && deferred.NextAttemptAt != nil && e.At.Before(deferred.NextAttemptAt.Add(-50*time.Millisecond)) {
					mm.add("retried early", "%s: accepted at %s, before its next_attempt_at %s", r.addr, e.At, deferred.NextAttemptAt)
				}
			case event.Deferred:
				deferred = e
				switch {
				case e.Attempt != 1 || e.Class != "transient":
					mm.add("deferred", "%s: deferred at attempt %d class %q, want 1 transient", r.addr, e.Attempt, e.Class)
				case e.NextAttemptAt == nil:
					mm.add("next_attempt_at", "%s: deferred without next_attempt_at", r.addr)
				case !e.NextAttemptAt.After(e.At) || e.NextAttemptAt.After(e.At.Add(2*time.Second)):
					mm.add("next_attempt_at", "%s: deferred at %s with next_attempt_at %s, want within a tier (1s or 2s)",
						r.addr, e.At, e.NextAttemptAt)
				}
			case event.Bounced:
				want := r.wantRow()
				if b := e.Bounce; b == nil || b.Type != want.bounceType || b.Source != want.source || b.Status != r.status {
					mm.add("bounce", "%s: bounce %+v, want %s from %s with %s", r.addr, b, want.bounceType, want.source, r.status)
				}
			case event.Complained:
				if e.FeedbackType != "abuse" {
					mm.add("feedback type", "%s: feedback type %q, want abuse", r.addr, e.FeedbackType)
				}
			case event.Suppressed:
				if e.Reason != string(suppression.ReasonManual) {
					mm.add("suppressed reason", "%s: suppressed with reason %q, want manual", r.addr, e.Reason)
				}
			case event.Failed:
				if e.Class != "permanent" || e.Reason != deadletter.ReasonSMTPPermanent {
					mm.add("failed", "%s: failed with class %q reason %q, want permanent %s", r.addr, e.Class, e.Reason,
						deadletter.ReasonSMTPPermanent)
				}
			}
		}
	}
	if mm.n > 0 {
		t.Errorf("events with wrong details: %s", mm)
	}
}

// checkMixedUnconfirmed checks that postctl unconfirmed lists exactly the
// mail with silent recipients, each with exactly those open.
func checkMixedUnconfirmed(t *testing.T, s *failureStack, plan *mixedPlan) {
	t.Helper()
	want := map[string][]int{}
	for _, r := range plan.ofFate(fateSilent) {
		want[r.key.id] = append(want[r.key.id], r.key.idx)
	}
	out := s.postctlQuiet("unconfirmed", "-o", "json", "--limit", "1000")
	var rep struct {
		More bool `json:"more"`
		Mail []struct {
			MessageID string `json:"message_id"`
			State     string `json:"state"`
			Open      []struct {
				Index   int    `json:"index"`
				Address string `json:"address"`
			} `json:"open"`
		} `json:"mail"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("postctl unconfirmed -o json: %v\n%s", err, out[:min(len(out), 2000)])
	}
	if rep.More {
		t.Error("postctl unconfirmed says more mail follows beyond 1000")
	}
	mm := &mismatches{}
	listed := map[string]bool{}
	for _, m := range rep.Mail {
		listed[m.MessageID] = true
		var open []int
		for _, o := range m.Open {
			open = append(open, o.Index)
			if r := plan.byKey[rcptKey{m.MessageID, o.Index}]; r == nil || r.addr != o.Address {
				mm.add("open address", "%s open recipient %d %q is not the job's", m.MessageID, o.Index, o.Address)
			}
		}
		slices.Sort(open)
		switch w, ok := want[m.MessageID]; {
		case !ok:
			mm.add("extra", "%s listed with open %v, has no silent recipient", m.MessageID, open)
		case !slices.Equal(open, w) || m.State != "unconfirmed":
			mm.add("open", "%s: state %s open %v, want unconfirmed with %v", m.MessageID, m.State, open, w)
		}
	}
	for id := range want {
		if !listed[id] {
			mm.add("missing", "%s not listed", id)
		}
	}
	if mm.n > 0 {
		t.Errorf("postctl unconfirmed: %s", mm)
	}
	t.Logf("postctl unconfirmed lists %d mails (%d silent recipients)", len(rep.Mail), len(plan.ofFate(fateSilent)))
}

// postctlQuiet runs postctl against the stack and returns its stdout,
// without logging it (the listing of a thousand mails is long); a non-zero
// exit fails the test.
func (s *failureStack) postctlQuiet(args ...string) []byte {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, postctlBin, append(args,
		"--brokers", strings.Join(testenv.KafkaBrokers(), ","), "--database-url", s.dbURL,
		"--topic", s.jobs, "--dlq-topic", s.dlq)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	checkNoSecrets(s.t, "the output of postctl "+args[0], append(stdout.Bytes(), stderr.Bytes()...))
	if err != nil {
		s.t.Fatalf("postctl %s: %v\nstderr:\n%s", strings.Join(args, " "), err, redactSecrets(stderr.String()))
	}
	return stdout.Bytes()
}

// checkMixedDeadLetters checks that each failed mail, and nothing else, has
// one dead letter.
func checkMixedDeadLetters(ctx context.Context, t *testing.T, s *failureStack, plan *mixedPlan) {
	t.Helper()
	want := map[string]bool{}
	for _, m := range plan.mails {
		if m.wantStatus() == "failed" {
			want[m.id] = true
		}
	}
	ranges, err := partitionRanges(ctx, s.dlq)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, r := range ranges {
		total += int(r.End - r.Start)
	}
	if total != len(want) {
		t.Errorf("the dead-letter topic holds %d records, want %d (one per failed mail)", total, len(want))
	}
	letters := s.readDLQ(min(total, len(want)), 30*time.Second)
	seen := map[string]bool{}
	for _, l := range letters {
		id := string(l.Key)
		switch {
		case !want[id]:
			t.Errorf("dead letter for %s, which should not have failed", id)
		case seen[id]:
			t.Errorf("two dead letters for %s", id)
		case l.Reason != deadletter.ReasonSMTPPermanent:
			t.Errorf("dead letter for %s has reason %q, want %s", id, l.Reason, deadletter.ReasonSMTPPermanent)
		}
		seen[id] = true
	}
	t.Logf("%d dead letters (%d mails refused at DATA, the rest refused or suppressed at RCPT for every recipient)",
		len(letters), mixedDataJobs)
}

// checkMixedSuppressions checks the suppression lists: hard bounces (by
// DSN or at RCPT) on every stream, complaints on their stream, the listed
// addresses as added, and nobody else.
func checkMixedSuppressions(ctx context.Context, t *testing.T, s *failureStack, plan *mixedPlan) {
	t.Helper()
	got, err := s.suppressionRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mm := &mismatches{}
	for _, r := range plan.byKey {
		var want []suppressionRow
		switch r.fate {
		case fateHard, fateGone:
			want = []suppressionRow{{r.addr, string(suppression.StreamAll), string(suppression.ReasonHardBounce)}}
		case fateComplain:
			want = []suppressionRow{{r.addr, event.StreamTransactional, string(suppression.ReasonComplaint)}}
		case fateListed:
			want = []suppressionRow{{r.addr, string(suppression.StreamAll), string(suppression.ReasonManual)}}
		}
		if g := got[r.addr]; !slices.Equal(g, want) {
			mm.add(string(r.fate), "%s: suppression entries %v, want %v", r.addr, g, want)
		}
		delete(got, r.addr)
	}
	for _, addr := range slices.Sorted(maps.Keys(got)) {
		mm.add("extra", "%s suppressed: %v", addr, got[addr])
	}
	if mm.n > 0 {
		t.Errorf("suppression lists: %s", mm)
	}
}
