package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/postline/postline/internal/bounce"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/inbound"
	"github.com/postline/postline/internal/memcgroup"
	"github.com/postline/postline/internal/report"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

// The flood: what TestFloodUnderMemoryLimit throws at the receiver.
const (
	// floodLimit is the receiver's memory limit in the Helm chart
	// (bounceReceiver.resources.limits.memory, 256Mi), enforced by a cgroup.
	floodLimit = 256 << 20
	// floodSessions SMTP sessions each try to send floodBytes, from
	// floodClients loopback addresses; half send a little more than
	// MaxMessageBytes (552), half a little less (taken, not a report).
	floodSessions = 500
	floodClients  = 20
	floodBytes    = inbound.DefaultMaxMessageBytes
	// floodRequests webhook requests post floodBodyBytes each, alongside.
	floodRequests  = 200
	floodBodyBytes = 250 << 10
	// floodReports valid DSNs to valid return paths are sent meanwhile, by
	// floodReporters MTAs on an address of their own, retrying on 4xx as an
	// MTA does; one more is sent after the flood.
	floodReports   = 20
	floodReporters = 4
	// floodTimeout bounds the flood and the reports.
	floodTimeout = 45 * time.Second
)

// TestFloodUnderMemoryLimit starts the real bounce-receiver under the
// chart's 256 MiB memory limit (a cgroup the kernel enforces, swap held to
// it) with its default limits, on the real PostgreSQL and Kafka, and
// floods it: 500 SMTP sessions each sending 2 MiB, all at once (every
// admitted session reaches DATA before any writes its message), and 200
// webhook requests of 250 KiB, while valid DSNs come to valid return
// paths from another address. The receiver must not be OOM-killed, nor
// reach its limit; every valid report must be applied (the recipient is
// bounced in PostgreSQL); every excess session must be greeted 4xx; and it
// must still serve afterwards and stop cleanly on SIGTERM.
//
// It needs root for the cgroup and fails, saying so, without one: a pass
// without the limit enforced would prove nothing. It takes about 10 s
// after building the binary.
func TestFloodUnderMemoryLimit(t *testing.T) {
	testenv.Integration(t, "PostgreSQL, Kafka and a cgroup memory controller (root)")
	var b [4]byte
	_, _ = rand.Read(b[:])
	group, err := memcgroup.New(memcgroup.Root, "postline-flood-"+hex.EncodeToString(b[:]), floodLimit)
	if err != nil {
		t.Fatalf("the flood test runs the receiver under a %d MiB memory limit and cannot without it: %v "+
			"(run it as root on Linux with the cgroup memory controller; go test -short skips it)", floodLimit>>20, err)
	}
	t.Cleanup(func() {
		if err := group.Remove(); err != nil {
			t.Error(err)
		}
	})
	bin := buildReceiver(t)

	ctx := t.Context()
	dbURL, pool := testenv.NewSchema(t)
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	events := testenv.NewTopic(t, 1)
	const domain = "bounces.flood.postline.test"
	key := make([]byte, 24)
	_, _ = rand.Read(key)
	signer, err := returnpath.New(domain, [][]byte{[]byte(hex.EncodeToString(key))})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(idempotency.Config{Owner: "flood-test"}, pool, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	mails := seedSent(t, store, floodReports+1)

	addrs := freeAddrs(t, 2)
	smtpAddr, hooksAddr := addrs[0], addrs[1]
	p := startFloodReceiver(t, group, bin, map[string]string{
		"POSTLINE_KAFKA_BROKERS":       strings.Join(testenv.KafkaBrokers(), ","),
		"POSTLINE_EVENTS_TOPIC":        events,
		"POSTLINE_DATABASE_URL":        dbURL,
		"POSTLINE_BOUNCE_DOMAIN":       domain,
		"POSTLINE_RETURN_PATH_KEYS":    hex.EncodeToString(key),
		"POSTLINE_BOUNCE_SMTP_ADDR":    smtpAddr,
		"POSTLINE_HOOKS_ADDR":          hooksAddr,
		"POSTLINE_MAILGUN_SIGNING_KEY": hex.EncodeToString(key[:8]),
		"POSTLINE_RECEIVER_HTTP_ADDR":  "127.0.0.1:0",
		"POSTLINE_SHUTDOWN_TIMEOUT":    "5s",
		// As the chart sets it: GOMEMLIMIT follows limits.memory.
		"GOMEMLIMIT": strconv.Itoa(floodLimit),
	})
	if !group.Holds(p.pid()) {
		t.Fatalf("the receiver (pid %d) is not in %s: the limit would not apply", p.pid(), group.Dir())
	}
	before, err := group.Stats()
	if err != nil {
		t.Fatal(err)
	}

	fctx, cancel := context.WithTimeout(ctx, floodTimeout)
	defer cancel()
	started := time.Now()
	var (
		wg       sync.WaitGroup
		arrived  sync.WaitGroup // every flood session refused, or at DATA
		unblock  = make(chan struct{})
		sessions = make([]floodResult, floodSessions)
		requests = make([]floodResult, floodRequests)
		reports  = make([]reportResult, floodReports)
	)
	arrived.Add(floodSessions)
	for i := range floodSessions {
		size := floodBytes + 1024 // over MaxMessageBytes: 552
		if i%2 == 1 {
			size = floodBytes - 64<<10 // under it: taken, only its start held
		}
		local := fmt.Sprintf("127.0.1.%d", 1+i%floodClients)
		wg.Go(func() {
			sessions[i] = floodSession(fctx, smtpAddr, local, domain, size, arrived.Done, unblock)
		})
	}
	body := bytes.Repeat([]byte("x"), floodBodyBytes)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: floodTimeout}
	for i := range floodRequests {
		wg.Go(func() {
			<-unblock
			requests[i] = floodRequest(fctx, client, "http://"+hooksAddr+"/hooks/mailgun", body)
		})
	}
	var next atomic.Int64
	for range floodReporters {
		wg.Go(func() {
			<-unblock // while the admitted sessions send their data
			for {
				i := int(next.Add(1)) - 1
				if i >= floodReports {
					return
				}
				reports[i] = sendValidReport(fctx, smtpAddr, signer, mails[i])
			}
		})
	}
	go func() {
		arrived.Wait()
		close(unblock)
	}()
	wg.Wait()
	took := time.Since(started)

	// The memory first: never killed, never at the limit.
	st, err := group.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flood of %d sessions and %d requests in %s: cgroup peak %.1f MiB of %d MiB (%.1f MiB before the flood), "+
		"VmHWM %.1f MiB, limit reached %d times, OOM kills %d",
		floodSessions, floodRequests, took.Round(time.Millisecond), mib(st.Peak), floodLimit>>20, mib(before.Peak),
		mib(vmHWM(p.pid())), st.LimitHits, st.OOMKills)
	switch {
	case st.OOMKills < 0:
		t.Errorf("the kernel does not report OOM kills of %s: the test cannot tell", group.Dir())
	case st.OOMKills > 0:
		t.Fatalf("the OOM killer ended %d process(es) of the receiver's group", st.OOMKills)
	}
	if st.Peak >= floodLimit || st.LimitHits > 0 {
		t.Errorf("the receiver reached its limit: peak %.1f MiB of %d MiB, limit reached %d times",
			mib(st.Peak), floodLimit>>20, st.LimitHits)
	}
	if !p.running() {
		t.Fatalf("the receiver exited during the flood (%v)", p.state)
	}

	// It still serves: one more report, after the flood, is taken at once.
	last := sendValidReport(fctx, smtpAddr, signer, mails[floodReports])
	if last.err != nil || last.attempts != 1 {
		t.Errorf("a report after the flood: %v after %d attempts, want taken at the first", last.err, last.attempts)
	}
	if code, _, err := p.get(ctx, "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz after the flood: %d, %v", code, err)
	}
	metrics := p.metrics(ctx, t)

	// The sessions: every one either refused with 4xx at the greeting or
	// answered after its data, as its size deserved.
	refusedSeen := 0
	outcomes := map[string]int{}
	for i, r := range sessions {
		outcomes[r.outcome]++
		switch {
		case r.err != nil:
			t.Errorf("flood session %d: %v", i, r.err)
		case r.outcome == "refused":
			refusedSeen++
			if r.code != 421 || !strings.HasPrefix(r.text, "4.7.0 ") {
				t.Errorf("flood session %d refused with %d %s, want 421 4.7.0", i, r.code, r.text)
			}
		case i%2 == 0 && r.code != 552, i%2 == 1 && r.code != 250:
			t.Errorf("flood session %d (%d bytes) answered %d %s after its data", i, floodBytes, r.code, r.text)
		}
	}
	t.Logf("flood sessions: %v", outcomes)
	if refusedSeen == 0 || outcomes["data"] > inbound.DefaultMaxSessions {
		t.Errorf("%d of %d sessions refused and %d admitted to DATA at once: the session limit (%d) did not act",
			refusedSeen, floodSessions, outcomes["data"], inbound.DefaultMaxSessions)
	}
	codes := map[int]int{}
	for i, r := range requests {
		codes[r.code]++
		if r.err != nil {
			t.Errorf("webhook request %d: %v", i, r.err)
		} else if r.code != http.StatusServiceUnavailable && (r.code < 400 || r.code > 499) {
			t.Errorf("webhook request %d: %d, want 503 (over the limit) or 4xx (unsigned)", i, r.code)
		}
	}
	t.Logf("webhook requests by status: %v", codes)

	// The reports: every one applied, its recipient bounced.
	attempts := 0
	for i, r := range reports {
		attempts += r.attempts
		refusedSeen += r.refused
		if r.err != nil {
			t.Errorf("valid report %d: %v after %d attempts", i, r.err, r.attempts)
		}
	}
	refusedSeen += last.refused
	t.Logf("%d valid reports took %d attempts", floodReports, attempts)
	ids := make([]string, len(mails))
	for i, m := range mails {
		ids[i] = m.id
	}
	rows, err := store.Recipients(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mails {
		got := rows[m.id]
		if len(got) != 1 || got[0].State != idempotency.RecipientBounced || got[0].Status != "5.1.1" {
			t.Errorf("mail %s: recipients %+v, want one bounced with 5.1.1", m.id, got)
		}
	}

	// The count of refusals is the one clients saw.
	if got := metrics.sum("postline_admission_refused_total", `limit="smtp_sessions"`); got != float64(refusedSeen) {
		t.Errorf("postline_admission_refused_total{limit=smtp_sessions} = %v, clients saw %d refusals", got, refusedSeen)
	}
	oversize := 0
	for i, r := range sessions {
		if i%2 == 0 && r.outcome == "data" {
			oversize++
		}
	}
	if got := metrics.sum("postline_inbound_messages_total", `result="too_large"`); got != float64(oversize) {
		t.Errorf("postline_inbound_messages_total{result=too_large} = %v, want the %d oversize messages sent", got, oversize)
	}

	if code, err := p.terminate(15 * time.Second); err != nil || code != 0 {
		t.Errorf("SIGTERM after the flood: exit %d, %v", code, err)
	}
}

// floodResult is how one flood session or request ended.
type floodResult struct {
	outcome string // "refused" at the greeting, or "data" sent
	code    int
	text    string
	err     error // anything else: a reset, a timeout, a wrong reply
}

// floodSession opens an SMTP session from local and, if admitted, sends a
// message of size bytes to the feedback address once unblock is closed.
// arrived is called once the session is refused or has DATA's 354.
func floodSession(ctx context.Context, addr, local, domain string, size int, arrived func(), unblock <-chan struct{}) (res floodResult) {
	var once sync.Once
	arrive := func() { once.Do(arrived) }
	defer arrive()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return floodResult{err: err}
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	tc := textproto.NewConn(c)
	code, text, err := tc.ReadResponse(0)
	if err != nil {
		return floodResult{err: fmt.Errorf("greeting: %w", err)}
	}
	if code/100 == 4 {
		return floodResult{outcome: "refused", code: code, text: text}
	}
	for _, step := range []struct {
		cmd  string
		want int
	}{{"EHLO flood.test", 250}, {"MAIL FROM:<>", 250}, {"RCPT TO:<fbl@" + domain + ">", 250}, {"DATA", 354}} {
		id, err := tc.Cmd("%s", step.cmd)
		if err != nil {
			return floodResult{err: err}
		}
		tc.StartResponse(id)
		code, text, err := tc.ReadResponse(step.want)
		tc.EndResponse(id)
		if err != nil {
			return floodResult{err: fmt.Errorf("%s: %d %s: %w", step.cmd, code, text, err)}
		}
	}
	arrive()
	select {
	case <-unblock:
	case <-ctx.Done():
		return floodResult{err: ctx.Err()}
	}
	w := bufio.NewWriterSize(c, 64<<10)
	line := []byte(strings.Repeat("flood data that no report needs, ", 3)[:98] + "\r\n")
	fmt.Fprintf(w, "From: flood@flood.test\r\nSubject: flood\r\n\r\n")
	for n := 0; n < size; n += len(line) {
		if _, err := w.Write(line); err != nil {
			return floodResult{err: fmt.Errorf("write data: %w", err)}
		}
	}
	if _, err := w.WriteString(".\r\n"); err != nil {
		return floodResult{err: err}
	}
	if err := w.Flush(); err != nil {
		return floodResult{err: fmt.Errorf("write data: %w", err)}
	}
	code, text, err = tc.ReadResponse(0)
	if err != nil && code == 0 {
		return floodResult{err: fmt.Errorf("reply to the data: %w", err)}
	}
	_ = tc.PrintfLine("QUIT")
	return floodResult{outcome: "data", code: code, text: text}
}

// floodRequest posts body to url (unsigned: the receiver refuses it, or
// answers 503 when it is over its request limit).
func floodRequest(ctx context.Context, client *http.Client, url string, body []byte) floodResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return floodResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return floodResult{err: err}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return floodResult{code: resp.StatusCode}
}

// sentMail is a mail recorded as sent to one recipient, as the worker
// records it once a relay took it.
type sentMail struct{ id, rcpt string }

func seedSent(t *testing.T, store *idempotency.Store, n int) []sentMail {
	t.Helper()
	mails := make([]sentMail, n)
	for i := range mails {
		m := sentMail{id: fmt.Sprintf("flood-%d@app.flood.postline.test", i), rcpt: fmt.Sprintf("gone%d@recipient.example", i)}
		h := sha256.Sum256([]byte(m.id))
		cs, err := store.Claim(t.Context(), []idempotency.ClaimRequest{{MessageID: m.id, PayloadHash: h[:], Attempt: 1, Tenant: "flood"}})
		if err != nil || len(cs) != 1 {
			t.Fatalf("Claim(%s) = %+v, %v", m.id, cs, err)
		}
		if _, err := store.Record(t.Context(), []idempotency.Fate{{MessageID: m.id, Version: cs[0].Version,
			Status: idempotency.StatusSent, Attempt: 1, Provider: "primary", Stream: "transactional",
			ConfirmBy: time.Now().Add(time.Hour), Recipients: []idempotency.RecipientFate{{Index: 0, Address: m.rcpt,
				State: idempotency.RecipientAccepted, Attempt: 1, Provider: "primary", Source: "smtp"}}}}); err != nil {
			t.Fatalf("Record(%s): %v", m.id, err)
		}
		mails[i] = m
	}
	return mails
}

// reportResult is how the delivery of one valid report went.
type reportResult struct {
	attempts, refused int // refused: greetings with 4xx
	err               error
}

// sendValidReport delivers a hard bounce for m to its return path from
// 127.0.0.2, as an MTA would: a 4xx (a refused session, a report not
// recorded yet) is tried again after a pause, until ctx ends.
func sendValidReport(ctx context.Context, addr string, signer *returnpath.Signer, m sentMail) reportResult {
	rcpt := signer.Address(m.id, 0)
	raw, err := bounce.BuildDSN(bounce.DSN{Date: time.Now(), ReturnPath: rcpt, MessageID: m.id, OriginalTo: m.rcpt,
		Recipients: []report.Report{{Kind: report.Bounced, Recipient: m.rcpt, Status: "5.1.1", Code: 550, Diagnostic: "550 5.1.1 user unknown"}}})
	if err != nil {
		return reportResult{err: err}
	}
	var res reportResult
	for {
		res.attempts++
		code, refused, err := deliver(ctx, addr, rcpt, raw)
		if refused {
			res.refused++
		}
		if err == nil {
			return res
		}
		if code/100 != 4 && !refused {
			res.err = err
			return res
		}
		select {
		case <-ctx.Done():
			res.err = fmt.Errorf("%w (last: %v)", ctx.Err(), err)
			return res
		case <-time.After(100 * time.Millisecond): // an MTA's retry, compressed
		}
	}
}

// deliver sends raw to rcpt in one session from 127.0.0.2 and returns
// the code of the first reply that was not the expected one.
func deliver(ctx context.Context, addr, rcpt string, raw []byte) (code int, refused bool, err error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, false, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	tc := textproto.NewConn(c)
	if code, text, err := tc.ReadResponse(220); err != nil {
		return code, code/100 == 4, fmt.Errorf("greeting %d %s: %w", code, text, err)
	}
	for _, step := range []struct {
		cmd  string
		want int
	}{{"EHLO mta.recipient.example", 250}, {"MAIL FROM:<>", 250}, {"RCPT TO:<" + rcpt + ">", 250}, {"DATA", 354}} {
		id, err := tc.Cmd("%s", step.cmd)
		if err != nil {
			return 0, false, err
		}
		tc.StartResponse(id)
		code, text, err := tc.ReadResponse(step.want)
		tc.EndResponse(id)
		if err != nil {
			return code, false, fmt.Errorf("%s: %d %s: %w", step.cmd, code, text, err)
		}
	}
	w := tc.DotWriter()
	if _, err := w.Write(raw); err != nil {
		return 0, false, err
	}
	if err := w.Close(); err != nil {
		return 0, false, err
	}
	if code, text, err := tc.ReadResponse(250); err != nil {
		return code, false, fmt.Errorf("end of data: %d %s: %w", code, text, err)
	}
	_ = tc.PrintfLine("QUIT")
	return 250, false, nil
}

// buildReceiver builds this package into the test's temporary directory:
// the test runs the binary, not run(), so that the cgroup holds exactly the
// receiver. It is built without -race, whose shadow memory would swamp
// what the test measures.
func buildReceiver(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bounce-receiver")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/bounce-receiver: %v\n%s", err, out)
	}
	return bin
}

// freeAddrs returns n distinct loopback addresses nothing listens on; it
// holds them all open until it has them, so that none is handed out twice.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// floodProc is the receiver running in its group.
type floodProc struct {
	cmd     *exec.Cmd
	logPath string
	http    string // its ops address, from its start line
	exited  chan struct{}
	state   *os.ProcessState
}

// startFloodReceiver starts bin in group with env (and no other POSTLINE_
// or GO memory setting of this process), waits until /readyz answers 200,
// and kills it at the end of the test if it still runs.
func startFloodReceiver(t *testing.T, group *memcgroup.Group, bin string, env map[string]string) *floodProc {
	t.Helper()
	p := &floodProc{cmd: group.Command(bin), logPath: filepath.Join(t.TempDir(), "bounce-receiver.log"), exited: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POSTLINE_") && !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOGC=") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start the receiver: %v", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = logFile.Write(line)
			_, _ = logFile.Write([]byte{'\n'})
			var rec struct {
				Msg      string `json:"msg"`
				HTTPAddr string `json:"http_addr"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "bounce-receiver starting" {
				addr <- rec.HTTPAddr
			}
		}
		_, _ = io.Copy(logFile, stdout)
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		_ = logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
		if t.Failed() {
			t.Logf("the receiver's log (%s), last lines:\n%s", p.logPath, p.tail(30))
		}
	})
	select {
	case p.http = <-addr:
	case <-p.exited:
		t.Fatalf("the receiver exited at start (%v):\n%s", p.state, p.tail(30))
	case <-time.After(30 * time.Second):
		t.Fatalf("the receiver did not log its start within 30s:\n%s", p.tail(30))
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		code, _, err := p.get(t.Context(), "/readyz")
		if err == nil && code == http.StatusOK {
			return p
		}
		if !p.running() {
			t.Fatalf("the receiver exited before it was ready (%v):\n%s", p.state, p.tail(30))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver was not ready within 45s (%d, %v):\n%s", code, err, p.tail(30))
		}
		time.Sleep(50 * time.Millisecond) // polling /readyz with a deadline
	}
}

func (p *floodProc) pid() int { return p.cmd.Process.Pid }

func (p *floodProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *floodProc) get(ctx context.Context, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.http+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// scrape is the text of one /metrics scrape.
type scrape string

func (p *floodProc) metrics(ctx context.Context, t *testing.T) scrape {
	t.Helper()
	code, body, err := p.get(ctx, "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("scrape /metrics: %d, %v", code, err)
	}
	return scrape(body)
}

// sum adds the samples of name whose label set contains each of labels
// (written as in the exposition: limit="smtp_sessions").
func (s scrape) sum(name string, labels ...string) float64 {
	var total float64
next:
	for line := range strings.Lines(string(s)) {
		series, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !(series == name || strings.HasPrefix(series, name+"{")) {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(series, l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(value, 64)
		if err == nil {
			total += v
		}
	}
	return total
}

// terminate sends SIGTERM and waits up to wait for the exit code.
func (p *floodProc) terminate(wait time.Duration) (int, error) {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return -1, err
	}
	select {
	case <-p.exited:
		return p.state.ExitCode(), nil
	case <-time.After(wait):
		return -1, errors.New("still running")
	}
}

func (p *floodProc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// vmHWM is the process's peak resident set, 0 if unreadable.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil && len(f) == 2 {
				return n << 10
			}
		}
	}
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
