package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

// The console's accounts in TestConsoleInABrowser.
const (
	consoleOperator = "ada"
	consoleViewer   = "vic"
)

// consoleStepTimeout bounds waiting for one page of the console to show.
const consoleStepTimeout = 15 * time.Second

// TestConsoleInABrowser is an operator's morning in the console, in a real
// chromium, against the real binaries: a mail relayed by the stack's Postfix
// to a destination that refuses its recipient with 550 5.1.1 bounces with a
// delivery report that the bounce-receiver applies (the recipient bounced,
// the address suppressed). Accounts are made with postctl, the password on
// its standard input. The operator logs in, finds the mail by the
// recipient's address typed with another case, reads the refusal on the
// mail's page, lifts the suppression, re-drives a mail that a relay
// refused permanently once the relay is repaired (see redrive), and finds
// each of those actions in the audit log under the operator's name; the
// search and mail pages are seen at phone width too, and a viewer sees no
// way to act. No page ever shows the mail's body. The screenshots are
// artifacts of the test (and, with POSTLINE_DOCS_SCREENSHOTS=1,
// docs/console/).
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	browser := testenv.Browser(t)
	pf := testenv.Postfix(t)
	const refused = "gone@example.test"
	_ = smtptest.NewServer(t, smtptest.WithListener(pf.ListenDest(t)), smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbRcpt && strings.HasPrefix(c.Arg, "gone@") {
			return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user here"}
		}
		return nil
	}))
	keys, _ := outcomeKeys(t, pf.BounceDomain)
	s.startReceiver(t, pf.BounceDomain, keys, pf.BounceAddr, nil)
	worker := startWorker(t, s.outcomeWorkerEnv("w1", pf.Addr, pf.BounceDomain, keys, nil))
	rig := s.startRedriveRig(t)
	worker.WaitReady(readyTimeout)
	rig.worker.WaitReady(readyTimeout)
	console, consoleURL := s.startConsole(t, rig.jobs, rig.group)
	operatorPassword, viewerPassword := s.addOperator(t, consoleOperator, "operator"), s.addOperator(t, consoleViewer, "viewer")

	jobs := newJobs(1, "console")
	jobs[0].To = []string{"Gone <" + refused + ">"}
	jobs[0].HTML = "<p>" + bodyCanary + "</p>"
	id := s.publish(jobs...)[0]
	doomed := rig.publishDoomed(t)
	s.waitBouncedAndIndexed(t, id, refused)
	s.waitDeadLettered(t, doomed)

	tour := &consoleTour{t: t, s: s, browser: browser, url: consoleURL, messageID: id, refused: refused}
	tour.logIn(consoleOperator, operatorPassword, "1-login")
	tour.findByRecipient("gone@EXAMPLE.Test")
	tour.readMail()
	tour.liftSuppression()
	tour.redrive(rig, doomed)
	tour.readAuditLog()
	tour.onAPhone()
	tour.asViewer(viewerPassword)
	if log, err := os.ReadFile(console.logPath); err != nil || bytes.Contains(log, []byte(operatorPassword)) ||
		bytes.Contains(log, []byte(viewerPassword)) {
		t.Errorf("the console's log (%s) holds a password, or could not be read: %v", console.logPath, err)
	}
	exportScreenshots(t, tour.shots)
}

// startConsole runs the console binary on this stack's schema, events and
// dead-letter topics, re-driving into the jobs topic that workers of group
// consume, its pages on a free loopback port, and returns the process and
// the pages' base URL once it is ready.
func (s *stack) startConsole(t *testing.T, jobs, group string) (*workerProc, string) {
	t.Helper()
	addr := freeAddr(t)
	c := startProcess(t, consoleBin, "console", map[string]string{
		"POSTLINE_KAFKA_BROKERS":         strings.Join(testenv.KafkaBrokers(), ","),
		"POSTLINE_EVENTS_TOPIC":          s.events,
		"POSTLINE_DLQ_TOPIC":             s.dlq,
		"POSTLINE_JOBS_TOPIC":            jobs,
		"POSTLINE_CONSUMER_GROUP":        group,
		"POSTLINE_RETRY_TOPIC_PREFIX":    s.retryPrefix,
		"POSTLINE_CONSOLE_INDEXER_GROUP": testenv.UniqueName("e2e-console"),
		"POSTLINE_DATABASE_URL":          s.dbURL,
		"POSTLINE_CONSOLE_ADDR":          addr,
		"POSTLINE_CONSOLE_HTTP_ADDR":     "127.0.0.1:0",
		"POSTLINE_SHUTDOWN_TIMEOUT":      "5s",
	})
	c.WaitReady(readyTimeout)
	return c, "http://" + addr
}

// addOperator makes a console account with `postctl operators add`, the
// password on standard input as a script would give it, and returns the
// password.
func (s *stack) addOperator(t *testing.T, name, role string) string {
	t.Helper()
	password := "pw-" + canaryToken() + "-" + name
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, postctlBin, "--database-url", s.dbURL, "operators", "add", name, "--role", role)
	cmd.Stdin = strings.NewReader(password + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("postctl operators add %s --role %s: %v\n%s", name, role, err, strings.ReplaceAll(out.String(), password, "<password>"))
	}
	if strings.Contains(out.String(), password) {
		t.Fatalf("postctl operators add %s printed the password", name)
	}
	return password
}

// waitBouncedAndIndexed waits until the recipient of mail id bounced and
// its address is suppressed (the delivery report applied), and until the
// console indexed the mail's accepted and bounced events, which its page
// lists.
func (s *stack) waitBouncedAndIndexed(t *testing.T, id, address string) {
	t.Helper()
	testkit.Eventually(t, 90*time.Second, "the delivery report applied and its events indexed", func(ctx context.Context) (bool, string) {
		rows, err := s.recipients(ctx, []string{id})
		if err != nil {
			return false, err.Error()
		}
		_, suppressed, err := s.suppressed(ctx, address, "transactional")
		if err != nil {
			return false, err.Error()
		}
		var types []string
		r, err := s.db.Query(ctx, `SELECT type FROM postline_mail_events WHERE message_id = $1 ORDER BY at`, id)
		if err != nil {
			return false, err.Error()
		}
		defer r.Close()
		for r.Next() {
			var tp string
			if err := r.Scan(&tp); err != nil {
				return false, err.Error()
			}
			types = append(types, tp)
		}
		done := rows[rcptKey{id, 0}].state == "bounced" && suppressed && slices.Contains(types, "bounced")
		return done, fmt.Sprintf("recipient %+v, suppressed %v, indexed events %v", rows[rcptKey{id, 0}], suppressed, types)
	})
}

// consoleTour walks the console in one browser tab. Each step is a
// method that opens a page, checks what it shows and takes a screenshot;
// TestConsoleInABrowser runs them in order, so a new page's step is one
// more method and one more line there.
type consoleTour struct {
	t       *testing.T
	s       *stack
	browser context.Context
	url     string
	// messageID is the bounced mail's; refused its recipient's address,
	// and typed the address as the operator typed it to find the mail.
	messageID, refused, typed string
	// redriven is the dead-lettered mail the operator re-drove, in
	// run redriveRun.
	redriven, redriveRun string
	// shots are the screenshots taken, in order.
	shots []string
}

// do runs browser actions, failing the test with what it was doing.
func (c *consoleTour) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.browser, consoleStepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		c.t.Fatalf("browser: %s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value.
func eval[T any](c *consoleTour, what, expression string) T {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.browser, consoleStepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expression))
	if err != nil {
		c.t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// show waits until selector is visible, checks that the page never holds
// the mail's body, takes a screenshot named name and returns the text of
// the page's main element.
func (c *consoleTour) show(name, selector string) string {
	c.t.Helper()
	testenv.WaitVisible(c.t, c.browser, selector, consoleStepTimeout)
	if html := eval[string](c, "reading the page", "document.documentElement.outerHTML"); strings.Contains(html, bodyToken) {
		c.t.Errorf("page %s shows the mail's body", name)
	}
	c.shots = append(c.shots, testenv.Screenshot(c.t, c.browser, name))
	return eval[string](c, "reading the page's text", "document.querySelector('main').innerText")
}

// rows returns the cells' text of the page's first table body, row by row.
func (c *consoleTour) rows() [][]string {
	c.t.Helper()
	return eval[[][]string](c, "reading the table",
		`[...document.querySelectorAll('main table tbody tr')].map(r => [...r.cells].map(td => td.innerText.trim()))`)
}

// logIn logs in with the form, as name, after a screenshot of the form
// named shot.
func (c *consoleTour) logIn(name, password, shot string) {
	c.t.Helper()
	testenv.Navigate(c.t, c.browser, c.url+"/mail")
	c.show(shot, "form.login")
	c.do("logging in",
		chromedp.SendKeys(testenv.ByLabel("Name"), name),
		chromedp.SendKeys(testenv.ByLabel("Password"), password),
		chromedp.Click(chromedp.CSS("form.login button[type=submit]")),
	)
	testenv.WaitVisible(c.t, c.browser, "form.who", consoleStepTimeout)
	who := eval[string](c, "reading who is logged in", "document.querySelector('form.who span').innerText")
	if want := name + " ("; !strings.HasPrefix(who, want) {
		c.t.Fatalf("after logging in as %s the header says %q", name, who)
	}
	if path := eval[string](c, "reading the URL", "location.pathname"); path != "/mail" {
		c.t.Errorf("the login led to %s, want back to /mail, the page that asked for it", path)
	}
}

// findByRecipient searches mail by the recipient's address as typed.
func (c *consoleTour) findByRecipient(typed string) {
	c.t.Helper()
	c.typed = typed
	c.do("searching by recipient",
		chromedp.SendKeys(testenv.ByLabel("Recipient"), typed),
		chromedp.Click(chromedp.CSS("form.search button[type=submit]")),
	)
	c.show("2-search", "main table")
	rows := c.rows()
	if len(rows) != 1 || len(rows[0]) != 5 {
		c.t.Fatalf("searching %q found %v, want the one bounced mail", typed, rows)
	}
	if got := rows[0]; got[1] != c.messageID || !strings.Contains(got[4], c.refused+": bounced") {
		c.t.Errorf("result = %q, want %s with %s: bounced", got, c.messageID, c.refused)
	}
}

// readMail opens the found mail and checks the refusal its delivery
// report gave: the reply code, the enhanced status and the summary.
func (c *consoleTour) readMail() {
	c.t.Helper()
	c.do("opening the mail", chromedp.Click(chromedp.CSS(`main table a[href^="/mail/view"]`)))
	text := c.show("3-mail", "dl.facts")
	if title := eval[string](c, "reading the heading", "document.querySelector('h1').innerText"); title != "Mail "+c.messageID {
		c.t.Errorf("the mail's page is titled %q", title)
	}
	rcpts := c.rows()
	if len(rcpts) != 1 {
		c.t.Fatalf("the mail's page lists recipients %v, want one", rcpts)
	}
	// # Address State Reply Diagnostic Source Resolved
	r := rcpts[0]
	checks := []struct{ what, got, want string }{
		{"address", r[1], c.refused},
		{"state", r[2], "bounced (hard)"},
		{"reply", r[3], "550 5.1.1"},
		{"source", r[5], "dsn"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			c.t.Errorf("recipient's %s = %q, want %q", ch.what, ch.got, ch.want)
		}
	}
	if !strings.Contains(r[4], "no such user here") {
		c.t.Errorf("recipient's diagnostic = %q, want the delivery report's summary (the destination's \"no such user here\")", r[4])
	}
	life := eval[[]string](c, "reading the life", `[...document.querySelectorAll('ol.life li')].map(li => li.innerText)`)
	accepted := slices.IndexFunc(life, func(e string) bool { return strings.Contains(e, "\naccepted · recipient 0 "+c.refused) })
	bounced := slices.IndexFunc(life, func(e string) bool {
		return strings.Contains(e, "\nbounced · recipient 0 "+c.refused) && strings.Contains(e, "reply 550 5.1.1 · hard bounce") &&
			strings.Contains(e, "from dsn") && strings.Contains(e, "no such user here")
	})
	if accepted < 0 || bounced < accepted {
		c.t.Errorf("the mail's life = %q, want the recipient accepted, then bounced with the report's 550 5.1.1 and summary", life)
	}
	if !strings.Contains(text, "The body is never kept or shown") {
		c.t.Errorf("the mail's page lacks its note on the body:\n%s", text)
	}
}

// liftSuppression finds the address the bounce suppressed and removes the
// suppression with its Remove button.
func (c *consoleTour) liftSuppression() {
	c.t.Helper()
	c.do("searching the suppressions",
		chromedp.Click(chromedp.CSS(`nav a[href="/suppressions"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.search`)),
		chromedp.SendKeys(testenv.ByLabel("Address starts with"), c.refused),
		chromedp.Click(chromedp.CSS("form.search button[type=submit]")),
	)
	c.show("4-suppressions", "main table")
	rows := c.rows()
	// Address Tenant Stream Reason Source Since Expires Action
	if len(rows) != 1 || rows[0][0] != c.refused || rows[0][3] != "hard_bounce" || !strings.Contains(rows[0][4], c.messageID) {
		c.t.Fatalf("suppressions of %s = %q, want one hard_bounce from mail %s", c.refused, rows, c.messageID)
	}
	remove := chromedp.JSPath(fmt.Sprintf(`[...document.querySelectorAll('form[action="/suppressions/remove"] button')]`+
		`.find(b => b.getAttribute('aria-label').startsWith(%q))`, "Remove the suppression of "+c.refused+" "))
	c.do("lifting the suppression", chromedp.Click(remove))
	notice := c.show("5-lifted", "p.notice")
	if !strings.Contains(notice, "Suppression removed") {
		c.t.Errorf("after Remove the page says:\n%s", notice)
	}
	if _, found, err := c.s.suppressed(c.t.Context(), c.refused, "transactional"); err != nil || found {
		c.t.Errorf("after Remove, %s suppressed = %v (%v); want lifted", c.refused, found, err)
	}
}

// readAuditLog opens the audit log and finds each of the operator's
// actions under the operator's name, with what it was done on.
func (c *consoleTour) readAuditLog() {
	c.t.Helper()
	c.do("opening the audit log", chromedp.Click(chromedp.CSS(`nav a[href="/audit"]`)))
	c.show("6-audit", "main table")
	// When Who Action On Result From; On is the target as JSON, here
	// flattened: {"filter":{"note":"x"}} is filter.note = x.
	type entry struct {
		action string
		on     map[string]string
	}
	var mine []entry
	for _, r := range c.rows() {
		if r[1] != consoleOperator || r[4] != "ok" {
			continue
		}
		var on map[string]any
		if err := json.Unmarshal([]byte(r[3]), &on); err != nil {
			c.t.Errorf("audit entry %q: its target is no JSON object: %v", r, err)
		}
		mine = append(mine, entry{action: r[2], on: flatten("", on, map[string]string{})})
	}
	wants := []entry{
		{"login", map[string]string{}},
		{"mail.search", map[string]string{"recipient": c.typed}},
		{"mail.view", map[string]string{"message_id": c.messageID}},
		{"suppression.search", map[string]string{"address_prefix": c.refused}},
		{"suppression.remove", map[string]string{"address": c.refused, "stream": "*", "tenant": ""}},
		{"redrive.count", map[string]string{"filter.message_id": c.redriven, "filter.note": redriveNote, "result.redriven": "1"}},
		{"redrive.run", map[string]string{"filter.message_id": c.redriven, "filter.note": redriveNote, "run_id": c.redriveRun}},
		{"redrive.run.done", map[string]string{"filter.note": redriveNote, "run_id": c.redriveRun, "result.redriven": "1"}},
		{"redrive.count", map[string]string{"filter.message_id": c.redriven, "filter.note": redriveNote, "result.redriven": "0",
			"result.skipped_not_replayable": "1"}},
	}
	for _, w := range wants {
		if !slices.ContainsFunc(mine, func(e entry) bool { return e.action == w.action && subset(w.on, e.on) }) {
			c.t.Errorf("the audit log has no %s by %s on %v; %s's entries: %v", w.action, consoleOperator, w.on, consoleOperator, mine)
		}
	}
}

// flatten adds the values of a JSON object to into, named by their path
// from prefix ("filter.note"), and returns into.
func flatten(prefix string, object map[string]any, into map[string]string) map[string]string {
	for k, v := range object {
		if nested, ok := v.(map[string]any); ok {
			flatten(prefix+k+".", nested, into)
			continue
		}
		into[prefix+k] = fmt.Sprint(v)
	}
	return into
}

// subset reports whether every key of want has its value in got.
func subset(want, got map[string]string) bool {
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// onAPhone sees the search results and the mail's page at phone width:
// nothing is wider than the screen (wide tables scroll in their box).
func (c *consoleTour) onAPhone() {
	c.t.Helper()
	c.do("turning into a phone", chromedp.EmulateViewport(testenv.PhoneWidth, testenv.PhoneHeight,
		chromedp.EmulatePortrait, chromedp.EmulateMobile, chromedp.EmulateTouch))
	defer c.do("turning back into a desktop", chromedp.EmulateViewport(testenv.DesktopWidth, testenv.DesktopHeight, chromedp.EmulateLandscape))
	for _, p := range []struct{ name, path, selector string }{
		{"7-search-phone", "/mail?search=1&recipient=" + c.refused, "main table"},
		{"8-mail-phone", "/mail/view?id=" + c.messageID, "dl.facts"},
	} {
		testenv.Navigate(c.t, c.browser, c.url+p.path)
		c.show(p.name, p.selector)
		width := eval[int](c, "measuring the page", "document.documentElement.scrollWidth")
		if width > testenv.PhoneWidth {
			c.t.Errorf("%s at phone width is %d px wide, wider than the %d px screen", p.path, width, testenv.PhoneWidth)
		}
	}
}

// asViewer logs out, logs in as the viewer, and finds the suppressions
// page without a way to add or remove one.
func (c *consoleTour) asViewer(password string) {
	c.t.Helper()
	c.do("logging out", chromedp.Click(chromedp.CSS("form.who button[type=submit]")))
	testenv.WaitVisible(c.t, c.browser, "form.login", consoleStepTimeout)
	c.logIn(consoleViewer, password, "9-viewer-login")
	testenv.Navigate(c.t, c.browser, c.url+"/suppressions?search=1")
	text := c.show("10-viewer", "main form.search")
	forms := eval[int](c, "counting the action forms", `document.querySelectorAll('form[action^="/suppressions/"]').length`)
	if forms != 0 || !strings.Contains(text, "Your account is a viewer") {
		c.t.Errorf("a viewer's suppressions page has %d action forms and says:\n%s", forms, text)
	}
	// A viewer's POST to /redrive/count or /redrive/run is refused (403,
	// audited as denied): TestRedriveNeedsOperatorAndCSRF in
	// internal/console checks it.
	testenv.Navigate(c.t, c.browser, c.url+"/redrive")
	text = c.show("11-viewer-redrive", "main table")
	forms = eval[int](c, "counting the re-drive forms", `document.querySelectorAll('form[action^="/redrive/"]').length`)
	if forms != 0 || !strings.Contains(text, "Your account is a viewer") || !strings.Contains(text, redriveNote) {
		c.t.Errorf("a viewer's re-drive page has %d action forms and says (want no form, the operator's run with its note):\n%s", forms, text)
	}
}
