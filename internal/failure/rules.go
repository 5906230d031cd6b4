package failure

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// BounceType is what an asynchronous bounce report means for the
// recipient. The values appear in published events.
type BounceType string

// The bounce types.
const (
	// BounceHard is a recipient-level permanent failure: the address does
	// not exist, its domain takes no mail, the mailbox is disabled.
	BounceHard BounceType = "hard"
	// BounceSoft is a failure that may pass: a full mailbox, a deferral,
	// or a permanent reply that says nothing clear about the recipient.
	BounceSoft BounceType = "soft"
	// BouncePolicy is a refusal by the receiver's policy: block lists,
	// reputation, spam, SPF/DKIM/DMARC, relaying. It is about the sender,
	// so operators are shown it and the recipient is not suppressed.
	BouncePolicy BounceType = "policy"
)

// Bounce is the classification of one asynchronous bounce report.
type Bounce struct {
	Type BounceType
	// Rule is the name of the row that matched, RuleUnmatched if none.
	Rule string
	// Suppress says to stop sending to the recipient. Only hard bounces
	// suppress.
	Suppress bool
}

// Rule is one row of a RuleSet. A reply matches a row when every condition
// the row sets holds; a RuleSet is searched in order and the first match
// wins. The yaml tags are the rules file's format.
type Rule struct {
	// Name identifies the row in Verdict.Rule, Bounce.Rule, logs and
	// tests: letters, digits, '.', '_' and '-', at most 64.
	Name string `yaml:"name"`
	// Code is the exact reply code, 400 to 599; 0 matches any.
	Code int `yaml:"code,omitempty"`
	// CodeClass is the reply code's first digit, 4 or 5; 0 matches any.
	// Every row sets Code or CodeClass.
	CodeClass int `yaml:"code_class,omitempty"`
	// Enhanced is a prefix of the RFC 3463 status in whole components:
	// "4.7" matches "4.7.0" and "4.7.12", "4.2.1" matches only "4.2.1".
	// "" matches any status, including none.
	Enhanced string `yaml:"enhanced,omitempty"`
	// NotEnhanced are statuses (prefixes in whole components, as Enhanced)
	// the row does not match.
	NotEnhanced []string `yaml:"not_enhanced,omitempty"`
	// Text is a regular expression (RE2 syntax) searched for in the reply
	// text, always case-insensitively; "" matches any text.
	Text string `yaml:"text,omitempty"`
	// Class is the verdict for a failed send with a matching reply.
	Class Class `yaml:"class"`
	// RelayFault says the relay, not the message, is the problem.
	RelayFault bool `yaml:"provider_fault,omitempty"`
	// Bounce is the type of a bounce report with a matching reply.
	Bounce BounceType `yaml:"bounce"`
	// Suppress says a matching bounce report suppresses the recipient;
	// only a BounceHard row may set it.
	Suppress bool `yaml:"suppress,omitempty"`
}

// RuleSet is an ordered, validated table of Rule rows: the first row that
// matches a reply decides both the Verdict of a failed send and the Bounce
// of a bounce report. A RuleSet is immutable and safe for concurrent use.
type RuleSet struct {
	rules []Rule
	texts []*regexp.Regexp // rules[i].Text compiled; nil where it is ""
}

// MaxRulesFileSize caps a rules file LoadRules reads.
const MaxRulesFileSize = 1 << 20

// defaultRulesYAML is the rules file Default is parsed from.
//
//go:embed rules.yaml
var defaultRulesYAML []byte

// DefaultRulesYAML returns the default rules file (a copy): the starting
// point for an operator's own file, which replaces it whole.
func DefaultRulesYAML() []byte { return bytes.Clone(defaultRulesYAML) }

var defaultRuleSet = sync.OnceValue(func() *RuleSet {
	s, err := ParseRules(defaultRulesYAML)
	if err != nil {
		panic("failure: the embedded rules.yaml is invalid: " + err.Error())
	}
	return s
})

// Default returns the rule set parsed from DefaultRulesYAML. The package
// level Classify and ClassifyReply use it.
func Default() *RuleSet { return defaultRuleSet() }

// rulesFile is the document a rules file holds.
type rulesFile struct {
	Rules []Rule `yaml:"rules"`
}

// LoadRules reads and validates an operator's rules file, which replaces
// the default rules whole (start from a copy of DefaultRulesYAML).
func LoadRules(path string) (*RuleSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failure rules: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxRulesFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("failure rules %s: %w", path, err)
	}
	if len(data) > MaxRulesFileSize {
		return nil, fmt.Errorf("failure rules %s: larger than %d bytes", path, MaxRulesFileSize)
	}
	s, err := ParseRules(data)
	if err != nil {
		return nil, fmt.Errorf("failure rules %s: %w", path, err)
	}
	return s, nil
}

// ParseRules parses and validates a rules file's contents: a YAML document
// with one key, rules, a list of rows with Rule's yaml fields. Unknown
// fields are errors.
func ParseRules(data []byte) (*RuleSet, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var file rulesFile
	if err := dec.Decode(&file); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty rules file")
		}
		return nil, fmt.Errorf("parse: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse: more than one YAML document")
	}
	return NewRuleSet(file.Rules)
}

// NewRuleSet validates rules and returns them as a RuleSet (it keeps a
// copy). Every row is checked; the error names each bad row.
func NewRuleSet(rules []Rule) (*RuleSet, error) {
	s := &RuleSet{rules: cloneRules(rules), texts: make([]*regexp.Regexp, len(rules))}
	var errs []error
	seen := map[string]int{}
	for i, r := range s.rules {
		problems := ruleNameProblems(r, i, seen)
		problems = append(problems, ruleReplyProblems(r)...)
		if r.Text != "" {
			re, err := compileText(r.Text)
			if err != nil {
				problems = append(problems, fmt.Sprintf("text: %v", err))
			}
			s.texts[i] = re
		}
		problems = append(problems, ruleVerdictProblems(r)...)
		if j := s.shadowedBy(i); j >= 0 {
			problems = append(problems, fmt.Sprintf("comes after rule %d (%q), which matches every reply it could", j+1, s.rules[j].Name))
		}
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("rule %d (%q): %s", i+1, r.Name, p))
		}
	}
	for _, class := range []int{4, 5} {
		if !slices.ContainsFunc(s.rules, func(r Rule) bool { return r.Code == 0 && r.CodeClass == class && isCatchAll(r) }) {
			errs = append(errs, fmt.Errorf("no catch-all row for %dxx replies (code_class: %d and no other condition)", class, class))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// ruleNameProblems checks row i's name and, when it is good and new, notes
// it in seen.
func ruleNameProblems(r Rule, i int, seen map[string]int) []string {
	if !ruleName.MatchString(r.Name) {
		return []string{"name must be 1-64 letters, digits, '.', '_' or '-'"}
	}
	if slices.Contains(reservedRuleNames, r.Name) {
		return []string{"name is reserved for failures without a reply"}
	}
	if j, dup := seen[r.Name]; dup {
		return []string{fmt.Sprintf("name is already used by rule %d", j+1)}
	}
	seen[r.Name] = i
	return nil
}

// ruleReplyProblems checks the reply a row matches: its code, code class
// and enhanced statuses.
func ruleReplyProblems(r Rule) []string {
	var problems []string
	if r.Code != 0 && (r.Code < 400 || r.Code > 599) {
		problems = append(problems, fmt.Sprintf("code %d out of range (400-599)", r.Code))
	}
	if r.CodeClass != 0 && r.CodeClass != 4 && r.CodeClass != 5 {
		problems = append(problems, fmt.Sprintf("code_class %d must be 4 or 5", r.CodeClass))
	}
	if r.Code != 0 && r.CodeClass != 0 && r.Code/100 != r.CodeClass {
		problems = append(problems, fmt.Sprintf("code %d is not in code_class %d", r.Code, r.CodeClass))
	}
	if r.Code == 0 && r.CodeClass == 0 {
		problems = append(problems, "sets neither code nor code_class")
	}
	statuses := r.NotEnhanced
	if r.Enhanced != "" {
		statuses = append([]string{r.Enhanced}, statuses...)
	}
	for _, e := range statuses {
		if !enhancedPrefix.MatchString(e) {
			problems = append(problems, fmt.Sprintf("enhanced status %q is not an RFC 3463 prefix (\"5\", \"5.7\", \"5.7.1\")", e))
		} else if c := ruleCodeClass(r); c != 0 && int(e[0]-'0') != c {
			problems = append(problems, fmt.Sprintf("enhanced status %q disagrees with the code class %d", e, c))
		}
	}
	return problems
}

// ruleVerdictProblems checks what a row decides: its class, bounce type
// and suppression.
func ruleVerdictProblems(r Rule) []string {
	var problems []string
	if !slices.Contains(classes, r.Class) {
		problems = append(problems, fmt.Sprintf("class %q must be one of %v", r.Class, classes))
	}
	if !slices.Contains(bounceTypes, r.Bounce) {
		problems = append(problems, fmt.Sprintf("bounce %q must be one of %v", r.Bounce, bounceTypes))
	}
	if r.Suppress && r.Bounce != BounceHard {
		problems = append(problems, fmt.Sprintf("suppress is only for bounce %q rows, not %q", BounceHard, r.Bounce))
	}
	return problems
}

// Rules returns a copy of the rule set's rows, in order.
func (s *RuleSet) Rules() []Rule { return cloneRules(s.rules) }

// MarshalYAML gives the rule set in the rules file's format, so that
// yaml.Marshal of a RuleSet is a file ParseRules reads back as an equal
// set.
func (s *RuleSet) MarshalYAML() (any, error) {
	return rulesFile{Rules: s.Rules()}, nil
}

var (
	ruleName          = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	enhancedPrefix    = regexp.MustCompile(`^[245](\.\d{1,3}){0,2}$`)
	classes           = []Class{Transient, Throttled, Permanent, Auth, Unknown}
	bounceTypes       = []BounceType{BounceHard, BounceSoft, BouncePolicy}
	reservedRuleNames = []string{
		RuleUnmatched, RuleBuild, RuleRelayRefused, RuleCanceled, RuleTimeout, RuleTLS, RuleAuthFailed,
		RuleConnCheck, RuleRefused, RuleConnectionLost, RuleDNS, RuleUnreachable, RuleProtocol, RuleNetwork,
		RuleAmbiguousDataEnd, RuleProviderHard,
	}
)

// compileText compiles a row's text pattern; patterns are always
// case-insensitive.
func compileText(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile("(?i)" + pattern)
}

func cloneRules(rules []Rule) []Rule {
	out := slices.Clone(rules)
	for i := range out {
		out[i].NotEnhanced = slices.Clone(out[i].NotEnhanced)
	}
	return out
}

// ruleCodeClass is the code class a row is limited to.
func ruleCodeClass(r Rule) int {
	if r.CodeClass != 0 {
		return r.CodeClass
	}
	return r.Code / 100
}

// isCatchAll reports a row without conditions beyond its code or class.
func isCatchAll(r Rule) bool {
	return r.Enhanced == "" && len(r.NotEnhanced) == 0 && r.Text == ""
}

// shadowedBy returns the index of an earlier catch-all row that matches
// every reply with a code row i could match, or -1.
func (s *RuleSet) shadowedBy(i int) int {
	r := s.rules[i]
	for j, prev := range s.rules[:i] {
		if !isCatchAll(prev) {
			continue
		}
		if prev.Code != 0 && prev.Code == r.Code ||
			prev.Code == 0 && prev.CodeClass != 0 && prev.CodeClass == ruleCodeClass(r) {
			return j
		}
	}
	return -1
}

// find returns the index of the first row matching a reply, or -1. class
// is the reply's code class; unstructured is a report with neither a code
// nor a status, matched by the rows that have a text and no exact code,
// whatever their code class.
func (s *RuleSet) find(code, class int, unstructured bool, enhanced, text string) int {
	for i := range s.rules {
		r := &s.rules[i]
		if unstructured {
			if s.texts[i] == nil || r.Code != 0 {
				continue
			}
		} else if r.Code != 0 && r.Code != code || r.CodeClass != 0 && r.CodeClass != class {
			continue
		}
		if r.Enhanced != "" && !enhancedHasPrefix(enhanced, r.Enhanced) {
			continue
		}
		if slices.ContainsFunc(r.NotEnhanced, func(not string) bool { return enhancedHasPrefix(enhanced, not) }) {
			continue
		}
		if s.texts[i] != nil && !s.texts[i].MatchString(text) {
			continue
		}
		return i
	}
	return -1
}

// leadingStatus returns enhanced trimmed, or when it is empty a status
// that leads text, with text after it.
func leadingStatus(enhanced, text string) (string, string) {
	enhanced = strings.TrimSpace(enhanced)
	if enhanced == "" {
		first, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
		if enhancedStatus.MatchString(first) {
			return first, rest
		}
	}
	return enhanced, text
}

// ClassifyReply classifies an SMTP reply by the rule set. enhanced is the
// RFC 3463 status ("" if none: a leading one is then taken from text); a
// status whose class digit disagrees with code is ignored. RetryAfter is
// parsed from text for Transient and Throttled replies.
func (s *RuleSet) ClassifyReply(code int, enhanced, text string) Verdict {
	enhanced, text = leadingStatus(enhanced, text)
	if m := enhancedStatus.FindStringSubmatch(enhanced); m == nil || m[1] != strconv.Itoa(code/100) {
		enhanced = ""
	}
	v := Verdict{Class: Unknown, Code: code, Enhanced: enhanced, Rule: RuleUnmatched}
	if i := s.find(code, code/100, false, enhanced, text); i >= 0 {
		r := &s.rules[i]
		v.Class, v.RelayFault, v.Rule = r.Class, r.RelayFault, r.Name
	}
	if v.Class == Transient || v.Class == Throttled {
		v.RetryAfter, _ = ParseRetryAfter(text)
	}
	if v.Class == Throttled && v.RelayFault {
		v.Limit = LimitRate
		if code == 421 || connectionLimitText.MatchString(text) {
			v.Limit = LimitConnections
		}
	}
	return v
}

// diagnosticReply is the start of a bounce report's diagnostic text: an
// optional "smtp;" type (RFC 3464 Diagnostic-Code) and a reply code, which
// may be a multi-line reply's "550-".
var diagnosticReply = regexp.MustCompile(`(?i)^\s*(?:smtp\s*;\s*)?(?:([245]\d\d)(?:[ -]|$))?`)

// ClassifyBounce classifies the reply in an asynchronous bounce report by
// the same rows as ClassifyReply. code is the reply code, 0 if the report
// has none; then a code leading text ("550 5.1.1 ...", "smtp; 550-5.1.1
// ...") is used, and without one the code class comes from the status's
// first digit. A report with neither a code nor a status (an unstructured
// bounce) is matched by text alone against the rows that have a text and
// no exact code. A code outside 100-599 counts as none. What matches
// nothing is a soft bounce (RuleUnmatched).
func (s *RuleSet) ClassifyBounce(code int, enhanced, text string) Bounce {
	if code < 100 || code > 599 {
		code = 0
	}
	if code == 0 {
		m := diagnosticReply.FindStringSubmatchIndex(text)
		if m[2] >= 0 {
			code, _ = strconv.Atoi(text[m[2]:m[3]])
		}
		text = text[m[1]:]
	}
	enhanced, text = leadingStatus(enhanced, text)
	if !enhancedStatus.MatchString(enhanced) || code != 0 && int(enhanced[0]-'0') != code/100 {
		enhanced = ""
	}
	class := code / 100
	if code == 0 && enhanced != "" {
		class = int(enhanced[0] - '0')
	}
	i := s.find(code, class, class == 0, enhanced, text)
	if i < 0 {
		return Bounce{Type: BounceSoft, Rule: RuleUnmatched}
	}
	r := &s.rules[i]
	return Bounce{Type: r.Bounce, Rule: r.Name, Suppress: r.Suppress}
}
