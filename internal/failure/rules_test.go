package failure

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// loadedDefault writes a copy of the default rules file to disk and loads
// it, as an operator's file is loaded.
func loadedDefault(t *testing.T) *RuleSet {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, DefaultRulesYAML(), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadRules(path)
	if err != nil {
		t.Fatalf("LoadRules(copy of the default): %v", err)
	}
	return s
}

// replyClassifiers are the reply classifiers a table must agree with: the
// package function, Default and a copy of the default file loaded from
// disk.
func replyClassifiers(t *testing.T) map[string]func(int, string, string) Verdict {
	return map[string]func(int, string, string) Verdict{
		"package": ClassifyReply,
		"default": Default().ClassifyReply,
		"loaded":  loadedDefault(t).ClassifyReply,
	}
}

// errorClassifiers are replyClassifiers' counterparts for errors.
func errorClassifiers(t *testing.T) map[string]func(error) Verdict {
	return map[string]func(error) Verdict{
		"package": Classify,
		"default": Default().Classify,
		"loaded":  loadedDefault(t).Classify,
	}
}

// TestDefaultRulesRoundTrip checks that the default marshals to a file
// that loads back as an equal rule set, and that the embedded file loaded
// from disk is the default.
func TestDefaultRulesRoundTrip(t *testing.T) {
	want := Default().Rules()
	if len(want) == 0 {
		t.Fatal("the default rule set is empty")
	}
	out, err := yaml.Marshal(Default())
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	again, err := ParseRules(out)
	if err != nil {
		t.Fatalf("ParseRules(marshalled default): %v\n%s", err, out)
	}
	if got := again.Rules(); !reflect.DeepEqual(got, want) {
		t.Errorf("marshalled default reloads differently:\n got %+v\nwant %+v", got, want)
	}
	if got := loadedDefault(t).Rules(); !reflect.DeepEqual(got, want) {
		t.Errorf("the default file loaded from disk differs from Default()")
	}
	// Rules and DefaultRulesYAML hand out copies.
	r := Default().Rules()
	r[0].Name, r[len(r)-1].NotEnhanced = "changed", []string{"5.1"}
	b := DefaultRulesYAML()
	b[0] = '!'
	if !reflect.DeepEqual(Default().Rules(), want) || DefaultRulesYAML()[0] == '!' {
		t.Error("changing what Rules or DefaultRulesYAML returned changed the default")
	}
}

// TestRetryHintRowMatchesParser pins the retry-hint-5xx row's text to the
// patterns ParseRetryAfter reads hints with: a reply the row sends to a
// throttle must carry a hint the parser finds.
func TestRetryHintRowMatchesParser(t *testing.T) {
	var parts []string
	for _, p := range retryAfterPatterns {
		parts = append(parts, strings.TrimPrefix(p.String(), "(?i)"))
	}
	want := strings.Join(parts, "|")
	i := slices.IndexFunc(Default().Rules(), func(r Rule) bool { return r.Name == "retry-hint-5xx" })
	if i < 0 {
		t.Fatal("no retry-hint-5xx row")
	}
	if got := Default().Rules()[i].Text; got != want {
		t.Errorf("retry-hint-5xx text\n got %s\nwant %s (retryAfterPatterns)", got, want)
	}
}

// legacyRules are the rows the table had before bounce types; every other
// default row was added in front of transient-default or
// permanent-default.
var legacyRules = []string{
	"auth-required", "auth-mechanism-too-weak", "auth-credentials-invalid", "auth-encryption-required",
	"mailbox-rate", "greylisted", "mailbox-full", "too-many-recipients", "congestion", "throttle-text",
	"auth-temporary", "policy-4xx", "mail-system-4xx", "service-unavailable", "tls-unavailable",
	"transient-default", "relay-denied", "temporary-rate-limit", "sending-quota", "retry-hint-5xx",
	"permanent-default",
}

// TestAddedRowsKeepVerdicts classifies every reply the tests know with the
// default and with only its legacy rows: the verdicts must be equal but
// for the rule name, which may change only from a default row to an added
// row.
func TestAddedRowsKeepVerdicts(t *testing.T) {
	var legacyRows []Rule
	for _, r := range Default().Rules() {
		if slices.Contains(legacyRules, r.Name) {
			legacyRows = append(legacyRows, r)
		}
	}
	legacy, err := NewRuleSet(legacyRows)
	if err != nil {
		t.Fatalf("legacy rows: %v", err)
	}
	if len(legacyRows) != len(legacyRules) {
		t.Fatalf("%d of the %d legacy rows are in the default", len(legacyRows), len(legacyRules))
	}
	changed := 0
	for _, c := range replyCorpus() {
		got, old := Default().ClassifyReply(c.code, c.enhanced, c.text), legacy.ClassifyReply(c.code, c.enhanced, c.text)
		if got.Rule != old.Rule {
			changed++
			if old.Rule != "permanent-default" && old.Rule != "transient-default" || slices.Contains(legacyRules, got.Rule) {
				t.Errorf("%d %s %q: rule %s was %s", c.code, c.enhanced, c.text, got.Rule, old.Rule)
			}
			got.Rule = old.Rule
		}
		if got != old {
			t.Errorf("%d %s %q: verdict %+v, was %+v", c.code, c.enhanced, c.text, got, old)
		}
	}
	if changed == 0 {
		t.Error("no reply in the corpus reaches an added row")
	}
}

type corpusReply struct {
	code           int
	enhanced, text string
}

// replyCorpus is every reply in this package's tables.
func replyCorpus() []corpusReply {
	var out []corpusReply
	for _, b := range bounceTable {
		out = append(out, corpusReply{b.code, b.enhanced, b.text})
	}
	for _, ex := range reachableExamples {
		out = append(out, corpusReply{ex[0].(int), ex[1].(string), ex[2].(string)})
	}
	for _, r := range syncReplies {
		out = append(out, corpusReply{r.code, r.enhanced, r.text})
	}
	return out
}

// syncReplies are replies a relay gives a send, with their rows.
var syncReplies = []struct {
	code           int
	enhanced, text string
	rule           string
}{
	{421, "4.7.0", "Too many concurrent SMTP connections; try again in 92 seconds", "throttle-text"},
	{454, "4.7.0", "Temporary authentication failure: policy", "auth-temporary"},
	{450, "", "Blocked by the receiver's reputation filter, retry in 10 minutes", "blocked-4xx"},
	{550, "5.1.1", "rate limited, try again later", "temporary-rate-limit"},
	{550, "5.7.1", "Message refused, try again in 30 seconds", "retry-hint-5xx"},
	{550, "5.2.1", "No such user, try again in 5 minutes", "mailbox-disabled"}, // no hint read in a mailbox status
	{550, "", "Unknown user, blocked", "policy-text"},
}

// bounceTable are replies as bounce reports carry them, from the major
// mailbox providers and MTAs, with what they mean for the recipient.
var bounceTable = []struct {
	name           string
	code           int
	enhanced, text string
	typ            BounceType
	suppress       bool
	rule           string
}{
	// Recipient-level hard bounces.
	{"gmail no such user", 550, "5.1.1", "The email account that you tried to reach does not exist. Please try double-checking the recipient's email address for typos or unnecessary spaces. Learn more at https://support.google.com/mail/?p=NoSuchUser", BounceHard, true, "recipient-unknown"},
	{"gmail diagnostic code", 0, "", "smtp; 550-5.1.1 The email account that you tried to reach does not exist. Please try", BounceHard, true, "recipient-unknown"},
	{"outlook mailbox unavailable", 550, "5.5.0", "Requested action not taken: mailbox unavailable (S2017062302). [AM0EUR02FT001.eop-EUR02.prod.protection.outlook.com]", BounceHard, true, "recipient-unknown-text"},
	{"exchange recipient not found", 550, "5.1.10", "RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup", BounceHard, true, "recipient-null-mx"},
	{"null MX", 556, "5.1.10", "Recipient address has null MX", BounceHard, true, "recipient-null-mx"},
	{"yahoo no account", 554, "", "delivery error: dd This user doesn't have a yahoo.com account (someone@yahoo.com) [0] - mta1234.mail.gq1.yahoo.com", BounceHard, true, "recipient-unknown-text"},
	{"yahoo mailbox disabled", 554, "", "30 Sorry, your message to someone@yahoo.com cannot be delivered. This mailbox is disabled (554.30).", BounceHard, true, "mailbox-disabled-text"},
	{"yahoo mailbox not found", 552, "", "1 Requested mail action aborted, mailbox not found", BounceHard, true, "recipient-unknown-text"},
	{"gmail disabled", 550, "5.2.1", "The email account that you tried to reach is disabled. Learn more at https://support.google.com/mail/?p=DisabledUser", BounceHard, true, "mailbox-disabled"},
	{"postfix virtual", 550, "5.1.1", "<jane@example.com>: Recipient address rejected: User unknown in virtual mailbox table", BounceHard, true, "recipient-unknown"},
	{"postfix diagnostic without a status", 0, "", "smtp; 550 <jane@example.com>: Recipient address rejected: User unknown in local recipient table", BounceHard, true, "recipient-unknown-text"},
	{"comcast", 550, "5.1.1", "Not our Customer", BounceHard, true, "recipient-unknown"},
	{"bad domain", 550, "5.1.2", "Host unknown (Name server: nonexistent.example: host not found)", BounceHard, true, "recipient-domain-invalid"},
	{"bad syntax", 553, "5.1.3", "The recipient address <jane@@example.com> is not a valid RFC 5321 address.", BounceHard, true, "recipient-address-invalid"},
	{"moved", 550, "5.1.6", "Recipient addresses in this domain have moved; mail not accepted", BounceHard, true, "recipient-moved"},
	{"exim no such user", 550, "", "No Such User Here", BounceHard, true, "recipient-unknown-text"},
	{"mimecast", 550, "", "Invalid Recipient - https://community.mimecast.com/docs/DOC-1369#550", BounceHard, true, "recipient-unknown-text"},
	{"rfc 5321 text", 550, "", "Requested action not taken: mailbox unavailable", BounceHard, true, "recipient-unknown-text"},
	{"unstructured user unknown", 0, "", "user unknown", BounceHard, true, "recipient-unknown-text"},
	{"status only 5.1.1", 0, "5.1.1", "", BounceHard, true, "recipient-unknown"},

	// Soft: full mailboxes, deferrals, permanent replies without a
	// recipient sign.
	{"gmail over quota", 552, "5.2.2", "The email account that you tried to reach is over quota. Please direct the recipient to https://support.google.com/mail/?p=OverQuotaTemp", BounceSoft, false, "mailbox-full-5xx"},
	{"gmail inbox full", 452, "4.2.2", "The recipient's inbox is out of storage space. Please direct the recipient to https://support.google.com/mail/?p=OverQuotaTemp", BounceSoft, false, "mailbox-full"},
	{"storage allocation", 552, "", "Requested mail action aborted: exceeded storage allocation", BounceSoft, false, "mailbox-full-text"},
	{"quota without a status", 550, "", "Mailbox is full / Blocks limit exceeded / Inode limit exceeded", BounceSoft, false, "mailbox-full-text"},
	{"unstructured mailbox full", 0, "", "Mailbox full", BounceSoft, false, "mailbox-full-text"},
	{"postgrey", 450, "4.7.1", "<jane@example.com>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/example.com.html", BounceSoft, false, "greylisted"},
	{"greylisting period", 451, "4.7.1", "Please try again later (greylisting)", BounceSoft, false, "greylisted"},
	{"gmail rate limit", 421, "4.7.28", "Gmail has detected an unusual rate of unsolicited mail originating from your IP address. To protect our users from spam, mail sent from your IP address has been temporarily rate limited.", BounceSoft, false, "throttle-text"},
	{"mailbox receiving too fast", 550, "5.2.1", "The user you are trying to contact is receiving mail at a rate that prevents additional messages from being delivered.", BounceSoft, false, "mailbox-rate-5xx"},
	{"sending quota", 550, "5.4.5", "Daily user sending quota exceeded.", BounceSoft, false, "sending-quota"},
	{"expired, status only", 0, "4.4.7", "", BounceSoft, false, "transient-default"},
	{"message too large", 552, "5.3.4", "Message size exceeds fixed limit", BounceSoft, false, "permanent-default"},
	{"unknown 5xx", 554, "", "Transaction failed", BounceSoft, false, "permanent-default"},
	{"qmail rcpthosts", 553, "", "sorry, that domain isn't in my list of allowed rcpthosts (#5.7.1)", BounceSoft, false, "permanent-default"},
	{"unstructured, no sign", 0, "", "The message could not be delivered", BounceSoft, false, RuleUnmatched},
	{"postfix connect failure", 0, "", "X-Postfix; connect to mx.example.com[192.0.2.1]:25: Connection timed out", BounceSoft, false, RuleUnmatched},
	{"empty", 0, "", "", BounceSoft, false, RuleUnmatched},

	// Policy: about the sender, shown to operators, never suppressing.
	{"spamhaus", 554, "5.7.1", "Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org; https://www.spamhaus.org/query/ip/192.0.2.1", BouncePolicy, false, "policy-5xx"},
	{"microsoft block list", 550, "5.7.1", "Unfortunately, messages from [192.0.2.1] weren't sent. Please contact your Internet service provider since part of their network is on our block list (S3150).", BouncePolicy, false, "policy-5xx"},
	{"gmail DMARC", 550, "5.7.26", "Unauthenticated email from example.com is not accepted due to domain's DMARC policy. Please contact the administrator of example.com domain if this was a legitimate mail.", BouncePolicy, false, "policy-5xx"},
	{"gmail unauthenticated", 550, "5.7.26", "This mail has been blocked because the sender is unauthenticated. Gmail requires all senders to authenticate with either SPF or DKIM.", BouncePolicy, false, "policy-5xx"},
	{"gmail spam", 550, "5.7.1", "Our system has detected that this message is likely unsolicited mail. To reduce the amount of spam sent to Gmail, this message has been blocked.", BouncePolicy, false, "policy-5xx"},
	{"yahoo TSS04 deferral", 421, "4.7.0", "[TSS04] Messages from 192.0.2.1 temporarily deferred due to unexpected volume or user complaints - 4.16.55.1; see https://postmaster.yahooinc.com/error-codes", BouncePolicy, false, "policy-4xx"},
	{"yahoo TSS09", 553, "5.7.2", "[TSS09] All messages from 192.0.2.1 will be permanently deferred; Retrying will NOT succeed.", BouncePolicy, false, "policy-5xx"},
	{"yahoo policy", 554, "5.7.9", "Message not accepted for policy reasons. See https://help.yahoo.com/kb/postmaster/SLN7253.html", BouncePolicy, false, "policy-5xx"},
	{"icloud", 550, "5.7.1", "[CS01] Message rejected due to local policy. Please visit https://support.apple.com/en-us/HT204137", BouncePolicy, false, "policy-5xx"},
	{"outlook banned IP", 550, "5.7.606", "Access denied, banned sending IP [192.0.2.1]. To request removal from this list please visit https://sender.office.com/", BouncePolicy, false, "policy-5xx"},
	{"microsoft edge blocking", 550, "5.4.1", "Recipient address rejected: Access denied. [AS(201806281)]", BouncePolicy, false, "policy-text"},
	{"proofpoint", 554, "5.7.0", "Blocked - see https://ipcheck.proofpoint.com/?ip=192.0.2.1", BouncePolicy, false, "policy-5xx"},
	{"at&t DNSBL", 553, "", "5.3.0 flpd573 DNSBL:RBL 521< 192.0.2.1 >_is_blocked. For assistance forward this email to abuse_rbl@abuse-att.net", BouncePolicy, false, "policy-text"},
	{"barracuda", 550, "", "permanent failure for one or more recipients (jane@example.com:blocked)", BouncePolicy, false, "policy-text"},
	{"spamcop listing", 550, "", "Your IP 192.0.2.1 is listed in bl.spamcop.net", BouncePolicy, false, "policy-text"},
	{"deferral naming a block list", 451, "", "Blocked by the receiver's reputation filter", BouncePolicy, false, "blocked-4xx"},
	{"relay denied", 554, "5.7.1", "<jane@example.com>: Relay access denied", BouncePolicy, false, "relay-denied"},
	{"sender domain unknown", 553, "", "Domain of sender address bounce@example.net does not exist", BouncePolicy, false, "sender-rejected-text"},
	{"sender domain status", 550, "5.1.8", "<bounce@example.net>: Sender address rejected: Domain not found", BouncePolicy, false, "sender-domain-invalid"},
	{"status only 5.7.1", 0, "5.7.1", "", BouncePolicy, false, "policy-5xx"},
	{"unstructured spam", 0, "", "Your message was rejected as spam", BouncePolicy, false, "blocked-4xx"},

	// The code and status must agree; a status the code contradicts is
	// dropped, and a code passed beats one in the text.
	{"status disagrees with the code", 450, "5.1.1", "", BounceSoft, false, "transient-default"},
	{"code passed, text with another", 450, "", "550 5.1.1 user unknown", BounceSoft, false, "transient-default"},
	{"code out of range counts as none", 1550, "5.1.1", "", BounceHard, true, "recipient-unknown"},
}

func TestClassifyBounce(t *testing.T) {
	sets := map[string]*RuleSet{"default": Default(), "loaded": loadedDefault(t)}
	for name, s := range sets {
		for _, tt := range bounceTable {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				got := s.ClassifyBounce(tt.code, tt.enhanced, tt.text)
				want := Bounce{Type: tt.typ, Rule: tt.rule, Suppress: tt.suppress}
				if got != want {
					t.Errorf("ClassifyBounce(%d, %q, %q) = %+v, want %+v", tt.code, tt.enhanced, tt.text, got, want)
				}
			})
		}
	}
}

// TestSyncReplies pins rows the bounce table does not reach through a
// reply a relay gives a send.
func TestSyncReplies(t *testing.T) {
	for _, tt := range syncReplies {
		if v := ClassifyReply(tt.code, tt.enhanced, tt.text); v.Rule != tt.rule {
			t.Errorf("ClassifyReply(%d, %q, %q) matched %s, want %s", tt.code, tt.enhanced, tt.text, v.Rule, tt.rule)
		}
	}
}

// TestOneRowDecidesBoth checks that a row an operator changes changes the
// send's verdict and the bounce's type together.
func TestOneRowDecidesBoth(t *testing.T) {
	rules := Default().Rules()
	i := slices.IndexFunc(rules, func(r Rule) bool { return r.Name == "policy-5xx" })
	// An operator who treats a Spamhaus listing as worth retrying later
	// and as a soft bounce.
	custom := Rule{Name: "spamhaus", CodeClass: 5, Text: `spamhaus`, Class: Throttled, RelayFault: true, Bounce: BounceSoft}
	rules = slices.Insert(rules, i, custom)
	s, err := NewRuleSet(rules)
	if err != nil {
		t.Fatal(err)
	}
	const text = "Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org"
	if v := s.ClassifyReply(554, "5.7.1", text); v.Rule != "spamhaus" || v.Class != Throttled || !v.RelayFault || v.Limit != LimitRate {
		t.Errorf("ClassifyReply = %+v, want the spamhaus row: throttled, provider fault, rate limit", v)
	}
	if b := s.ClassifyBounce(554, "5.7.1", text); b != (Bounce{Type: BounceSoft, Rule: "spamhaus"}) {
		t.Errorf("ClassifyBounce = %+v, want a soft bounce by the spamhaus row", b)
	}
	if v := Default().ClassifyReply(554, "5.7.1", text); v.Rule != "policy-5xx" {
		t.Errorf("the default changed: %+v", v)
	}
}

func TestLoadRulesErrors(t *testing.T) {
	const tail = `
  - {name: soft-default, code_class: 4, class: transient, bounce: soft}
  - {name: hard-default, code_class: 5, class: permanent, bounce: soft}
`
	tests := []struct {
		name, file string
		want       []string // substrings of the error
	}{
		{"empty", "", []string{"empty rules file"}},
		{"not yaml", "rules: [", []string{"parse"}},
		{"unknown field", "rules:\n  - {name: x, code: 550, class: permanent, bounce: soft, supress: true}" + tail, []string{"supress"}},
		{"two documents", "rules: []\n---\nrules: []\n", []string{"more than one"}},
		{"no rows", "rules: []\n", []string{"no catch-all row for 4xx", "no catch-all row for 5xx"}},
		{"no 5xx catch-all", "rules:\n  - {name: soft-default, code_class: 4, class: transient, bounce: soft}\n", []string{"no catch-all row for 5xx"}},
		{"unknown class", "rules:\n  - {name: odd, code: 550, class: fatal, bounce: soft}" + tail, []string{`rule 1 ("odd"): class "fatal"`}},
		{"unknown bounce type", "rules:\n  - {name: odd, code: 550, class: permanent, bounce: block}" + tail, []string{`rule 1 ("odd"): bounce "block"`}},
		{"missing bounce type", "rules:\n  - {name: odd, code: 550, class: permanent}" + tail, []string{`rule 1 ("odd"): bounce ""`}},
		{"bad regexp", "rules:\n  - {name: odd, code_class: 5, text: 'user (unknown', class: permanent, bounce: hard}" + tail, []string{`rule 1 ("odd"): text:`, "missing closing )"}},
		{"code out of range", "rules:\n  - {name: odd, code: 250, class: permanent, bounce: soft}" + tail, []string{`rule 1 ("odd"): code 250 out of range`}},
		{"code class out of range", "rules:\n  - {name: odd, code_class: 2, class: permanent, bounce: soft}" + tail, []string{`rule 1 ("odd"): code_class 2`}},
		{"code outside its class", "rules:\n  - {name: odd, code: 450, code_class: 5, class: permanent, bounce: soft}" + tail, []string{`rule 1 ("odd"): code 450 is not in code_class 5`}},
		{"neither code nor class", "rules:\n  - {name: odd, text: spam, class: permanent, bounce: policy}" + tail, []string{`rule 1 ("odd"): sets neither`}},
		{"bad status", "rules:\n  - {name: odd, code_class: 5, enhanced: '5.x', class: permanent, bounce: soft}" + tail, []string{`rule 1 ("odd"): enhanced status "5.x"`}},
		{"status of another class", "rules:\n  - {name: odd, code_class: 5, enhanced: '4.7', class: permanent, bounce: soft}" + tail, []string{`rule 1 ("odd"): enhanced status "4.7" disagrees`}},
		{"empty not_enhanced", "rules:\n  - {name: odd, code_class: 5, not_enhanced: [''], class: permanent, bounce: soft}" + tail, []string{`rule 1 ("odd"): enhanced status ""`}},
		{"duplicate name", "rules:\n  - {name: hard-default, code: 550, class: permanent, bounce: soft}" + tail, []string{`rule 3 ("hard-default"): name is already used by rule 1`}},
		{"reserved name", "rules:\n  - {name: timeout, code: 550, class: permanent, bounce: soft}" + tail, []string{`rule 1 ("timeout"): name is reserved`}},
		{"bad name", "rules:\n  - {name: 'no spaces', code: 550, class: permanent, bounce: soft}" + tail, []string{`rule 1 ("no spaces"): name must be`}},
		{"suppress on a soft row", "rules:\n  - {name: odd, code: 550, class: permanent, bounce: soft, suppress: true}" + tail, []string{`rule 1 ("odd"): suppress is only for bounce "hard"`}},
		{"row after the catch-all", "rules:" + tail + "  - {name: late, code_class: 5, text: spam, class: permanent, bounce: policy}\n", []string{`rule 3 ("late"): comes after rule 2 ("hard-default")`}},
		{"row after a catch-all code", "rules:\n  - {name: c421, code: 421, class: transient, bounce: soft}\n  - {name: c421-text, code: 421, text: x, class: transient, bounce: soft}" + tail, []string{`rule 2 ("c421-text"): comes after rule 1 ("c421")`}},
		{"every bad row is named", "rules:\n  - {name: a, code: 700, class: permanent, bounce: soft}\n  - {name: b, code: 550, class: nope, bounce: soft}" + tail, []string{`rule 1 ("a")`, `rule 2 ("b")`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := LoadRules(path)
			if err == nil {
				t.Fatalf("LoadRules = %d rules, want an error", len(s.Rules()))
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}

	t.Run("minimal file", func(t *testing.T) {
		s, err := ParseRules([]byte("rules:" + tail))
		if err != nil {
			t.Fatal(err)
		}
		if b := s.ClassifyBounce(550, "5.1.1", "no such user"); b != (Bounce{Type: BounceSoft, Rule: "hard-default"}) {
			t.Errorf("ClassifyBounce = %+v, want the file's catch-all", b)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		if _, err := LoadRules(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !os.IsNotExist(errorsUnwrapAll(err)) {
			t.Errorf("LoadRules(missing) = %v, want a not-exist error", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		big := append([]byte("rules:"+tail+"# "), make([]byte, MaxRulesFileSize)...)
		if err := os.WriteFile(path, big, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadRules(path); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("LoadRules(too large) = %v, want a size error", err)
		}
	})
}

// errorsUnwrapAll returns the innermost error of a chain of single wraps.
func errorsUnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}
