package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/job"
)

// relayConfigs returns the SMTP relays in priority order: the URL list of
// POSTLINE_SMTP_RELAYS, or the single relay of the POSTLINE_SMTP_* settings.
func (s *settings) relayConfigs() ([]sender.Config, error) {
	if strings.TrimSpace(s.SMTPRelays) != "" {
		cfgs, err := sender.ParseRelayURLs(s.SMTPRelays)
		if err != nil {
			return nil, fmt.Errorf("setting POSTLINE_SMTP_RELAYS: %w", err)
		}
		return cfgs, nil
	}
	return []sender.Config{{
		Name:     s.SMTPName,
		Host:     s.SMTPHost,
		Port:     s.SMTPPort,
		TLS:      sender.TLSPolicy(s.SMTPTLS),
		Username: s.SMTPUsername,
		Password: s.SMTPPassword,
		HELO:     s.SMTPHELO,
		Rate:     s.SMTPRate,
	}}, nil
}

// The values of POSTLINE_RETRY_POLICY.
const (
	policyAdaptive  = "adaptive"
	policyUniform   = "uniform"
	policyReference = "reference"
)

// retryPolicy returns the delay policy of POSTLINE_RETRY_POLICY and, for
// the adaptive policy, its retry budgets and send control (nil for the
// baselines, which run bare so they can be measured against it).
func (s *settings) retryPolicy() (adaptive.Policy, map[job.Priority]adaptive.Bucket, *adaptive.SendControlConfig, error) {
	switch s.RetryPolicy {
	case policyUniform:
		return &adaptive.Uniform{}, nil, nil, nil
	case policyReference:
		return &adaptive.Reference{}, nil, nil, nil
	case policyAdaptive:
	default:
		return nil, nil, nil, fmt.Errorf("setting POSTLINE_RETRY_POLICY: %q is not adaptive, uniform or reference", s.RetryPolicy)
	}
	policy, err := adaptive.NewAdaptive(adaptive.AdaptiveConfig{})
	if err != nil {
		return nil, nil, nil, err
	}
	budgets, err := perPriority("POSTLINE_RETRY_BUDGETS", s.RetryBudgets, parseBucket)
	if err != nil {
		return nil, nil, nil, err
	}
	return policy, budgets, &adaptive.SendControlConfig{}, nil
}

// parseBucket parses "30+1/s+10%": a burst of 30 tokens refilled at 1 per
// second, plus a tenth of a token earned by every first attempt. The share
// is optional ("30+1/s" earns none).
func parseBucket(v string) (adaptive.Bucket, error) {
	const want = "want burst+refill/s[+share%], such as 30+1/s+10%"
	parts := strings.Split(v, "+")
	if len(parts) < 2 || len(parts) > 3 {
		return adaptive.Bucket{}, errors.New(want)
	}
	perSecond, isRate := strings.CutSuffix(strings.TrimSpace(parts[1]), "/s")
	if !isRate {
		return adaptive.Bucket{}, errors.New(want)
	}
	b, err := strconv.Atoi(strings.TrimSpace(parts[0]))
	if err != nil || b < 1 {
		return adaptive.Bucket{}, fmt.Errorf("burst %q must be a whole number of at least 1", parts[0])
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(perSecond), 64)
	if err != nil || !(r > 0) || math.IsInf(r, 0) {
		return adaptive.Bucket{}, fmt.Errorf("refill %q must be a positive number per second", perSecond)
	}
	bucket := adaptive.Bucket{Burst: b, PerSecond: r}
	if len(parts) == 3 {
		pct, isPct := strings.CutSuffix(strings.TrimSpace(parts[2]), "%")
		share, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if !isPct || err != nil || !(share >= 0 && share < 100) {
			return adaptive.Bucket{}, fmt.Errorf("share %q must be a percentage in [0, 100), such as 10%%", parts[2])
		}
		bucket.Share = share / 100
	}
	return bucket, nil
}

// retryLimits combines POSTLINE_MAX_ATTEMPTS and POSTLINE_MAX_AGE.
func (s *settings) retryLimits() (map[job.Priority]delivery.RetryLimit, error) {
	attempts, err := perPriority("POSTLINE_MAX_ATTEMPTS", s.MaxAttempts, func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err == nil && n < 1 {
			err = fmt.Errorf("must be at least 1")
		}
		return n, err
	})
	if err != nil {
		return nil, err
	}
	ages, err := perPriority("POSTLINE_MAX_AGE", s.MaxAge, func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err == nil && d <= 0 {
			err = fmt.Errorf("must be positive")
		}
		return d, err
	})
	if err != nil {
		return nil, err
	}
	limits := make(map[job.Priority]delivery.RetryLimit, len(attempts))
	for p, n := range attempts {
		limits[p] = delivery.RetryLimit{MaxAttempts: n, MaxAge: ages[p]}
	}
	return limits, nil
}

func (s *settings) tiers() (retry.Tiers, error) {
	t, err := retry.ParseTiers(s.RetryTiers)
	if err != nil {
		return nil, fmt.Errorf("setting POSTLINE_RETRY_TIERS: %w", err)
	}
	return t, nil
}

// perPriority parses "urgent=10,normal=8,bulk=5": every priority exactly
// once.
func perPriority[T any](name, raw string, parse func(string) (T, error)) (map[job.Priority]T, error) {
	out := make(map[job.Priority]T, 3)
	for part := range strings.SplitSeq(raw, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		p := job.Priority(strings.TrimSpace(key))
		if !ok || (p != job.PriorityUrgent && p != job.PriorityNormal && p != job.PriorityBulk) {
			return nil, fmt.Errorf("setting %s: %q is not priority=value with priority urgent, normal or bulk", name, part)
		}
		if _, dup := out[p]; dup {
			return nil, fmt.Errorf("setting %s: priority %s given twice", name, p)
		}
		v, err := parse(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("setting %s: %s=%q: %w", name, p, value, err)
		}
		out[p] = v
	}
	for _, p := range []job.Priority{job.PriorityUrgent, job.PriorityNormal, job.PriorityBulk} {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("setting %s: no value for priority %s", name, p)
		}
	}
	return out, nil
}
