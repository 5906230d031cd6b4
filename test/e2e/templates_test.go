package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/render"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/templatestore"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// templateStore opens the template store on the stack's schema, where the
// worker reads it.
func (s *stack) templateStore(t *testing.T) *templatestore.Store {
	t.Helper()
	st, err := templatestore.New(templatestore.Config{}, s.db, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func pushTemplate(t *testing.T, st *templatestore.Store, d templatestore.Draft) int {
	t.Helper()
	v, _, err := st.Push(t.Context(), d)
	if err != nil {
		t.Fatalf("push %s: %v", d.Name, err)
	}
	return v
}

func setLabel(t *testing.T, st *templatestore.Store, name, label string, version, percent int) {
	t.Helper()
	if _, err := st.SetLabel(t.Context(), name, label, version, percent, "e2e"); err != nil {
		t.Fatalf("label %s %s=%d: %v", name, label, version, err)
	}
}

// templateJobs are n jobs that name template with their own data.
func templateJobs(n int, template string) []job.Job {
	jobs := newJobs(n, "template")
	for i := range jobs {
		jobs[i].Subject, jobs[i].Text = "", ""
		jobs[i].Template = &job.TemplateRef{Name: template, Data: map[string]any{"name": fmt.Sprintf("Ada %d", i), "order": i}}
	}
	return jobs
}

// templateUse reads the template version each mail was rendered with.
func (s *stack) templateUse(ctx context.Context, ids []string) (map[string]int, map[string]string, error) {
	rows, err := s.db.Query(ctx, `SELECT message_id, COALESCE(template_version, 0), COALESCE(template_why, '')
		FROM postline_messages WHERE message_id = ANY($1)`, ids)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	versions, whys := map[string]int{}, map[string]string{}
	for rows.Next() {
		var (
			id, why string
			v       int
		)
		if err := rows.Scan(&id, &v, &why); err != nil {
			return nil, nil, err
		}
		versions[id], whys[id] = v, why
	}
	return versions, whys, rows.Err()
}

// TestTemplateCanaryAndFallback renders template jobs on the real stack.
// 1,000 jobs with a 10 % canary: each mail's version is the one the
// canary hash of its Message-ID selects, exactly. Then the canary is
// replaced by a broken version: its share goes out rendered by the
// fallback version, every job delivered, and the rows, the events and the
// metrics say so.
func TestTemplateCanaryAndFallback(t *testing.T) {
	s := newStack(t)
	relay := smtptest.NewServer(t)
	events := s.readEvents(t)
	w := startWorker(t, s.outcomeWorkerEnv("w1", relay.Addr(), "", "", map[string]string{
		"POSTLINE_BOUNCE_DOMAIN": "", "POSTLINE_RETURN_PATH_KEYS": "", "POSTLINE_TEMPLATE_REFRESH": "200ms",
	}))
	w.WaitReady(readyTimeout)
	st := s.templateStore(t)
	base := templatestore.Draft{Name: "receipt", Subject: "Your receipt, {{.name}}", TextBody: "Order {{.order}} for {{.name}}.\n",
		DataSchema: json.RawMessage(`{"type":"object","required":["name","order"]}`)}
	v1 := pushTemplate(t, st, base)
	canary := base
	canary.Subject = "Your receipt (new), {{.name}}"
	v2 := pushTemplate(t, st, canary)
	reloads := w.mustMetric("postline_templatestore_watcher_reloads_total")
	setLabel(t, st, "receipt", "active", v1, 0)
	setLabel(t, st, "receipt", "fallback", v1, 0)
	setLabel(t, st, "receipt", "canary", v2, 10)
	// The worker takes label changes at its next poll; until it has all
	// three, the first jobs would render without the canary.
	waitReload(t, w, reloads)

	check := func(wantCanary, wantFallback int) []string {
		t.Helper()
		ids := s.publish(templateJobs(1000, "receipt")...)
		testkit.Eventually(t, 90*time.Second, "1,000 template jobs sent", func(ctx context.Context) (bool, string) {
			st, err := s.statuses(ctx, ids)
			if err != nil {
				return false, err.Error()
			}
			n, by := 0, map[string]int{}
			for _, v := range st {
				by[v]++
				if v == "sent" {
					n++
				}
			}
			var why string
			_ = s.db.QueryRow(ctx, `SELECT COALESCE(error_class, '') || ': ' || COALESCE(last_error, '') FROM postline_messages
				WHERE message_id = ANY($1) AND status = 'dead' LIMIT 1`, ids).Scan(&why)
			return n == len(ids), fmt.Sprintf("%d of %d sent; rows by status %v; a dead one: %s", n, len(ids), by, why)
		})
		versions, whys, err := s.templateUse(t.Context(), ids)
		if err != nil {
			t.Fatal(err)
		}
		mismatches, canaries := 0, 0
		for _, id := range ids {
			inCanary := render.CanaryBucket(id) < 10*100
			want := v1
			if inCanary {
				canaries++
				want = wantCanary
			}
			if versions[id] != want {
				mismatches++
				if mismatches <= 3 {
					t.Errorf("mail %s (canary bucket %d) rendered with version %d (%s), want %d", id, render.CanaryBucket(id), versions[id], whys[id], want)
				}
			}
		}
		if mismatches > 0 {
			t.Fatalf("%d of %d mails rendered with another version than the canary hash selects", mismatches, len(ids))
		}
		t.Logf("%d of %d mails in the 10 %% canary share", canaries, len(ids))
		return ids
	}

	ids := check(v2, 0)
	testkit.Eventually(t, 30*time.Second, "accepted events naming the versions", func(context.Context) (bool, string) {
		n := 0
		for _, id := range ids {
			if e, ok := events.find(id, 0, event.Accepted); ok && e.Template != nil && e.Template.Name == "receipt" {
				n++
			}
		}
		return n == len(ids), fmt.Sprintf("%d of %d accepted events name the template", n, len(ids))
	})

	// A broken canary: its share falls back to version 1.
	broken := base
	broken.Subject = "Your receipt, {{.missing_field}}"
	v3 := pushTemplate(t, st, broken)
	reloads = w.mustMetric("postline_templatestore_watcher_reloads_total")
	setLabel(t, st, "receipt", "canary", v3, 10)
	waitReload(t, w, reloads)
	before := w.mustMetric("postline_compose_renders_total", "result", "fallback")
	ids = check(v1, v1)
	_, whys, _ := s.templateUse(t.Context(), ids)
	fell := 0
	for _, id := range ids {
		if render.CanaryBucket(id) < 1000 {
			fell++
			if whys[id] == "" {
				t.Errorf("mail %s fell back without saying why", id)
			}
		}
	}
	if got := w.mustMetric("postline_compose_renders_total", "result", "fallback") - before; int(got) != fell {
		t.Errorf("fallback renders counted %v, want %d", got, fell)
	}
	testkit.Eventually(t, 30*time.Second, "the fallen-back mails' events say so", func(context.Context) (bool, string) {
		n := 0
		for _, id := range ids {
			if render.CanaryBucket(id) >= 1000 {
				continue
			}
			if e, ok := events.find(id, 0, event.Accepted); ok && e.Template != nil && e.Template.Version == v1 &&
				strings.HasPrefix(e.Template.Why, "fallback") {
				n++
			}
		}
		return n == fell, fmt.Sprintf("%d of %d accepted events name the fallback", n, fell)
	})
}

// TestBrokenTemplateDeadLettersAndReplays: a template broken in every
// version sends its job to the dead-letter topic as render_failed; once a
// good version is activated, a replay delivers it once.
func TestBrokenTemplateDeadLettersAndReplays(t *testing.T) {
	fs := newFailureStack(t, fastTiers)
	s := fs.stack
	relay := smtptest.NewServer(t)
	w := startWorker(t, s.outcomeWorkerEnv("w1", relay.Addr(), "", "", map[string]string{
		"POSTLINE_BOUNCE_DOMAIN": "", "POSTLINE_RETURN_PATH_KEYS": "", "POSTLINE_TEMPLATE_REFRESH": "200ms",
	}))
	w.WaitReady(readyTimeout)
	st := s.templateStore(t)
	bad := pushTemplate(t, st, templatestore.Draft{Name: "notice", Subject: "Notice {{.nope}}", TextBody: "{{.also_missing}}\n"})
	setLabel(t, st, "notice", "active", bad, 0)
	setLabel(t, st, "notice", "fallback", bad, 0)

	id := s.publish(templateJobs(1, "notice")...)[0]
	letters := s.readDLQ(1, 60*time.Second)
	if letters[0].Reason != deadletter.ReasonRenderFailed {
		t.Fatalf("dead letter reason %q, want render_failed", letters[0].Reason)
	}
	if relay.Count() != 0 {
		t.Fatalf("a job no version could render was sent")
	}
	good := pushTemplate(t, st, templatestore.Draft{Name: "notice", Subject: "Notice for {{.name}}", TextBody: "Hello {{.name}}.\n"})
	reloads := w.mustMetric("postline_templatestore_watcher_reloads_total")
	setLabel(t, st, "notice", "active", good, 0)
	setLabel(t, st, "notice", "fallback", good, 0)
	waitReload(t, w, reloads)
	for range 2 {
		fs.postctl("dlq", "replay", "--yes", "--reason", deadletter.ReasonRenderFailed, "--output", "json")
	}
	testkit.Eventually(t, 60*time.Second, "the replayed job delivered", func(ctx context.Context) (bool, string) {
		st, err := s.statuses(ctx, []string{id})
		return err == nil && st[id] == "sent", fmt.Sprint(st, err)
	})
	versions, _, _ := s.templateUse(t.Context(), []string{id})
	if versions[id] != good || relay.Count() != 1 {
		t.Errorf("replay rendered version %d and the relay got %d mails, want version %d once", versions[id], relay.Count(), good)
	}
}

// waitReload waits until the worker's label watcher has every label
// change made before the call: it reloaded since it counted before, and
// then stayed at that snapshot for a second (five polls at the tests' 200 ms
// refresh). A watcher reloads whenever the label revision moved, so a
// snapshot taken between two of the caller's changes, or by a poll that
// read the labels just before the last one, is replaced at the next poll;
// one that stays has the last revision, and every label of it.
func waitReload(t *testing.T, w *workerProc, before float64) {
	t.Helper()
	const settled = time.Second
	last, since := before, time.Now()
	testkit.Eventually(t, 15*time.Second, "the worker's template labels reloaded and settled", func(ctx context.Context) (bool, string) {
		n, err := w.Metric(ctx, "postline_templatestore_watcher_reloads_total")
		if err != nil {
			return false, err.Error()
		}
		if n != last {
			last, since = n, time.Now()
		}
		return n > before && time.Since(since) >= settled, fmt.Sprintf("%v reloads (%v before the change), the last %s ago", n, before, time.Since(since).Round(time.Millisecond))
	})
}
