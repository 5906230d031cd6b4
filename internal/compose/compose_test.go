package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/postline/postline/internal/render"
	"github.com/postline/postline/internal/templatestore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeStore holds versions and labels in memory; it is both the Composer's
// VersionSource and the Watcher's label source.
type fakeStore struct {
	mu       sync.Mutex
	versions map[key]templatestore.Version
	labels   []templatestore.Label
	revision int64
	fetches  map[key]int
	fail     error
}

func newFakeStore() *fakeStore {
	return &fakeStore{versions: map[key]templatestore.Version{}, fetches: map[key]int{}}
}

func (f *fakeStore) put(v templatestore.Version) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versions[key{v.Name, v.Version}] = v
}

func (f *fakeStore) label(name, label string, version, percent int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revision++
	out := f.labels[:0:0]
	for _, l := range f.labels {
		if l.Name != name || l.Label != label {
			out = append(out, l)
		}
	}
	f.labels = append(out, templatestore.Label{Name: name, Label: label, Version: version, Percent: percent, Revision: f.revision})
}

func (f *fakeStore) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeStore) fetched(name string, version int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetches[key{name, version}]
}

func (f *fakeStore) Get(ctx context.Context, name string, version int) (templatestore.Version, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return templatestore.Version{}, fmt.Errorf("get template %s version %d: %w", name, version, f.fail)
	}
	f.fetches[key{name, version}]++
	v, ok := f.versions[key{name, version}]
	if !ok {
		return templatestore.Version{}, fmt.Errorf("get template %s version %d: %w", name, version, templatestore.ErrNotFound)
	}
	return v, nil
}

func (f *fakeStore) LabelsVersion(ctx context.Context) (templatestore.Revision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return templatestore.Revision{Revision: f.revision}, nil
}

func (f *fakeStore) Labels(ctx context.Context, names []string) ([]templatestore.Label, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]templatestore.Label(nil), f.labels...), nil
}

type fixture struct {
	store *fakeStore
	w     *templatestore.Watcher
	c     *Composer
	reg   *prometheus.Registry
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{store: newFakeStore(), reg: prometheus.NewRegistry()}
	var err error
	if f.w, err = templatestore.NewWatcher(templatestore.WatcherConfig{}, f.store, nil, nil); err != nil {
		t.Fatal(err)
	}
	if f.c, err = New(Config{}, nil, f.reg, f.store, f.w); err != nil {
		t.Fatal(err)
	}
	return f
}

// poll reloads the watcher's snapshot after label changes.
func (f *fixture) poll(t *testing.T) {
	t.Helper()
	if _, err := f.w.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) renders(name, result string) float64 {
	return testutil.ToFloat64(f.c.m.renders.WithLabelValues(name, result))
}

func good(name string, n int) templatestore.Version {
	return templatestore.Version{Name: name, Version: n, Subject: fmt.Sprintf("v%d for {{.name}}", n),
		TextBody: fmt.Sprintf("text v%d {{.name}}", n), HTMLBody: fmt.Sprintf("<p>html v%d {{.name}}</p>", n)}
}

func broken(name string, n int) templatestore.Version {
	v := good(name, n)
	v.TextBody = "{{.no_such_key}}"
	return v
}

var data = map[string]any{"name": "secret-value", "product": "Postline"}

func TestCanaryShareIsExactByBucket(t *testing.T) {
	f := newFixture(t)
	f.store.put(good("greet", 1))
	f.store.put(good("greet", 2))
	f.store.label("greet", templatestore.LabelActive, 1, 0)
	f.store.label("greet", templatestore.LabelCanary, 2, 10)
	f.poll(t)
	canary := 0
	for i := range 1000 {
		id := fmt.Sprintf("<m%d@example.test>", i)
		res, err := f.c.Compose(context.Background(), Request{MessageID: id, Template: "greet", Data: data})
		if err != nil {
			t.Fatal(err)
		}
		want, why := 1, "active"
		if render.CanaryBucket(id) < 10*100 {
			want, why = 2, "canary 10%"
			canary++
		}
		if res.Version != want || res.Why != why || res.Builtin {
			t.Fatalf("%s: version %d why %q builtin %v, want version %d why %q", id, res.Version, res.Why, res.Builtin, want, why)
		}
		if wantSubj := fmt.Sprintf("v%d for secret-value", want); res.Subject != wantSubj {
			t.Fatalf("%s: subject %q, want %q", id, res.Subject, wantSubj)
		}
	}
	if canary == 0 || canary == 1000 {
		t.Fatalf("canary share %d of 1000: the ids do not exercise both versions", canary)
	}
	if got := f.renders("greet", ResultRendered); got != 1000 {
		t.Errorf("renders_total{rendered} = %v, want 1000", got)
	}
	for v := 1; v <= 2; v++ {
		if n := f.store.fetched("greet", v); n != 1 {
			t.Errorf("version %d fetched %d times, want 1", v, n)
		}
	}
}

func TestRequestedVersions(t *testing.T) {
	f := newFixture(t)
	for n := 1; n <= 3; n++ {
		f.store.put(good("greet", n))
	}
	f.store.label("greet", templatestore.LabelActive, 2, 0)
	f.store.label("greet", templatestore.LabelFallback, 1, 0)
	f.poll(t)
	tests := []struct {
		requested string
		version   int
		why       string
	}{
		{"", 2, "active"},
		{"active", 2, "requested active"},
		{"fallback", 1, "requested fallback"},
		{"canary", 2, "active (requested label unset)"},
		{"3", 3, "requested v3"},
		{"three", 2, "active (request not understood)"},
	}
	for _, tt := range tests {
		t.Run(tt.requested, func(t *testing.T) {
			res, err := f.c.Compose(context.Background(), Request{MessageID: "<x@y>", Template: "greet", Requested: tt.requested, Data: data})
			if err != nil {
				t.Fatal(err)
			}
			if res.Version != tt.version || res.Why != tt.why {
				t.Errorf("version %d why %q, want %d %q", res.Version, res.Why, tt.version, tt.why)
			}
		})
	}
}

func TestBrokenCanaryFallsBack(t *testing.T) {
	f := newFixture(t)
	f.store.put(good("greet", 1))
	f.store.put(broken("greet", 3))
	f.store.label("greet", templatestore.LabelActive, 1, 0)
	f.store.label("greet", templatestore.LabelFallback, 1, 0)
	f.store.label("greet", templatestore.LabelCanary, 3, 100)
	f.poll(t)
	res, err := f.c.Compose(context.Background(), Request{MessageID: "<a@b>", Template: "greet", Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 1 || res.Builtin || res.Subject != "v1 for secret-value" {
		t.Fatalf("rendered %+v, want version 1", res)
	}
	if !strings.HasPrefix(res.Why, "fallback: canary 100% v3 failed: text execute/missing_key") {
		t.Errorf("Why = %q", res.Why)
	}
	if len(res.Tried) != 2 || res.Tried[0].Version != 3 || res.Tried[0].Err == nil || res.Tried[1].Version != 1 || res.Tried[1].Err != nil {
		t.Errorf("Tried = %+v", res.Tried)
	}
	if got := f.renders("greet", ResultFallback); got != 1 {
		t.Errorf("renders_total{fallback} = %v, want 1", got)
	}
}

func TestBrokenStoredVersionsUseBuiltin(t *testing.T) {
	f := newFixture(t)
	f.store.put(broken("welcome", 1))
	f.store.put(broken("welcome", 2))
	f.store.label("welcome", templatestore.LabelActive, 2, 0)
	f.store.label("welcome", templatestore.LabelFallback, 1, 0)
	f.poll(t)
	res, err := f.c.Compose(context.Background(), Request{MessageID: "<a@b>", Template: "welcome", Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Builtin || res.Version != 1 || !strings.Contains(res.Subject, "secret-value") {
		t.Fatalf("rendered %+v, want built-in version 1", res)
	}
	if !strings.HasPrefix(res.Why, "builtin v1: every stored version failed: v2 failed:") || !strings.Contains(res.Why, "v1 failed:") {
		t.Errorf("Why = %q", res.Why)
	}
	if len(res.Tried) != 3 || res.Tried[2].Err != nil || res.Tried[2].Why != render.WhyFallback {
		t.Errorf("Tried = %+v", res.Tried)
	}
	if got := f.renders("welcome", ResultBuiltin); got != 1 {
		t.Errorf("renders_total{builtin} = %v, want 1", got)
	}
}

func TestBuiltinOnlyTemplate(t *testing.T) {
	f := newFixture(t)
	f.poll(t)
	res, err := f.c.Compose(context.Background(), Request{MessageID: "<a@b>", Template: "welcome", Data: data, Locale: "fr-CA"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Builtin || res.Version != 1 || res.Why != "builtin: active" || res.Locale != "fr" {
		t.Fatalf("rendered %+v", res)
	}
	if res.HTML == "" || !strings.Contains(res.HTML, "secret-value") {
		t.Errorf("HTML = %q", res.HTML)
	}
	if n := len(f.store.fetches); n != 0 {
		t.Errorf("%d store fetches for a built-in template, want 0", n)
	}
}

func TestNothingRenders(t *testing.T) {
	f := newFixture(t)
	f.store.put(broken("greet", 1))
	f.store.label("greet", templatestore.LabelActive, 1, 0)
	f.store.put(broken("welcome", 1))
	f.store.label("welcome", templatestore.LabelActive, 1, 0)
	f.poll(t)
	tests := []struct {
		name, template string
		data           map[string]any
		metric         string
		detail         string
	}{
		{"all stored broken", "greet", data, "greet", "no stored version rendered: v1 failed: text execute/missing_key"},
		{"stored and built-in broken", "welcome", map[string]any{"name": "secret-value"}, "welcome", "no stored and built-in version rendered: v1 failed: text execute/missing_key"},
		{"unknown template", "nope", data, unknownTemplate, "no version to render"},
		{"invalid name", "Not A Name!", data, unknownTemplate, "no version to render"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.renders(tt.metric, ResultFailed)
			_, err := f.c.Compose(context.Background(), Request{MessageID: "<a@b>", Template: tt.template, Data: tt.data})
			var re *RenderError
			if !errors.As(err, &re) {
				t.Fatalf("error %v (%T), want *RenderError", err, err)
			}
			if re.Reason() != "render_failed" {
				t.Errorf("Reason() = %q", re.Reason())
			}
			var rerr *render.Error
			if !errors.As(err, &rerr) || rerr.Reason != render.ReasonRenderFailed {
				t.Errorf("error does not wrap a render_failed *render.Error: %v", err)
			}
			if errors.Is(err, ErrUnavailable) {
				t.Error("a render failure wraps ErrUnavailable")
			}
			if !strings.HasPrefix(re.Detail, tt.detail) {
				t.Errorf("Detail = %q, want prefix %q", re.Detail, tt.detail)
			}
			if strings.Contains(err.Error(), "secret-value") {
				t.Errorf("error text holds a data value: %v", err)
			}
			if got := f.renders(tt.metric, ResultFailed); got != before+1 {
				t.Errorf("renders_total{%s,failed} = %v, want %v", tt.metric, got, before+1)
			}
		})
	}
}

func TestStoreErrorIsUnavailable(t *testing.T) {
	f := newFixture(t)
	f.store.put(good("greet", 1))
	f.store.put(good("greet", 2))
	f.store.label("greet", templatestore.LabelActive, 1, 0)
	f.store.label("greet", templatestore.LabelCanary, 2, 100)
	f.poll(t)
	// Version 1 is cached; the canary is not fetched yet when the store fails.
	if _, err := f.c.Compose(context.Background(), Request{Template: "greet", Requested: "1", Data: data}); err != nil {
		t.Fatal(err)
	}
	down := errors.New("dial tcp 127.0.0.1:5432: connection refused")
	f.store.setFail(down)
	_, err := f.c.Compose(context.Background(), Request{MessageID: "<a@b>", Template: "greet", Data: data})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, down) {
		t.Fatalf("error %v, want ErrUnavailable wrapping the store's error", err)
	}
	var re *RenderError
	if errors.As(err, &re) {
		t.Errorf("a store failure is a *RenderError: %v", err)
	}
	f.store.setFail(nil)
	res, err := f.c.Compose(context.Background(), Request{MessageID: "<a@b>", Template: "greet", Data: data})
	if err != nil || res.Version != 2 {
		t.Fatalf("after the store is back: %+v, %v; want version 2", res, err)
	}
}

func TestVersionsCompileOnce(t *testing.T) {
	f := newFixture(t)
	v := good("greet", 1)
	v.Layout = "frame"
	f.store.put(v)
	f.store.put(templatestore.Version{Name: "frame", Version: 1, TextBody: "L1[{{template \"content\" .}}]", HTMLBody: "<div>{{template \"content\" .}}</div>"})
	f.store.put(templatestore.Version{Name: "frame", Version: 2, TextBody: "L2[{{template \"content\" .}}]", HTMLBody: "<div>{{template \"content\" .}}</div>"})
	f.store.label("greet", templatestore.LabelActive, 1, 0)
	f.store.label("frame", templatestore.LabelActive, 1, 0)
	f.poll(t)
	compose := func(want string) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for i := range 50 {
			wg.Go(func() {
				res, err := f.c.Compose(context.Background(), Request{MessageID: fmt.Sprint(i), Template: "greet", Data: data})
				if err == nil && res.Text != want {
					err = fmt.Errorf("text %q, want %q", res.Text, want)
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	compose("L1[text v1 secret-value]")
	if n, l := f.store.fetched("greet", 1), f.store.fetched("frame", 1); n != 1 || l != 1 {
		t.Fatalf("fetches: version %d, layout %d; want 1 and 1", n, l)
	}
	if got := testutil.ToFloat64(f.c.m.cacheSize); got != 1 {
		t.Errorf("cache_size = %v, want 1", got)
	}
	// Moving the layout's active label compiles the version again, once.
	f.store.label("frame", templatestore.LabelActive, 2, 0)
	f.poll(t)
	compose("L2[text v1 secret-value]")
	if n, l := f.store.fetched("greet", 1), f.store.fetched("frame", 2); n != 2 || l != 1 {
		t.Fatalf("fetches after the layout moved: version %d, layout %d; want 2 and 1", n, l)
	}
}

func TestStoredLocales(t *testing.T) {
	f := newFixture(t)
	v := good("greet", 1)
	v.Locales = json.RawMessage(`{"de": {"subject": "Hallo {{.name}}"}}`)
	v.DataSchema = json.RawMessage(`{"type": "object", "required": ["name"]}`)
	f.store.put(v)
	bad := good("greet", 2)
	bad.Locales = json.RawMessage(`{"de": {"body": "x"}}`)
	f.store.put(bad)
	f.store.label("greet", templatestore.LabelActive, 1, 0)
	f.poll(t)
	res, err := f.c.Compose(context.Background(), Request{Template: "greet", Data: data, Locale: "de-AT"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Subject != "Hallo secret-value" || res.Locale != "de" || res.Text != "text v1 secret-value" {
		t.Errorf("rendered %+v", res)
	}
	if _, err := f.c.Compose(context.Background(), Request{Template: "greet", Data: map[string]any{}}); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Errorf("data against the schema: %v, want a schema failure", err)
	}
	for range 2 {
		res, err = f.c.Compose(context.Background(), Request{Template: "greet", Requested: "2", Data: data})
		if err != nil || res.Version != 1 || !strings.Contains(res.Why, "locales parse/invalid_version") {
			t.Errorf("version 2 with bad locales: %+v, %v", res, err)
		}
	}
	if n := f.store.fetched("greet", 2); n != 1 {
		t.Errorf("a version whose locales do not convert was fetched %d times, want 1", n)
	}
}

func TestConfig(t *testing.T) {
	cfg := Config{}.WithDefaults()
	if cfg.CacheSize != DefaultCacheSize || cfg.NowFunc == nil {
		t.Errorf("defaults: %+v", cfg)
	}
	if err := (Config{CacheSize: -1}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "CacheSize -1") {
		t.Errorf("Validate(CacheSize -1) = %v", err)
	}
	f := newFixture(t)
	if _, err := New(Config{}, nil, f.reg, f.store, f.w); err != nil {
		t.Errorf("a second composer on the same registry: %v", err)
	}
	if _, err := New(Config{}, nil, nil, nil, f.w); err == nil {
		t.Error("New with a nil version source succeeded")
	}
}

// TestUnknownTemplateForcesARefresh: a template labelled after the last
// poll renders at once (the composer re-reads the labels instead of
// failing the job); one that does not exist still fails, and the refresh
// is rate-limited.
func TestUnknownTemplateForcesARefresh(t *testing.T) {
	f := newFixture(t)
	f.poll(t)
	f.store.put(good("late", 1))
	f.store.label("late", templatestore.LabelActive, 1, 0)
	res, err := f.c.Compose(context.Background(), Request{MessageID: "<a@b>", Template: "late", Data: data})
	if err != nil || res.Version != 1 {
		t.Fatalf("Compose of a template labelled after the last poll = %+v, %v; want version 1", res, err)
	}
	if _, err := f.c.Compose(context.Background(), Request{MessageID: "<a@b>", Template: "nowhere", Data: data}); err == nil {
		t.Fatal("a template that does not exist rendered")
	}
}
