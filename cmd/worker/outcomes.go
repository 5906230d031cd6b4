package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/internal/dkim"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/unsubscribe"
)

// bounceKeys returns the return path keys, and on false when no bounce
// domain is set: then setting, whose value needs one, must be empty.
func (s *settings) bounceKeys(setting, value string) (keys [][]byte, on bool, err error) {
	if s.BounceDomain == "" {
		if value != "" {
			return nil, false, fmt.Errorf("setting %s: set without POSTLINE_BOUNCE_DOMAIN", setting)
		}
		return nil, false, nil
	}
	keys, err = returnpath.ParseKeys(s.ReturnPathKeys)
	if err != nil {
		return nil, true, fmt.Errorf("setting POSTLINE_RETURN_PATH_KEYS: %w", err)
	}
	return keys, true, nil
}

// returnPaths returns the signer of per-recipient return paths, nil when
// no bounce domain is set.
func (s *settings) returnPaths() (*returnpath.Signer, error) {
	keys, on, err := s.bounceKeys("POSTLINE_RETURN_PATH_KEYS", s.ReturnPathKeys)
	if !on || err != nil {
		return nil, err
	}
	signer, err := returnpath.New(s.BounceDomain, keys)
	if err != nil {
		return nil, fmt.Errorf("setting POSTLINE_BOUNCE_DOMAIN: %w", err)
	}
	return signer, nil
}

// unsubscribeLinks returns the one-click unsubscribe links of the
// recipients' copies, nil when no bounce domain is set: the bounce domain
// alone turns them on (the links default to https://<bounce
// domain>/unsubscribe, and the mailto address is on the bounce domain).
func (s *settings) unsubscribeLinks() (*unsubscribe.Links, error) {
	keys, on, err := s.bounceKeys("POSTLINE_UNSUBSCRIBE_URL", s.UnsubscribeURL)
	if !on || err != nil {
		return nil, err
	}
	signer, err := unsubscribe.NewSigner(keys)
	if err != nil {
		return nil, fmt.Errorf("setting POSTLINE_RETURN_PATH_KEYS: %w", err)
	}
	links, err := unsubscribe.NewLinks(unsubscribe.LinksConfig{Domain: s.BounceDomain, URL: s.UnsubscribeURL}, signer)
	if err != nil {
		return nil, fmt.Errorf("setting POSTLINE_UNSUBSCRIBE_URL: %w", err)
	}
	return links, nil
}

// unsubscribeURL is the base of links for the start-up log, "" for none.
func unsubscribeURL(links *unsubscribe.Links) string {
	if links == nil {
		return ""
	}
	return links.URL()
}

// dsnNotify is the NOTIFY value asked of relays (sender.Config.Notify).
func (s *settings) dsnNotify() string {
	switch n := strings.ToUpper(strings.TrimSpace(s.DSNNotify)); n {
	case "AUTO", "":
		if s.BounceDomain != "" {
			return "SUCCESS,FAILURE"
		}
		return ""
	case "NONE":
		return ""
	default:
		return n
	}
}

// dkimKeys loads the DKIM keys of POSTLINE_DKIM_KEYS; nil when none are
// set. A key that does not load stops the worker at start.
func (s *settings) dkimKeys() (*dkim.Keyring, error) {
	cfg, err := dkim.ParseKeys(s.DKIMKeys)
	if err != nil {
		return nil, fmt.Errorf("setting POSTLINE_DKIM_KEYS: %w", err)
	}
	if len(cfg.Keys) == 0 {
		return nil, nil
	}
	kr, err := dkim.Load(cfg)
	if err != nil {
		return nil, fmt.Errorf("setting POSTLINE_DKIM_KEYS: %w", err)
	}
	return kr, nil
}

// noConfirm reports whether sent mail goes without a confirmation window
// (POSTLINE_CONFIRM).
func (s *settings) noConfirm() (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s.Confirm)) {
	case "auto", "":
		return s.BounceDomain == "", nil
	case "on":
		return false, nil
	case "off":
		return true, nil
	}
	return false, fmt.Errorf("setting POSTLINE_CONFIRM: %q is not auto, on or off", s.Confirm)
}

// rules returns the reply classification rules: the operator's file, or
// the built-in ones.
func (s *settings) rules() (*failure.RuleSet, error) {
	if s.RulesFile == "" {
		return failure.Default(), nil
	}
	rs, err := failure.LoadRules(s.RulesFile)
	if err != nil {
		return nil, fmt.Errorf("setting POSTLINE_RULES_FILE: %w", err)
	}
	return rs, nil
}

// suppressionLists are the suppression lists as the pipeline sees them.
type suppressionLists struct{ store *suppression.Store }

var _ delivery.Suppressions = suppressionLists{}

// Suppressed implements delivery.Suppressions.
func (l suppressionLists) Suppressed(ctx context.Context, keys []delivery.SuppressionKey) (map[delivery.SuppressionKey]string, error) {
	ks := make([]suppression.Key, len(keys))
	for i, k := range keys {
		ks[i] = suppression.Key{Tenant: k.Tenant, Stream: suppression.Stream(k.Stream), Address: k.Address}
	}
	hits, err := l.store.Check(ctx, ks)
	if err != nil {
		return nil, err
	}
	out := make(map[delivery.SuppressionKey]string, len(hits))
	for i, k := range ks {
		if e, ok := hits[k]; ok {
			out[keys[i]] = string(e.Reason)
		}
	}
	return out, nil
}

// Suppress implements delivery.Suppressions: an address a relay refused
// for good at RCPT, as the rules decided, does not exist, so it is kept off
// every stream of its tenant, like a hard bounce that comes back later.
func (l suppressionLists) Suppress(ctx context.Context, entries []delivery.Suppression) error {
	es := make([]suppression.Entry, len(entries))
	for i, e := range entries {
		es[i] = suppression.Entry{Tenant: e.Key.Tenant, Stream: suppression.StreamAll, Address: e.Key.Address,
			Reason: suppression.ReasonHardBounce, Source: suppression.SourceRelayRefusal, MessageID: e.MessageID}
	}
	_, err := l.store.Add(ctx, es)
	return err
}
