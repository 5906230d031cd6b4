package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// The secrets canary: the harness knows a set of secrets the processes it
// starts hold (mail bodies, passwords), and fails a test when any of them
// shows up where an operator or a log collector would see it: a process's
// log, its /metrics, a dead letter's headers (the dead letter's value is the
// original record by design), a retry copy's headers, or postctl's output.
// The secrets are chosen once per test binary, so every suite runs with
// them.
//
// A secret is matched by its random tokens rather than by its whole text: a
// password cut in two by a URL parser, or re-encoded, still shows one of
// them.

// The kinds of secret, as failures name them (a failure never prints the
// secret itself).
const (
	secretBody     = "mail body canary"
	secretSMTP     = "SMTP AUTH password"
	secretPostgres = "Postgres password"
	secretSASL     = "Kafka SASL password"
)

// canaryToken returns a fresh random token: hex only, so that no encoding
// (percent, JSON, quoted-printable) changes it.
func canaryToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The canaries, fixed for the test binary.
var (
	bodyToken = canaryToken()
	// bodyCanary is in the text of every job newJobs makes. (Not in an
	// HTML part: the suites rely on an empty Text leaving a job without a
	// body. TestSecretDeliveryErrors adds one.)
	bodyCanary = "canary-body-" + bodyToken

	smtpTokens = [2]string{canaryToken(), canaryToken()}
	// smtpUser and smtpPassword are the SMTP AUTH credentials of the
	// relays the harness points workers at (Mailpit accepts any). The
	// password holds every character a relay URL must percent-encode.
	smtpUser     = "canary-user"
	smtpPassword = "pw/" + smtpTokens[0] + "?#," + smtpTokens[1] + "%:@"

	pgTokens = [2]string{canaryToken(), canaryToken()}
	// pgPassword is a wrong Postgres password for the error paths.
	pgPassword = "pg/" + pgTokens[0] + "?#" + pgTokens[1] + "%"
)

// secretKind is a kind of secret and the strings that betray it.
type secretKind struct {
	name    string
	needles []string
}

// knownSecrets returns every secret kind the harness knows. The SASL
// password is the secured listener's (testenv.SecureKafka), when the stack
// has one.
var knownSecrets = sync.OnceValue(func() []secretKind {
	plain := func(user, pass string) string {
		// An AUTH PLAIN response as a protocol trace would show it.
		return base64.StdEncoding.EncodeToString([]byte("\x00" + user + "\x00" + pass))
	}
	kinds := []secretKind{
		{secretBody, []string{bodyToken}},
		{secretSMTP, []string{smtpTokens[0], smtpTokens[1], plain(smtpUser, smtpPassword)}},
		{secretPostgres, []string{pgTokens[0], pgTokens[1]}},
	}
	if pass := saslPassword(); len(pass) >= 8 {
		kinds = append(kinds, secretKind{secretSASL, []string{pass, url.QueryEscape(pass)}})
	}
	return kinds
})

// saslPassword reads the password of the stack's SASL listener the way
// testenv.SecureKafka does, without failing a test when the stack has none
// (TestSecretCanaries checks the two agree).
func saslPassword() string {
	file := os.Getenv("POSTLINE_TEST_KAFKA_SASL_PASSWORD_FILE")
	if file == "" {
		return ""
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\r\n")
}

// leakedSecrets returns the kinds of secret data holds.
func leakedSecrets(data []byte) []string {
	var out []string
	for _, k := range knownSecrets() {
		for _, n := range k.needles {
			if bytes.Contains(data, []byte(n)) {
				out = append(out, k.name)
				break
			}
		}
	}
	return out
}

// checkNoSecrets fails t for each kind of secret data holds; where names
// the place (never the secret). It reports whether data was clean.
func checkNoSecrets(t testing.TB, where string, data []byte) bool {
	t.Helper()
	kinds := leakedSecrets(data)
	for _, k := range kinds {
		t.Errorf("secret leak: %s holds the %s", where, k)
	}
	return len(kinds) == 0
}

// checkNoSecretHeaders fails t when a header of a record of topic holds a
// secret. Only headers: a dead letter's or retry copy's value is the
// original job.
func checkNoSecretHeaders(t testing.TB, topic string, msgs []kafka.Message) {
	t.Helper()
	for _, m := range msgs {
		for _, h := range m.Headers {
			checkNoSecrets(t, fmt.Sprintf("header %s of the record %s/%d@%d", h.Key, topic, m.Partition, m.Offset),
				append([]byte(h.Key+"\x00"), h.Value...))
		}
	}
}

// redactSecrets replaces every known secret in s, so that printing a log
// tail or a command's output on failure does not spread a leak further.
func redactSecrets(s string) string {
	for _, k := range knownSecrets() {
		for _, n := range k.needles {
			s = strings.ReplaceAll(s, n, "<redacted "+k.name+">")
		}
	}
	return s
}

// leakSet collects the secrets seen in a process's outputs while the test
// runs (from any goroutine), to be reported from the test's cleanup.
type leakSet struct {
	mu    sync.Mutex
	found map[string]bool // "<where> holds the <kind>"
}

// note records the kinds of secret data holds.
func (l *leakSet) note(where string, data []byte) {
	kinds := leakedSecrets(data)
	if len(kinds) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.found == nil {
		l.found = make(map[string]bool)
	}
	for _, k := range kinds {
		l.found[where+" holds the "+k] = true
	}
}

// report fails t once for each leak noted.
func (l *leakSet) report(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range slices.Sorted(maps.Keys(l.found)) {
		t.Errorf("secret leak: %s", f)
	}
}

// scrapeForSecrets scrapes /metrics once (get notes any secret in it); it
// is best effort, for a process about to stop.
func (w *workerProc) scrapeForSecrets() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _, _ = w.get(ctx, "/metrics")
}

// percentEncode encodes every byte of s but the unreserved ones (RFC 3986),
// which is always a valid user or password in a URL.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// smtpUserinfo is the user:password part of a relay URL with the canary
// SMTP credentials.
func smtpUserinfo() string { return percentEncode(smtpUser) + ":" + percentEncode(smtpPassword) }

// The detector itself: each kind is found raw, inside a JSON log line,
// percent-encoded and cut in half at a URL delimiter; clean text passes;
// redaction removes every trace. Without it a broken detector would let
// every other check pass.
func TestSecretCanaries(t *testing.T) {
	if p := os.Getenv("POSTLINE_TEST_KAFKA_SASL_PASSWORD_FILE"); p != "" && !testing.Short() {
		if got, want := saslPassword(), testenv.SecureKafka(t).SASL.Password; got != want {
			t.Error("saslPassword does not read the password testenv.SecureKafka uses")
		}
	}
	if j := newJobs(1, "canary")[0]; !strings.Contains(j.Text, bodyCanary) {
		t.Errorf("newJobs' text does not carry the body canary")
	}
	u, err := url.Parse("smtp://" + smtpUserinfo() + "@127.0.0.1:25?tls=none")
	if err != nil {
		t.Fatalf("the canary relay URL does not parse: %v", err)
	}
	if p, _ := u.User.Password(); u.User.Username() != smtpUser || p != smtpPassword {
		t.Error("the canary relay URL does not decode to the canary credentials")
	}
	cases := []struct {
		name string
		data string
		want []string
	}{
		{"clean", `{"level":"INFO","msg":"sent","message_id":"a@b"}`, nil},
		{"body in a log line", `{"msg":"send failed","body":"` + bodyCanary + `"}`, []string{secretBody}},
		{"SMTP password raw", "auth " + smtpPassword, []string{secretSMTP}},
		{"SMTP password encoded", "smtp://" + smtpUserinfo() + "@host", []string{secretSMTP}},
		{"SMTP password cut at '?'", `parse "smtp://u:pw/` + smtpTokens[0] + `": bad`, []string{secretSMTP}},
		{"SMTP password tail", "#," + smtpTokens[1] + "%:@host", []string{secretSMTP}},
		{"AUTH PLAIN trace", "C: AUTH PLAIN " + base64.StdEncoding.EncodeToString([]byte("\x00"+smtpUser+"\x00"+smtpPassword)), []string{secretSMTP}},
		{"Postgres password", "postgres://u:" + percentEncode(pgPassword) + "@h/db", []string{secretPostgres}},
		{"two kinds", bodyCanary + " " + pgPassword, []string{secretBody, secretPostgres}},
	}
	if pass := saslPassword(); len(pass) >= 8 {
		cases = append(cases, struct {
			name string
			data string
			want []string
		}{"SASL password", "sasl: " + pass, []string{secretSASL}})
	}
	for _, tt := range cases {
		got := leakedSecrets([]byte(tt.data))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: found %v, want %v", tt.name, got, tt.want)
		}
		if left := leakedSecrets([]byte(redactSecrets(tt.data))); len(left) > 0 {
			t.Errorf("%s: %v left after redaction", tt.name, left)
		}
	}
}

// The delivery error paths with the canaries in play, all checked by the
// harness (the worker's and scheduler's logs at debug level and /metrics,
// the dead letters' and retry copies' headers, postctl's output): relay r1
// refuses the canary password (535 5.7.8) and the worker fails over to r2,
// which requires it; r2 rejects one job's recipient (550) and another job's
// content after its body (text and HTML, both with the body canary) was
// transmitted (554 at the final dot). Both are
// dead-lettered with an error header that names the failure but holds
// neither the body nor a password.
func TestSecretDeliveryErrors(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, fastTiers)
	var r1Auth commandLog
	r1 := smtptest.NewServer(t, smtptest.WithAuth(smtpUser, "not-the-canary-password"),
		smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply { r1Auth.record(c); return nil }))

	jobs := taggedJobs(3, "secret", job.PriorityNormal)
	for i := range jobs {
		jobs[i].HTML = "<p>" + bodyCanary + "</p>"
	}
	permRcpt, contentRejected := jobs[1].To[0], jobs[2].MessageID
	r2 := smtptest.NewServer(t, smtptest.WithAuth(smtpUser, smtpPassword),
		smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
			switch {
			case c.Verb == smtptest.VerbRcpt && c.Arg == permRcpt:
				return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user here"}
			case c.Verb == smtptest.VerbData && c.Arg == contentRejected:
				return &smtptest.Reply{Code: 554, Enhanced: "5.6.0", Text: "message content rejected"}
			}
			return nil
		}))
	relays := strings.Join([]string{
		"smtp://" + smtpUserinfo() + "@" + r1.Addr() + "?name=r1&priority=1&tls=none",
		"smtp://" + smtpUserinfo() + "@" + r2.Addr() + "?name=r2&priority=2&tls=none",
	}, ",")
	s.startScheduler("scheduler")
	w := s.startFailWorker("worker", relays, map[string]string{"POSTLINE_LOG_LEVEL": "debug"})

	ids := s.publish(jobs...)
	rows := s.waitRows(ids, 45*time.Second, "one sent, two failed", func(r msgRow) bool {
		return r.Status == "sent" || r.Status == "failed"
	})
	if r := rows[ids[0]]; r.Status != "sent" || r.Provider != "r2" {
		t.Errorf("the good job's row %+v, want sent through r2", r)
	}
	for _, id := range ids[1:] {
		if r := rows[id]; r.Status != "failed" || r.ErrorClass != "permanent" {
			t.Errorf("%s: row %+v, want failed, class permanent", id, r)
		}
	}
	if len(r1Auth.times(smtptest.VerbAuth, smtpUser)) == 0 {
		t.Error("r1 saw no AUTH: the refusal path was not exercised")
	}
	var delivered bool
	for _, m := range r2.Messages() {
		if m.MessageID == ids[0] {
			delivered = true
			if m.Username != smtpUser || !bytes.Contains(m.Data, []byte(bodyToken)) {
				t.Errorf("r2 got the good job as user %q, body canary present %v; want the canary user and body",
					m.Username, bytes.Contains(m.Data, []byte(bodyToken)))
			}
		}
	}
	if !delivered {
		t.Error("r2 did not accept the good job")
	}

	// readDLQ checks the headers; here also that the letters are the ones
	// expected, name their failure and carry the body in their value (so
	// the header check had something to find).
	for _, dl := range s.readDLQ(2, 20*time.Second) {
		errHeader := testkit.Header(dl.Headers, jobheader.KeyDLQError)
		if errHeader == "" || !bytes.Contains(dl.Value, []byte(bodyToken)) {
			t.Errorf("dead letter %s: error header %q, value holds the body canary: %v; want an error and the original job",
				dl.Key, redactSecrets(errHeader), bytes.Contains(dl.Value, []byte(bodyToken)))
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, tier := range s.tiers {
		msgs, err := s.tierRecords(ctx, tier)
		if err != nil {
			t.Fatal(err)
		}
		checkNoSecretHeaders(t, s.tierTopic(tier), msgs)
	}
	// postctl shows the rows' last errors and the dead letters.
	s.postctl(append([]string{"status"}, ids...)...)
	s.postctl("dlq", "ls")
	s.postctl("dlq", "ls", "--output", "json")
	if _, err := w.families(ctx); err != nil {
		t.Error(err)
	}
	if code, _ := w.Terminate(); code != 0 {
		t.Errorf("worker exit code %d", code)
	}
}

// runToExit runs bin with env (the test's POSTLINE_* variables dropped) and
// args, and returns its combined output and exit code; it fails t when the
// process runs longer than timeout.
func runToExit(t *testing.T, bin string, env map[string]string, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POSTLINE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s still ran after %s:\n%s", bin, timeout, redactSecrets(string(out)))
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("run %s: %v", bin, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// A worker whose SMTP or Postgres settings hold a bad password, or a
// password that breaks its URL, exits non-zero at start with an error that
// names the setting and holds no part of the password.
func TestSecretWorkerStartErrors(t *testing.T) {
	s := newStack(t)
	dbURL, err := url.Parse(s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	withDBPassword := func(pass string) string {
		u := *dbURL
		u.User = url.UserPassword(u.User.Username(), pass)
		return u.String()
	}
	// A host and port nothing listens on: no case may get as far as a
	// connection to a relay.
	const relayAddr = "127.0.0.1:9"
	rawURL := func(pass string) string {
		return "smtp://" + smtpUser + ":" + pass + "@" + relayAddr + "?name=a&tls=none"
	}
	tests := []struct {
		name string
		env  map[string]string
		want string // a part of the error
	}{
		{"relay URL password with '/', '?', '#' unencoded",
			map[string]string{"POSTLINE_SMTP_RELAYS": rawURL("pw/" + smtpTokens[0] + "?#" + smtpTokens[1])}, "POSTLINE_SMTP_RELAYS"},
		{"relay URL password with '?' unencoded",
			map[string]string{"POSTLINE_SMTP_RELAYS": rawURL(smtpTokens[0] + "?" + smtpTokens[1])}, "POSTLINE_SMTP_RELAYS"},
		{"relay URL password with '#' unencoded",
			map[string]string{"POSTLINE_SMTP_RELAYS": rawURL(smtpTokens[0] + "#" + smtpTokens[1])}, "POSTLINE_SMTP_RELAYS"},
		{"relay URL password with ',' unencoded",
			map[string]string{"POSTLINE_SMTP_RELAYS": rawURL(smtpTokens[0] + "," + smtpTokens[1])}, "POSTLINE_SMTP_RELAYS"},
		{"relay URL password with a bad percent-escape",
			map[string]string{"POSTLINE_SMTP_RELAYS": rawURL(smtpTokens[0] + "%zz" + smtpTokens[1])}, "POSTLINE_SMTP_RELAYS"},
		{"relay URL with an encoded password and a bad port",
			map[string]string{"POSTLINE_SMTP_RELAYS": "smtp://" + smtpUserinfo() + "@127.0.0.1:99999?tls=none"}, "POSTLINE_SMTP_RELAYS"},
		{"relay URL with an encoded password and an unknown parameter",
			map[string]string{"POSTLINE_SMTP_RELAYS": "smtp://" + smtpUserinfo() + "@" + relayAddr + "?tls=none&pass=" + smtpTokens[1]}, "POSTLINE_SMTP_RELAYS"},
		// The error names POSTLINE_SMTP_USERNAME (the validation error is
		// about both), which is not wrong.
		{"SMTP password with a line feed",
			map[string]string{"POSTLINE_SMTP_PASSWORD": smtpPassword + "\nX"}, "POSTLINE_SMTP_"},
		{"Postgres URL password with '/' unencoded",
			map[string]string{"POSTLINE_DATABASE_URL": strings.Replace(s.dbURL, dbURL.User.String()+"@",
				dbURL.User.Username()+":"+pgTokens[0]+"/"+pgTokens[1]+"@", 1)}, "POSTLINE_DATABASE_URL"},
		{"Postgres URL password with '/', '?', '#', '%' unencoded",
			map[string]string{"POSTLINE_DATABASE_URL": strings.Replace(s.dbURL, dbURL.User.String()+"@",
				dbURL.User.Username()+":"+pgPassword+"@", 1)}, "POSTLINE_DATABASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := s.workerEnv("start-error", tt.env)
			out, code := runToExit(t, workerBin, env, 60*time.Second)
			if code == 0 {
				t.Errorf("exit code 0, want non-zero")
			}
			if checkNoSecrets(t, "the worker's output", []byte(out)) && !strings.Contains(out, tt.want) {
				t.Errorf("the error does not name %s:\n%s", tt.want, tail2(out))
			}
		})
	}
	// A wrong Postgres password is not a start error: the worker retries
	// until Postgres answers, as it does through an outage. Its log says
	// why, without the password (the harness checks the log and /metrics).
	t.Run("Postgres URL with a wrong password", func(t *testing.T) {
		w := startWorker(t, s.workerEnv("wrong-db-password", map[string]string{"POSTLINE_DATABASE_URL": withDBPassword(pgPassword)}))
		testkit.Eventually(t, 30*time.Second, "the worker logs the refused password", func(context.Context) (bool, string) {
			log, err := os.ReadFile(w.logPath)
			return bytes.Contains(log, []byte("password authentication failed")), fmt.Sprint(err)
		})
		if ok, _ := w.Ready(t.Context()); ok {
			t.Error("the worker is ready without Postgres")
		}
		w.Terminate()
	})
}

// postctl with a database URL that holds a wrong or URL-breaking password
// fails with an error that holds no part of it.
func TestSecretPostctlErrors(t *testing.T) {
	testenv.Integration(t, "PostgreSQL")
	if postctlBin == "" {
		t.Fatal("the postctl binary was not built")
	}
	base, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	hostPart := base.Host + base.Path + "?" + base.RawQuery
	user := base.User.Username()
	for _, tt := range []struct{ name, dbURL string }{
		{"wrong password", "postgres://" + user + ":" + percentEncode(pgPassword) + "@" + hostPart},
		{"'/' unencoded", "postgres://" + user + ":" + pgTokens[0] + "/" + pgTokens[1] + "@" + hostPart},
		{"'?' unencoded", "postgres://" + user + ":" + pgTokens[0] + "?" + pgTokens[1] + "@" + hostPart},
		{"'#' unencoded", "postgres://" + user + ":" + pgTokens[0] + "#" + pgTokens[1] + "@" + hostPart},
		{"'%' unencoded", "postgres://" + user + ":" + pgTokens[0] + "%zz" + pgTokens[1] + "@" + hostPart},
		{"'/' and '%' unencoded", "postgres://" + user + ":" + pgTokens[0] + "/" + pgTokens[1] + "%@" + hostPart},
		{"space unencoded", "postgres://" + user + ":" + pgTokens[0] + " " + pgTokens[1] + "@" + hostPart},
		{"bad port", "postgres://" + user + ":" + percentEncode(pgPassword) + "@127.0.0.1:99999/postline"},
		{"bad sslmode", "postgres://" + user + ":" + percentEncode(pgPassword) + "@" + base.Host + base.Path + "?sslmode=bogus"},
		{"key/value form", "host=127.0.0.1 user=" + user + " password=" + pgTokens[0] + pgTokens[1] + " sslmode=bogus"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"status", "x@" + messageIDDomain, "--database-url", tt.dbURL},
				{"migrate", "--database-url", tt.dbURL},
			} {
				out, code := runToExit(t, postctlBin, nil, 60*time.Second, args...)
				if code == 0 {
					t.Errorf("postctl %s: exit code 0, want non-zero", args[0])
				}
				if checkNoSecrets(t, "the output of postctl "+args[0], []byte(out)) && args[0] == "status" && !strings.Contains(out, "--database-url") {
					t.Errorf("postctl %s: the error does not name --database-url:\n%s", args[0], tail2(out))
				}
			}
		})
	}
}

// tail2 is the last lines of a command's output, redacted.
func tail2(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return redactSecrets(strings.Join(lines[max(0, len(lines)-10):], "\n"))
}
