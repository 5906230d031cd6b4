package compose

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/postline/postline/internal/render"
	"github.com/postline/postline/internal/templatestore"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultCacheSize is the default for Config.CacheSize.
const DefaultCacheSize = render.DefaultCacheSize

// Config configures a Composer.
type Config struct {
	// CacheSize is how many compiled template versions are kept. Defaults
	// to DefaultCacheSize (512).
	CacheSize int
	// NowFunc is the clock that times compositions. Defaults to time.Now.
	NowFunc func() time.Time
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	cfg.CacheSize = cmp.Or(cfg.CacheSize, DefaultCacheSize)
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg Config) Validate() error {
	if cfg.CacheSize < 1 {
		return fmt.Errorf("compose config: CacheSize %d is not positive", cfg.CacheSize)
	}
	return nil
}

// VersionSource fetches stored template versions: a *templatestore.Store.
// It returns an error wrapping templatestore.ErrNotFound (or
// templatestore.ErrInvalidName) when the version does not exist; any other
// error is taken to mean the store is out of reach.
type VersionSource interface {
	Get(ctx context.Context, name string, version int) (templatestore.Version, error)
}

// LabelSource gives the current labels of every template without touching
// the database: a *templatestore.Watcher.
type LabelSource interface {
	Snapshot() *templatestore.Snapshot
}

var (
	_ VersionSource = (*templatestore.Store)(nil)
	_ LabelSource   = (*templatestore.Watcher)(nil)
)

// Request is one mail to compose from a template.
type Request struct {
	// MessageID decides, by render.CanaryBucket, whether the mail is in the
	// canary share.
	MessageID string
	// Template is the template's name.
	Template string
	// Requested is the version asked for: "" (the labels decide), "active",
	// "canary", "fallback" or a version number.
	Requested string
	// Data is what the template renders.
	Data map[string]any
	// Locale is the BCP 47 tag to render for; "" for the default.
	Locale string
}

// Result is a composed mail.
type Result struct {
	Subject, Text, HTML string
	// Locale is the locale whose parts were used.
	Locale string
	// Template and Version name what rendered.
	Template string
	Version  int
	// Why says why that version rendered: "active", "canary 10%",
	// "requested v4", "fallback: canary v3 failed: ...", "builtin v1: ...".
	Why string
	// Tried lists every version tried, in order, the last one the one that
	// rendered.
	Tried []render.Attempt
	// Builtin is true when a built-in template rendered.
	Builtin bool
}

// ErrUnavailable is wrapped by the errors of a composition that could not
// read the template store (or whose context ended while it did): trying
// again later may succeed.
var ErrUnavailable = errors.New("compose: template store unavailable")

// RenderError is a composition in which nothing rendered: the template has
// no version, or every version tried failed. Retrying does not help. Its
// text names the template, the versions tried and the last failure, never
// data values.
type RenderError struct {
	Template string
	// Detail is a short description of the failure.
	Detail string
	// Tried lists the versions tried.
	Tried []render.Attempt
	// Err is the render failure (reason render.ReasonRenderFailed).
	Err *render.Error
}

func (e *RenderError) Error() string {
	return fmt.Sprintf("compose template %q: %s", e.Template, e.Detail)
}

func (e *RenderError) Unwrap() error { return e.Err }

// Reason returns "render_failed", a code fit for a metric label or a dead
// letter's reason.
func (e *RenderError) Reason() string { return render.ReasonRenderFailed }

type key struct {
	name    string
	version int
}

// versionMeta is what a load learned of a stored version: its layout and
// the layout version compiled in (0: a built-in layout or none), or the
// error converting its row (kept: rows never change).
type versionMeta struct {
	layout        string
	layoutVersion int
	loadErr       error
}

type builtinTemplate struct {
	labels   render.Labels
	compiled map[int]*render.Compiled
	errs     map[int]error
}

func (b *builtinTemplate) get(v int) (*render.Compiled, error) {
	if err, ok := b.errs[v]; ok {
		return nil, err
	}
	if cc, ok := b.compiled[v]; ok {
		return cc, nil
	}
	return nil, &render.Error{Version: v, Stage: render.StageParse, Reason: render.ReasonInvalidVersion,
		Err: fmt.Errorf("no built-in version %d: %w", v, render.ErrNoVersion)}
}

// Composer renders template requests into mail bodies. It is safe for
// concurrent use and starts no goroutines.
type Composer struct {
	cfg      Config
	logger   *slog.Logger
	versions VersionSource
	labels   LabelSource
	cache    *render.Cache
	m        *metrics

	builtin        map[string]*builtinTemplate
	builtinLayouts map[string]render.Layout

	mu      sync.Mutex
	meta    map[key]versionMeta
	layouts map[key]render.Layout // stored layout versions fetched (immutable)

	// pollMu serialises the snapshot refreshes a template unknown to the
	// snapshot forces; lastPoll rate-limits them.
	pollMu   sync.Mutex
	lastPoll time.Time
}

// Poller is implemented by label sources that can refresh their snapshot
// on demand (templatestore.Watcher does).
type Poller interface {
	Poll(ctx context.Context) (bool, error)
}

// minForcedPoll is the least time between two snapshot refreshes forced by
// templates the snapshot does not know: a template pushed and labelled a
// moment ago renders at once, and a flood of jobs naming a template that
// does not exist costs at most a few small reads a second.
const minForcedPoll = 250 * time.Millisecond

// refresh re-reads the labels when the snapshot does not know name, at
// most once per minForcedPoll, and reports the fresh snapshot.
func (c *Composer) refresh(ctx context.Context) (*templatestore.Snapshot, error) {
	p, ok := c.labels.(Poller)
	if !ok {
		return c.labels.Snapshot(), nil
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if now := c.cfg.NowFunc(); now.Sub(c.lastPoll) >= minForcedPoll {
		c.lastPoll = now
		if _, err := p.Poll(ctx); err != nil {
			return nil, fmt.Errorf("%w: read the labels: %w", ErrUnavailable, err)
		}
	}
	return c.labels.Snapshot(), nil
}

// New returns a Composer reading versions from versions and labels from
// labels. A nil logger discards logs; a nil reg leaves the metrics
// unregistered; several composers may share one registry. The built-in
// templates are compiled here; one that fails to compile is logged and
// reported as a failed attempt whenever it is tried.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer, versions VersionSource, labels LabelSource) (*Composer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if versions == nil {
		return nil, errors.New("compose: nil version source")
	}
	if labels == nil {
		return nil, errors.New("compose: nil label source")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	cache, err := render.NewCache(render.CacheConfig{Size: cfg.CacheSize})
	if err != nil {
		return nil, fmt.Errorf("compose: %w", err)
	}
	layouts, err := render.BuiltinLayouts()
	if err != nil {
		return nil, fmt.Errorf("compose: %w", err)
	}
	all, err := render.Builtin()
	if err != nil {
		return nil, fmt.Errorf("compose: %w", err)
	}
	builtin := make(map[string]*builtinTemplate, len(all))
	for name, vs := range all {
		b := &builtinTemplate{compiled: map[int]*render.Compiled{}, errs: map[int]error{}}
		for _, v := range vs {
			cc, err := render.Compile(v, layouts)
			if err != nil {
				logger.Error("built-in template does not compile", "template", name, "version", v.Number, "error", err)
				b.errs[v.Number] = err
			} else {
				b.compiled[v.Number] = cc
			}
			b.labels.Active = max(b.labels.Active, v.Number)
		}
		if b.labels.Active > 0 {
			builtin[name] = b
		}
	}
	// The series of the names known from the start exist from the start,
	// so rates and alerts see zeros.
	for _, name := range append([]string{unknownTemplate}, slices.Sorted(maps.Keys(builtin))...) {
		for _, r := range []string{ResultRendered, ResultFallback, ResultBuiltin, ResultFailed} {
			m.renders.WithLabelValues(name, r)
		}
	}
	return &Composer{cfg: cfg, logger: logger, versions: versions, labels: labels, cache: cache, m: m,
		builtin: builtin, builtinLayouts: layouts, meta: map[key]versionMeta{}, layouts: map[key]render.Layout{}}, nil
}

// Compose renders req. Its error is a *RenderError when nothing renders
// (no retry helps), or wraps ErrUnavailable when the template store could
// not be read (a retry may).
func (c *Composer) Compose(ctx context.Context, req Request) (Result, error) {
	start := c.cfg.NowFunc()
	res, result, metricName, err := c.compose(ctx, req)
	c.m.seconds.Observe(c.cfg.NowFunc().Sub(start).Seconds())
	c.m.renders.WithLabelValues(metricName, result).Inc()
	c.m.cacheSize.Set(float64(c.cache.Len()))
	return res, err
}

// storeLabels returns the labels of name in snap and whether any is set.
func storeLabels(snap *templatestore.Snapshot, name string) (render.Labels, bool) {
	var l render.Labels
	ls := snap.Labels(name)
	for _, x := range ls {
		switch x.Label {
		case templatestore.LabelActive:
			l.Active = x.Version
		case templatestore.LabelCanary:
			l.Canary, l.CanaryPercent = x.Version, x.Percent
		case templatestore.LabelFallback:
			l.Fallback = x.Version
		}
	}
	return l, len(ls) > 0
}

// errSkipped stands for the versions of a plan left untried once the store
// failed.
var errSkipped = errors.New("not tried: the template store failed")

func (c *Composer) compose(ctx context.Context, req Request) (Result, string, string, error) {
	snap := c.labels.Snapshot()
	if snap == nil {
		snap = &templatestore.Snapshot{}
	}
	labels, stored := storeLabels(snap, req.Template)
	bt, hasBuiltin := c.builtin[req.Template]
	if !stored && !hasBuiltin {
		// Not in the snapshot: perhaps labelled since the last poll.
		fresh, err := c.refresh(ctx)
		if err != nil {
			return Result{}, ResultFailed, unknownTemplate, fmt.Errorf("compose template %q: %w", req.Template, err)
		}
		if fresh != nil {
			snap = fresh
			labels, stored = storeLabels(snap, req.Template)
		}
	}
	metricName := unknownTemplate
	if stored || hasBuiltin {
		metricName = req.Template
	}

	if !stored && hasBuiltin {
		plan := render.Plan(req.MessageID, bt.labels, req.Requested)
		r, v, tried, err := render.RenderWithFallback(plan, bt.get, req.Locale, req.Data)
		if err != nil {
			return Result{}, ResultFailed, metricName, c.renderFailed(req.Template, "built-in", tried, err)
		}
		why := "builtin: " + describe(req.MessageID, bt.labels, req.Requested)
		if len(tried) > 1 {
			why = "builtin " + fallbackWhy(describe(req.MessageID, bt.labels, req.Requested), tried)
		}
		return result(req.Template, v, r, why, tried, true), ResultBuiltin, metricName, nil
	}

	plan := render.Plan(req.MessageID, labels, req.Requested)
	var storeErr error
	get := func(v int) (*render.Compiled, error) {
		if storeErr != nil {
			return nil, errSkipped
		}
		cc, err := c.compiled(ctx, snap, req.Template, v)
		var se *storeError
		if errors.As(err, &se) {
			storeErr = se.err
		}
		return cc, err
	}
	r, v, tried, err := render.RenderWithFallback(plan, get, req.Locale, req.Data)
	if storeErr != nil {
		return Result{}, ResultFailed, metricName, fmt.Errorf("compose template %q: %w: %w", req.Template, ErrUnavailable, storeErr)
	}
	if err == nil {
		if len(tried) == 1 {
			return result(req.Template, v, r, describe(req.MessageID, labels, req.Requested), tried, false), ResultRendered, metricName, nil
		}
		return result(req.Template, v, r, fallbackWhy(describe(req.MessageID, labels, req.Requested), tried), tried, false), ResultFallback, metricName, nil
	}
	if hasBuiltin {
		br, bv, btried, berr := render.RenderWithFallback([]int{bt.labels.Active}, bt.get, req.Locale, req.Data)
		for i := range btried {
			btried[i].Why = render.WhyFallback
		}
		all := append(tried, btried...)
		if berr == nil {
			why := fmt.Sprintf("builtin v%d: every stored version failed: %s", bv, triedSummary(tried))
			if len(tried) == 0 {
				why = fmt.Sprintf("builtin v%d: no stored version to try", bv)
			}
			return result(req.Template, bv, br, why, all, true), ResultBuiltin, metricName, nil
		}
		return Result{}, ResultFailed, metricName, c.renderFailed(req.Template, "stored and built-in", all, berr)
	}
	return Result{}, ResultFailed, metricName, c.renderFailed(req.Template, "stored", tried, err)
}

func result(name string, v int, r render.Rendered, why string, tried []render.Attempt, builtin bool) Result {
	return Result{Subject: r.Subject, Text: r.Text, HTML: r.HTML, Locale: r.Locale, Template: name, Version: v,
		Why: why, Tried: tried, Builtin: builtin}
}

// renderFailed builds the *RenderError of a composition where nothing
// rendered.
func (c *Composer) renderFailed(name, what string, tried []render.Attempt, err error) error {
	var re *render.Error
	if !errors.As(err, &re) {
		re = &render.Error{Template: name, Stage: render.StageExecute, Reason: render.ReasonRenderFailed, Err: err}
	}
	if re.Template == "" {
		re.Template = name
	}
	detail := "no version to render (the template has no label and no built-in version)"
	if len(tried) > 0 {
		detail = fmt.Sprintf("no %s version rendered: %s", what, triedSummary(tried))
	}
	return &RenderError{Template: name, Detail: detail, Tried: tried, Err: re}
}

// describe says why the chosen version of a plan was chosen.
func describe(messageID string, labels render.Labels, requested string) string {
	v, why := render.Choose(messageID, labels, requested)
	switch why {
	case render.WhyActive:
		return "active"
	case render.WhyCanary:
		return fmt.Sprintf("canary %d%%", labels.CanaryPercent)
	case render.WhyRequestedActive:
		return "requested active"
	case render.WhyRequestedCanary:
		return "requested canary"
	case render.WhyRequestedFallback:
		return "requested fallback"
	case render.WhyRequestedVersion:
		return fmt.Sprintf("requested v%d", v)
	case render.WhyLabelUnset:
		return "active (requested label unset)"
	case render.WhyBadRequest:
		return "active (request not understood)"
	default:
		return why
	}
}

// fallbackWhy describes a render by a later version of the plan: what
// failed before it, the first version named by why it was chosen.
func fallbackWhy(chosen string, tried []render.Attempt) string {
	return "fallback: " + chosen + " " + triedSummary(tried[:len(tried)-1])
}

// triedSummary lists the failed attempts with their short errors.
func triedSummary(tried []render.Attempt) string {
	parts := make([]string, 0, len(tried))
	for _, a := range tried {
		if a.Err == nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("v%d failed: %s", a.Version, shortError(a.Err)))
	}
	return strings.Join(parts, "; ")
}

// shortError is a render failure without its template and version (said
// elsewhere): where it failed, stage and reason, and the cause.
func shortError(err error) string {
	var re *render.Error
	if !errors.As(err, &re) {
		return err.Error()
	}
	where := re.Part
	if re.Locale != "" {
		where += " (" + re.Locale + ")"
	}
	if where != "" {
		where += " "
	}
	return fmt.Sprintf("%s%s/%s: %v", where, re.Stage, re.Reason, re.Err)
}

// storeError marks a failure to read the store (not a missing row).
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

func missing(err error) bool {
	return errors.Is(err, templatestore.ErrNotFound) || errors.Is(err, templatestore.ErrInvalidName)
}

// compiled returns version v of the stored template name, compiled with its
// layout's current active version. A version compiles once per layout
// version: when the layout's active label has moved since, it compiles
// again.
func (c *Composer) compiled(ctx context.Context, snap *templatestore.Snapshot, name string, v int) (*render.Compiled, error) {
	k := key{name, v}
	c.mu.Lock()
	meta, ok := c.meta[k]
	c.mu.Unlock()
	if ok {
		if meta.loadErr != nil {
			return nil, meta.loadErr
		}
		if meta.layout != "" && layoutVersion(snap, meta.layout) != meta.layoutVersion {
			c.cache.Remove(name, v)
		}
	}
	return c.cache.Get(name, v, func() (render.Version, map[string]render.Layout, error) {
		sv, err := c.versions.Get(ctx, name, v)
		if err != nil {
			if missing(err) {
				return render.Version{}, nil, &render.Error{Template: name, Version: v, Stage: render.StageParse,
					Reason: render.ReasonInvalidVersion, Err: fmt.Errorf("version not in the store: %w", templatestore.ErrNotFound)}
			}
			return render.Version{}, nil, &storeError{fmt.Errorf("get version %d: %w", v, err)}
		}
		rv, err := toRender(sv)
		if err != nil {
			rerr := &render.Error{Template: name, Version: v, Part: "locales", Stage: render.StageParse,
				Reason: render.ReasonInvalidVersion, Err: err}
			c.setMeta(k, versionMeta{loadErr: rerr})
			return render.Version{}, nil, rerr
		}
		layouts, lv, err := c.layout(ctx, snap, sv.Layout)
		if err != nil {
			return render.Version{}, nil, err
		}
		c.setMeta(k, versionMeta{layout: sv.Layout, layoutVersion: lv})
		return rv, layouts, nil
	})
}

func (c *Composer) setMeta(k key, m versionMeta) {
	c.mu.Lock()
	c.meta[k] = m
	c.mu.Unlock()
}

func layoutVersion(snap *templatestore.Snapshot, name string) int {
	l, _ := snap.Label(name, templatestore.LabelActive)
	return l.Version
}

// layout returns the layouts to compile a version naming layout with: the
// stored layout's active version, or else the built-in layouts; and the
// stored version used (0 for none).
func (c *Composer) layout(ctx context.Context, snap *templatestore.Snapshot, name string) (map[string]render.Layout, int, error) {
	if name == "" {
		return nil, 0, nil
	}
	lv := layoutVersion(snap, name)
	if lv <= 0 {
		return c.builtinLayouts, 0, nil
	}
	k := key{name, lv}
	c.mu.Lock()
	l, ok := c.layouts[k]
	c.mu.Unlock()
	if !ok {
		sl, err := c.versions.Get(ctx, name, lv)
		if err != nil {
			if missing(err) {
				return c.builtinLayouts, 0, nil
			}
			return nil, 0, &storeError{fmt.Errorf("get layout %s version %d: %w", name, lv, err)}
		}
		l = render.Layout{Name: name, HTML: sl.HTMLBody, Text: sl.TextBody}
		c.mu.Lock()
		c.layouts[k] = l
		c.mu.Unlock()
	}
	return map[string]render.Layout{name: l}, lv, nil
}

// storedLocale is one locale's parts in a stored version's locales
// document: {"fr": {"subject": ..., "text": ..., "html": ...}}.
type storedLocale struct {
	Subject string `json:"subject"`
	Text    string `json:"text"`
	HTML    string `json:"html"`
}

// toRender converts a stored version for render.Compile.
func toRender(sv templatestore.Version) (render.Version, error) {
	rv := render.Version{Template: sv.Name, Number: sv.Version, Subject: sv.Subject, Text: sv.TextBody,
		HTML: sv.HTMLBody, Layout: sv.Layout, DefaultLocale: sv.DefaultLocale}
	if s := strings.TrimSpace(string(sv.DataSchema)); s != "" && s != "null" {
		rv.Schema = []byte(s)
	}
	if s := strings.TrimSpace(string(sv.Locales)); s != "" && s != "null" {
		var locs map[string]storedLocale
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&locs); err != nil {
			return rv, errors.New(`locales are not an object of {"subject", "text", "html"} by locale`)
		}
		if len(locs) > 0 {
			rv.Locales = make(map[string]render.LocaleParts, len(locs))
			for tag, p := range locs {
				rv.Locales[tag] = render.LocaleParts{Subject: p.Subject, Text: p.Text, HTML: p.HTML}
			}
		}
	}
	return rv, nil
}
