package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// redriveNote is the operator's note on TestConsoleInABrowser's re-drive.
const redriveNote = "relay fixed, INC-31"

// redriveRig is the re-drive step's own delivery path: a worker on a jobs
// topic of its own, sending to a scripted relay that refuses every
// recipient permanently (550 5.1.1) until it is repaired. It shares the
// stack's rows, dead-letter and events topics with the console, which
// re-drives into its jobs topic. The stack's other worker cannot
// dead-letter a mail: it hands mail to Postfix, which accepts everything
// at SMTP time, so a refusal behind it bounces instead.
type redriveRig struct {
	jobs, group string
	relay       *smtptest.Server
	repaired    atomic.Bool
	pub         *job.Publisher
	worker      *workerProc
}

// startRedriveRig creates the rig's jobs topic and publisher and starts
// its worker, without waiting for it to be ready.
func (s *stack) startRedriveRig(t *testing.T) *redriveRig {
	t.Helper()
	rig := &redriveRig{jobs: testenv.UniqueName("e2e.redrive.jobs"), group: testenv.UniqueName("e2e-redrive-group")}
	rig.relay = smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbRcpt && !rig.repaired.Load() {
			return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "mailbox unavailable"}
		}
		return nil
	}))
	spec := topic.Defaults(rig.jobs, "unused", 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := topic.Ensure(ctx, testenv.Kafka(), spec); err != nil {
		t.Fatalf("create the re-drive's jobs topic: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.Kafka(), rig.jobs); err != nil {
			t.Logf("delete the re-drive's jobs topic: %v", err)
		}
	})
	pub, err := job.NewPublisher(testenv.Kafka().Config(), job.PublisherConfig{Topic: rig.jobs, MessageIDDomain: messageIDDomain})
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	rig.pub = pub
	env := s.workerEnv("w-redrive", nil)
	maps.Copy(env, map[string]string{
		"POSTLINE_JOBS_TOPIC":     rig.jobs,
		"POSTLINE_CONSUMER_GROUP": rig.group,
		"POSTLINE_SMTP_HOST":      rig.relay.Host(),
		"POSTLINE_SMTP_PORT":      fmt.Sprint(rig.relay.Port()),
		"POSTLINE_SMTP_TLS":       "none",
		"POSTLINE_SMTP_USERNAME":  "",
		"POSTLINE_SMTP_PASSWORD":  "",
	})
	rig.worker = startWorker(t, env)
	return rig
}

// publishDoomed publishes one mail that the relay refuses and returns its
// Message-ID.
func (rig *redriveRig) publishDoomed(t *testing.T) string {
	t.Helper()
	jobs := newJobs(1, "redrive")
	jobs[0].To = []string{"redrive-0@example.test"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids, err := rig.pub.Publish(ctx, jobs...)
	if err != nil {
		t.Fatalf("publish the mail to re-drive: %v", err)
	}
	return ids[0]
}

// waitDeadLettered waits until mail id's row is failed, its dead letter
// (for the relay's permanent refusal) is on the dead-letter topic, and the
// console indexed the refusal (a bounced event: the relay refused the
// recipient), which the mail's page shows.
func (s *stack) waitDeadLettered(t *testing.T, id string) {
	t.Helper()
	s.waitRows([]string{id}, 60*time.Second, "the refused mail failed", statusIs("failed"))
	dl := s.readDLQ(1, 30*time.Second)
	if string(dl[0].Key) != id || dl[0].Reason != deadletter.ReasonSMTPPermanent {
		t.Fatalf("dead letter key %q reason %q, want %q %q", dl[0].Key, dl[0].Reason, id, deadletter.ReasonSMTPPermanent)
	}
	testkit.Eventually(t, 30*time.Second, "the refusal indexed", func(ctx context.Context) (bool, string) {
		types, err := s.indexedTypes(ctx, id)
		return err == nil && slices.Contains(types, "bounced"), fmt.Sprintf("indexed events %v, error %v", types, err)
	})
}

// indexedTypes are the types of mail id's events that the console
// indexed, oldest first.
func (s *stack) indexedTypes(ctx context.Context, id string) ([]string, error) {
	r, err := s.db.Query(ctx, `SELECT type FROM postline_mail_events WHERE message_id = $1 ORDER BY at`, id)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var types []string
	for r.Next() {
		var tp string
		if err := r.Scan(&tp); err != nil {
			return nil, err
		}
		types = append(types, tp)
	}
	return types, r.Err()
}

// text is the inner text of the element selector selects, "" when there
// is none.
func (c *consoleTour) text(selector string) string {
	c.t.Helper()
	return eval[string](c, "reading "+selector, fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ""`, selector))
}

// redrive re-drives the dead-lettered mail id from its page: the form
// comes pre-filled with its Message-ID; the count (a dry run) says one
// would go and publishes nothing; once the relay is repaired the run
// re-drives it and it is delivered once, its life showing the operator's
// redriven event with the note. Counting the same selection again finds
// nothing to re-drive, and nothing more arrives.
func (c *consoleTour) redrive(rig *redriveRig, id string) {
	c.t.Helper()
	testenv.Navigate(c.t, c.browser, c.url+"/mail/view?id="+id)
	c.show("5a-redrive-mail", "#redrive-mail")
	c.do("opening the re-drive form", chromedp.Click(chromedp.CSS("#redrive-mail")))
	testenv.WaitVisible(c.t, c.browser, "#count", consoleStepTimeout)
	if got := eval[string](c, "reading the Message-ID", `document.querySelector('#message_id').value`); got != id {
		c.t.Fatalf("the re-drive form's Message-ID = %q, want the mail's %s", got, id)
	}
	c.count()
	c.show("5b-redrive-count", "#plan")
	if m, r := c.text("#plan-matched"), c.text("#plan-redrive"); m != "1" || r != "1" {
		c.t.Fatalf("the count says %s matched, %s would re-drive; want 1 and 1", m, r)
	}
	// The count is a dry run: the row stays failed, no record is published.
	if rows, err := c.s.rows(c.t.Context(), []string{id}); err != nil || rows[id].Status != "failed" {
		c.t.Errorf("after the count the row is %+v (%v), want still failed", rows[id], err)
	}
	if n := jobsRecords(c.t, rig.jobs); n != 1 {
		c.t.Errorf("after the count the re-drive's jobs topic holds %d records, want only the original mail", n)
	}

	rig.repaired.Store(true)
	started := time.Now()
	c.do("re-driving", chromedp.Click(chromedp.CSS("#redrive")))
	testkit.Eventually(c.t, 30*time.Second, "the run's page says done", func(ctx context.Context) (bool, string) {
		ctx, cancel := context.WithTimeout(c.browser, 2*time.Second)
		defer cancel()
		// The page reloads itself while the run is under way: a read
		// that meets a reload is retried.
		state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('#run-state') || {}).innerText || ""`))
		return err == nil && state == "Done.", fmt.Sprintf("run state %q, error %v", state, err)
	})
	c.show("5c-redrive-run", "#run")
	c.redriven = id
	c.redriveRun = strings.TrimPrefix(eval[string](c, "reading the URL", "location.pathname"), "/redrive/runs/")
	if m, r := c.text("#run-matched"), c.text("#run-redriven"); !strings.HasPrefix(m, "1 ") || r != "1" {
		c.t.Errorf("the run says matched %q, re-driven %q; want 1 (of the 1 counted) and 1", m, r)
	}
	c.s.waitRows([]string{id}, 30*time.Second, "the re-driven mail sent", statusIs("sent"))
	delivery := time.Since(started)
	checkOnce(c.t, []string{id}, rig.relay)

	// The redriven event, by the operator with the note, as the mail's
	// life shows it once indexed.
	testkit.Eventually(c.t, 30*time.Second, "the redriven event indexed", func(ctx context.Context) (bool, string) {
		types, err := c.s.indexedTypes(ctx, id)
		return err == nil && slices.Contains(types, "redriven"), fmt.Sprintf("indexed events %v, error %v", types, err)
	})
	testenv.Navigate(c.t, c.browser, c.url+"/mail/view?id="+id)
	c.show("5d-redriven-mail", "ol.life")
	life := eval[[]string](c, "reading the life", `[...document.querySelectorAll('ol.life li')].map(li => li.innerText)`)
	if !slices.ContainsFunc(life, func(e string) bool {
		return strings.Contains(e, "\nredriven · recipient 0 ") && strings.Contains(e, "by console:"+consoleOperator+": "+redriveNote)
	}) {
		c.t.Errorf("the mail's life = %q, want a redriven event by console:%s with the note %q", life, consoleOperator, redriveNote)
	}

	// Again: the row is sent, so nothing would be re-driven and there is
	// no Re-drive button.
	testenv.Navigate(c.t, c.browser, c.url+"/redrive?message_id="+id)
	c.count()
	c.show("5e-redrive-nothing", "#nothing")
	if m, r, sk := c.text("#plan-matched"), c.text("#plan-redrive"), c.text("#plan-skipped"); m != "1" || r != "0" || sk != "1" {
		c.t.Errorf("counting again says %s matched, %s would re-drive, %s skipped; want 1, 0, 1", m, r, sk)
	}
	if n := eval[int](c, "looking for the Re-drive button", `document.querySelectorAll('#redrive').length`); n != 0 {
		c.t.Errorf("counting again shows %d Re-drive buttons, want none", n)
	}
	if n := jobsRecords(c.t, rig.jobs); n != 2 {
		c.t.Errorf("after counting again the re-drive's jobs topic holds %d records, want 2 (the mail and its one re-drive)", n)
	}
	// Nothing was published; were anything sent anyway, it would arrive
	// within the time the re-drive above took to be delivered.
	throughout(c.t, max(delivery, time.Second), "nothing more arrives", func(context.Context) error {
		if n := rig.relay.Count(); n != 1 {
			return fmt.Errorf("the relay received %d messages, want the one re-driven", n)
		}
		return nil
	})
}

// count types the note and counts the re-drive form's selection.
func (c *consoleTour) count() {
	c.t.Helper()
	c.do("counting the re-drive",
		chromedp.WaitVisible(chromedp.CSS("#note")),
		chromedp.SendKeys(chromedp.CSS("#note"), redriveNote),
		chromedp.Click(chromedp.CSS("#count")),
	)
}

// jobsRecords counts the records of the single-partition topic name.
func jobsRecords(t *testing.T, name string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ranges, err := partitionRanges(ctx, name)
	if err != nil {
		t.Fatalf("offsets of %s: %v", name, err)
	}
	var n int64
	for _, r := range ranges {
		n += r.End - r.Start
	}
	return n
}
