package render

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// CanaryBuckets is the number of buckets CanaryBucket spreads Message-IDs over.
const CanaryBuckets = 10000

// Why a version was chosen or tried.
const (
	WhyActive            = "active"             // no request; the hash picked the active version
	WhyCanary            = "canary"             // no request; the hash picked the canary
	WhyRequestedActive   = "requested_active"   // "active" was requested
	WhyRequestedCanary   = "requested_canary"   // "canary" was requested
	WhyRequestedFallback = "requested_fallback" // "fallback" was requested
	WhyRequestedVersion  = "requested_version"  // a version number was requested
	WhyLabelUnset        = "label_unset"        // the requested label is unset: the active version instead
	WhyBadRequest        = "bad_request"        // the request is not understood: the active version instead
	WhyNoVersion         = "no_version"         // nothing to choose: version 0
	WhyChosen            = "chosen"             // an Attempt of the first version of a plan
	WhyFallback          = "fallback"           // an Attempt of a later version, after the ones before failed
)

// CanaryBucket returns the bucket of messageID, 0 to 9999: the first 8 bytes
// of the SHA-256 of messageID's bytes, exactly as given, read as a
// big-endian uint64, modulo 10000. A mail is in the canary share when its
// bucket is below CanaryPercent*100.
func CanaryBucket(messageID string) int {
	sum := sha256.Sum256([]byte(messageID))
	return int(binary.BigEndian.Uint64(sum[:8]) % CanaryBuckets)
}

// Choose returns the version a mail renders with and why. requested is ""
// (the hash of messageID decides between the canary and the active
// version), "active", "canary", "fallback" or a version number. A label
// that is unset, or a request not understood, gives the active version.
// Version 0 means there is no version to use.
func Choose(messageID string, labels Labels, requested string) (version int, why string) {
	active := func(why string) (int, string) {
		if labels.Active <= 0 {
			return 0, WhyNoVersion
		}
		return labels.Active, why
	}
	switch req := strings.TrimSpace(requested); req {
	case "":
		pct := min(max(labels.CanaryPercent, 0), 100)
		if labels.Canary > 0 && CanaryBucket(messageID) < pct*100 {
			return labels.Canary, WhyCanary
		}
		return active(WhyActive)
	case "active":
		return active(WhyRequestedActive)
	case "canary":
		if labels.Canary > 0 {
			return labels.Canary, WhyRequestedCanary
		}
		return active(WhyLabelUnset)
	case "fallback":
		if labels.Fallback > 0 {
			return labels.Fallback, WhyRequestedFallback
		}
		return active(WhyLabelUnset)
	default:
		n, err := strconv.Atoi(req)
		if err != nil || n <= 0 {
			return active(WhyBadRequest)
		}
		return n, WhyRequestedVersion
	}
}

// Plan returns the versions to try in order: the chosen one, then the
// fallback label if set and different, then the active one if set and not
// already in the plan.
func Plan(messageID string, labels Labels, requested string) []int {
	var plan []int
	add := func(v int) {
		if v <= 0 {
			return
		}
		for _, x := range plan {
			if x == v {
				return
			}
		}
		plan = append(plan, v)
	}
	v, _ := Choose(messageID, labels, requested)
	add(v)
	add(labels.Fallback)
	add(labels.Active)
	return plan
}

// Attempt is one version tried by RenderWithFallback.
type Attempt struct {
	Version int
	// Why is WhyChosen for the plan's first version, WhyFallback for the
	// others.
	Why string
	// Err is nil for the version that rendered.
	Err error
}

// RenderWithFallback renders the versions of plan in order, getting each
// from compiled, and returns the first that renders, its number and every
// attempt. When none renders, the error is an *Error with reason
// ReasonRenderFailed wrapping the last failure.
func RenderWithFallback(plan []int, compiled func(int) (*Compiled, error), locale string, data map[string]any) (Rendered, int, []Attempt, error) {
	var tried []Attempt
	var last error = ErrNoVersion
	lastVersion := 0
	for i, v := range plan {
		why := WhyChosen
		if i > 0 {
			why = WhyFallback
		}
		c, err := compiled(v)
		if err == nil && c == nil {
			err = fmt.Errorf("version %d: %w", v, ErrNoVersion)
		}
		if err == nil {
			var r Rendered
			if r, err = c.Render(locale, data); err == nil {
				tried = append(tried, Attempt{Version: v, Why: why})
				return r, v, tried, nil
			}
		}
		tried = append(tried, Attempt{Version: v, Why: why, Err: err})
		last, lastVersion = err, v
	}
	out := &Error{Version: lastVersion, Stage: StageExecute, Reason: ReasonRenderFailed, Err: last}
	var e *Error
	if errors.As(last, &e) {
		out.Template, out.Stage, out.Locale, out.Part = e.Template, e.Stage, e.Locale, e.Part
	}
	return Rendered{}, 0, tried, out
}
