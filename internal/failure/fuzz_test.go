package failure

import (
	"context"
	"fmt"
	"io"
	"net/textproto"
	"slices"
	"testing"

	"github.com/wneessen/go-mail"
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
