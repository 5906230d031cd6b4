package failure

import (
	"context"
	"fmt"
	"io"
	"net/textproto"
	"reflect"
	"slices"
	"testing"

	"github.com/wneessen/go-mail"
	"go.yaml.in/yaml/v3"
)

// knownRules are every rule name Classify may report.
func knownRules() []string {
	names := []string{
		RuleUnmatched, RuleBuild, RuleRelayRefused, RuleCanceled, RuleAmbiguousDataEnd, RuleTimeout, RuleTLS,
		RuleAuthFailed, RuleConnCheck, RuleRefused, RuleConnectionLost, RuleDNS, RuleUnreachable, RuleProtocol, RuleNetwork,
	}
	for _, r := range Default().Rules() {
		names = append(names, r.Name)
	}
	return names
}

// fuzzStages are the stages a fuzzed error claims, sender's and none.
var fuzzStages = []string{"", stageBuild, stageHello, stageTLS, stageAuth, "conn", "mail", "rcpt", "data", "body", "other"}

// fuzzError builds an error of one of the shapes Classify meets from a
// fuzzed reply: shape picks the wrapping, stage the claimed stage.
func fuzzError(shape, stage uint8, code int, enhanced, text string) error {
	st := fuzzStages[int(stage)%len(fuzzStages)]
	switch shape % 6 {
	case 0: // sender's error with a reply
		return &replyErr{code: code, enhanced: enhanced, text: text, stage: st}
	case 1: // a reply go-mail passed through from net/textproto
		return fmt.Errorf("dial: %w", &textproto.Error{Code: code, Msg: enhanced + " " + text})
	case 2: // sender's error wrapping a reply-less go-mail failure
		return &replyErr{code: code, enhanced: enhanced, text: text, stage: st, err: &mail.SendError{Reason: mail.SendErrReason(code & 0xf)}}
	case 3: // a tagged end of DATA, ambiguous or not by the code's parity
		return &taggedErr{replyErr{code: code, enhanced: enhanced, text: text, stage: st, err: io.EOF}, code%2 == 0}
	case 4: // a cancelled send
		return fmt.Errorf("%w: %w", context.Canceled, &replyErr{code: code, enhanced: enhanced, text: text, stage: st})
	default: // plain text, no type
		return fmt.Errorf("%d %s %s", code, enhanced, text)
	}
}

// FuzzClassify classifies errors built from a fuzzed reply code, enhanced
// status and text in every shape Classify meets. Properties: the class is
// one of the five and the rule a known, non-empty name; the verdict is the
// same every time; its fields agree with each other (Limit only when
// throttled, RetryAfter only for retryable classes and within
// MaxRetryAfter); allocation is bounded per input byte.
func FuzzClassify(f *testing.F) {
	f.Add(uint8(0), uint8(8), 550, "5.1.1", "no such user")
	f.Add(uint8(0), uint8(6), 421, "4.7.0", "Too many connections, try again in 30 seconds")
	f.Add(uint8(1), uint8(2), 451, "", "4.7.1 rate limited, retry after 2 minutes")
	f.Add(uint8(2), uint8(9), 0, "", "")
	f.Add(uint8(3), uint8(9), 0, "", "i/o timeout")
	f.Add(uint8(4), uint8(0), 454, "4.7.0", "temporary authentication failure")
	f.Add(uint8(5), uint8(0), 552, "5.2.2", "quota exceeded; Retry-After: 99999999999")
	f.Add(uint8(0), uint8(3), 554, "5.7.1", "Daily user sending quota exceeded")
	f.Add(uint8(0), uint8(1), -1, "9.9.9", "greylisted, wait 1e308 hours")
	classes := []Class{Transient, Throttled, Permanent, Auth, Unknown}
	rules := knownRules()

	f.Fuzz(func(t *testing.T, shape, stage uint8, code int, enhanced, text string) {
		err := fuzzError(shape, stage, code, enhanced, text)
		v := Classify(err)
		if !slices.Contains(classes, v.Class) {
			t.Fatalf("Classify(%q) class %q is not one of %v", err, v.Class, classes)
		}
		if v.Rule == "" || !slices.Contains(rules, v.Rule) {
			t.Fatalf("Classify(%q) rule %q is not a known rule", err, v.Rule)
		}
		if again := Classify(err); again != v {
			t.Fatalf("Classify(%q) is not deterministic: %+v, then %+v", err, v, again)
		}
		if v.Limit != "" && v.Class != Throttled {
			t.Fatalf("Classify(%q) = %+v: a Limit on a %s failure", err, v, v.Class)
		}
		if v.RetryAfter < 0 || v.RetryAfter > MaxRetryAfter ||
			v.RetryAfter != 0 && v.Class != Transient && v.Class != Throttled {
			t.Fatalf("Classify(%q) = %+v: RetryAfter out of range or on a %s failure", err, v, v.Class)
		}
		if v.Rule == RuleAmbiguousDataEnd && v.Class != Unknown {
			t.Fatalf("Classify(%q) = %+v: an ambiguous end of DATA must be Unknown, never retried at once", err, v)
		}

		r := ClassifyReply(code, enhanced, text)
		if !slices.Contains(classes, r.Class) || r.Rule == "" || r != ClassifyReply(code, enhanced, text) {
			t.Fatalf("ClassifyReply(%d, %q, %q) = %+v: unknown class, empty rule or not deterministic", code, enhanced, text, r)
		}

		// Regular expressions over the text are linear; a bound per
		// byte catches anything that is not.
		n := len(enhanced) + len(text)
		if allocs := testing.AllocsPerRun(2, func() { _ = Classify(err) }); allocs > float64(200+4*n) {
			t.Fatalf("Classify allocated %.0f times for %d bytes of reply", allocs, n)
		}
	})
}

// FuzzClassifyBounce classifies fuzzed bounce reports by the default rules.
// Properties: the type is one of the three and the rule a default row or
// RuleUnmatched; the result is the matched row's type and suppression (so
// only hard bounces suppress); it is the same every time; for a reply code
// it is decided by the same row as ClassifyReply's verdict; allocation is
// bounded per input byte.
func FuzzClassifyBounce(f *testing.F) {
	for _, b := range bounceTable {
		f.Add(b.code, b.enhanced, b.text)
	}
	f.Add(-550, "5.1.1", "")
	f.Add(0, "", "smtp;550")
	f.Add(0, "9.9.9", "smtp ;  450-4.2.2 quota")
	rows := map[string]Rule{}
	for _, r := range Default().Rules() {
		rows[r.Name] = r
	}

	f.Fuzz(func(t *testing.T, code int, enhanced, text string) {
		b := Default().ClassifyBounce(code, enhanced, text)
		if !slices.Contains(bounceTypes, b.Type) {
			t.Fatalf("ClassifyBounce(%d, %q, %q) type %q is not one of %v", code, enhanced, text, b.Type, bounceTypes)
		}
		if r, ok := rows[b.Rule]; ok {
			if b != (Bounce{Type: r.Bounce, Rule: r.Name, Suppress: r.Suppress}) {
				t.Fatalf("ClassifyBounce(%d, %q, %q) = %+v, not its row's %+v", code, enhanced, text, b, r)
			}
		} else if b != (Bounce{Type: BounceSoft, Rule: RuleUnmatched}) {
			t.Fatalf("ClassifyBounce(%d, %q, %q) = %+v: an unknown rule, or an unmatched report that is not soft", code, enhanced, text, b)
		}
		if b.Suppress && b.Type != BounceHard {
			t.Fatalf("ClassifyBounce(%d, %q, %q) = %+v: suppresses a %s bounce", code, enhanced, text, b, b.Type)
		}
		if again := Default().ClassifyBounce(code, enhanced, text); again != b {
			t.Fatalf("ClassifyBounce(%d, %q, %q) is not deterministic: %+v, then %+v", code, enhanced, text, b, again)
		}
		if code >= 100 && code <= 599 {
			if v := Default().ClassifyReply(code, enhanced, text); v.Rule != b.Rule {
				t.Fatalf("reply %d %q %q: the send matched %s, the bounce %s", code, enhanced, text, v.Rule, b.Rule)
			}
		}
		n := len(enhanced) + len(text)
		if allocs := testing.AllocsPerRun(2, func() { _ = Default().ClassifyBounce(code, enhanced, text) }); allocs > float64(200+4*n) {
			t.Fatalf("ClassifyBounce allocated %.0f times for %d bytes of report", allocs, n)
		}
	})
}

// FuzzParseRules parses fuzzed rules files. Properties: an error or a rule
// set; a rule set marshals to a file that parses back as an equal set;
// every reply it classifies gets one of the bounce types, a suppression
// only on a hard bounce and a rule of its own or RuleUnmatched; the
// default file is among the seeds, so the marshalled default reloading as
// an equal set is checked on every run; allocation is bounded per input
// byte. That seed is 11 KB, and minimizing a new input that large takes
// up to -fuzzminimizetime (60s by default) with no execs counted: fuzz
// with -fuzzminimizetime=2s.
func FuzzParseRules(f *testing.F) {
	f.Add(DefaultRulesYAML())
	f.Add([]byte("rules:\n  - {name: a, code_class: 4, class: transient, bounce: soft}\n  - {name: b, code_class: 5, class: permanent, bounce: soft}\n"))
	f.Add([]byte("rules:\n  - {name: x, code_class: 5, enhanced: '5.1', not_enhanced: ['5.1.7'], text: '(?s)user.*unknown', class: permanent, bounce: hard, suppress: true}\n  - {name: a, code_class: 4, class: transient, bounce: soft}\n  - {name: b, code_class: 5, class: permanent, bounce: soft}\n"))
	f.Add([]byte("rules:\n  - &r {name: a, code_class: 4, class: transient, bounce: soft}\n  - *r\n"))
	f.Add([]byte("rules: [{name: a, code: 999, text: '(', class: x, bounce: y}]"))
	f.Add([]byte("rules: {}"))
	f.Add([]byte("- 1\n- 2"))
	replies := []corpusReply{{550, "5.1.1", "user unknown"}, {0, "", "blocked"}, {0, "4.2.2", ""}, {421, "", "try again in 5 minutes"}, {0, "", "smtp; 554 spam"}}

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		if allocs := testing.AllocsPerRun(1, func() { _, _ = ParseRules(data) }); allocs > float64(2000+4*len(data)) {
			t.Fatalf("ParseRules allocated %.0f times for %d bytes", allocs, len(data))
		}
		s, err := ParseRules(data)
		if err != nil {
			if s != nil || err.Error() == "" {
				t.Fatalf("ParseRules = %v, %v: a rule set with an error, or an empty error", s, err)
			}
			return
		}
		out, err := yaml.Marshal(s)
		if err != nil {
			t.Fatalf("marshal a parsed rule set: %v", err)
		}
		again, err := ParseRules(out)
		if err != nil {
			t.Fatalf("the marshalled rule set does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again.Rules(), s.Rules()) {
			t.Fatalf("the marshalled rule set parses differently:\n got %+v\nwant %+v", again.Rules(), s.Rules())
		}
		names := []string{RuleUnmatched}
		for _, r := range s.Rules() {
			names = append(names, r.Name)
		}
		for _, c := range replies {
			b := s.ClassifyBounce(c.code, c.enhanced, c.text)
			if !slices.Contains(bounceTypes, b.Type) || b.Suppress && b.Type != BounceHard || !slices.Contains(names, b.Rule) {
				t.Fatalf("ClassifyBounce(%d, %q, %q) = %+v by a parsed rule set", c.code, c.enhanced, c.text, b)
			}
			if v := s.ClassifyReply(c.code, c.enhanced, c.text); !slices.Contains(classes, v.Class) || !slices.Contains(names, v.Rule) {
				t.Fatalf("ClassifyReply(%d, %q, %q) = %+v by a parsed rule set", c.code, c.enhanced, c.text, v)
			}
		}
	})
}
