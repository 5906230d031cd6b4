package templatestore_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/templatestore"
	"github.com/postline/postline/internal/testenv"
)

// migrated returns the URL and a pool of a fresh, migrated schema.
func migrated(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return url, pool
}

func newStore(t *testing.T, pool *pgxpool.Pool) (*templatestore.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := templatestore.New(templatestore.Config{}, pool, nil, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, reg
}

func draft(name, subject string) templatestore.Draft {
	return templatestore.Draft{
		Name: name, Description: "a test template", DefaultLocale: "en",
		Subject: subject, TextBody: "Hello {{.Name}}", HTMLBody: "<p>Hello {{.Name}}</p>",
		DataSchema: json.RawMessage(`{"type": "object", "required": ["Name"]}`),
		Locales:    json.RawMessage(`{"de": {"subject": "Hallo"}}`),
		SampleData: json.RawMessage(`{"Name": "Ada"}`),
		CreatedBy:  "test",
	}
}

func push(t *testing.T, s *templatestore.Store, d templatestore.Draft) (int, bool) {
	t.Helper()
	v, created, err := s.Push(t.Context(), d)
	if err != nil {
		t.Fatalf("Push(%s): %v", d.Name, err)
	}
	return v, created
}

func TestPushTwiceAddsOneVersion(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool)
	ctx := t.Context()

	if v, created := push(t, s, draft("welcome", "Hi")); v != 1 || !created {
		t.Fatalf("first push = %d, %v; want 1, true", v, created)
	}
	// The same content reformatted, with other metadata: no new version.
	again := draft("welcome", "Hi")
	again.DataSchema = json.RawMessage("{\"required\":[\"Name\"],\n\"type\":\"object\"}")
	again.Description = "changed description"
	if v, created := push(t, s, again); v != 1 || created {
		t.Fatalf("unchanged push = %d, %v; want 1, false", v, created)
	}
	if v, created := push(t, s, draft("welcome", "Hi there")); v != 2 || !created {
		t.Fatalf("changed push = %d, %v; want 2, true", v, created)
	}
	// Back to the first content: a new version, since it differs from the latest.
	if v, created := push(t, s, draft("welcome", "Hi")); v != 3 || !created {
		t.Fatalf("reverting push = %d, %v; want 3, true", v, created)
	}

	got, err := s.Get(ctx, "welcome", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := draft("welcome", "Hi")
	if got.Subject != want.Subject || got.TextBody != want.TextBody || got.HTMLBody != want.HTMLBody || got.CreatedBy != "test" {
		t.Errorf("Get = %+v, want the pushed content", got)
	}
	var sample map[string]string
	if err := json.Unmarshal(got.SampleData, &sample); err != nil || sample["Name"] != "Ada" {
		t.Errorf("SampleData = %s (%v), want {\"Name\":\"Ada\"}", got.SampleData, err)
	}
	hash, _ := templatestore.ContentHash(want)
	if !bytes.Equal(got.ContentHash, hash) {
		t.Errorf("ContentHash = %x, want %x", got.ContentHash, hash)
	}
	latest, err := s.Latest(ctx, "welcome")
	if err != nil || latest.Version != 3 || latest.Subject != "Hi" {
		t.Errorf("Latest = %d %q, %v; want 3 Hi", latest.Version, latest.Subject, err)
	}
	vs, err := s.Versions(ctx, "welcome")
	if err != nil || len(vs) != 3 || vs[0].Version != 1 || vs[2].Version != 3 || vs[1].Subject != "Hi there" {
		t.Errorf("Versions = %+v, %v", vs, err)
	}
	if _, err := s.Get(ctx, "welcome", 4); !errors.Is(err, templatestore.ErrNotFound) {
		t.Errorf("Get version 4: %v, want ErrNotFound", err)
	}
	if _, err := s.Latest(ctx, "nope"); !errors.Is(err, templatestore.ErrNotFound) {
		t.Errorf("Latest of a missing template: %v, want ErrNotFound", err)
	}
	if _, err := s.Versions(ctx, "nope"); !errors.Is(err, templatestore.ErrNotFound) {
		t.Errorf("Versions of a missing template: %v, want ErrNotFound", err)
	}

	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].LatestVersion != 3 || list[0].Description != "a test template" ||
		list[0].Kind != templatestore.KindTemplate || len(list[0].Labels) != 0 {
		t.Errorf("List = %+v, %v", list, err)
	}
	if n := counter(t, reg, "postline_templatestore_pushes_total", "unchanged"); n != 1 {
		t.Errorf("unchanged pushes = %v, want 1", n)
	}
	if n := counter(t, reg, "postline_templatestore_pushes_total", "created"); n != 3 {
		t.Errorf("created pushes = %v, want 3", n)
	}
}

// counter returns the value in reg of the counter name whose label has
// value ("" for a counter without labels).
func counter(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if value == "" && len(m.GetLabel()) == 0 {
				return m.GetCounter().GetValue()
			}
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, value)
	return 0
}

func TestPushRefusals(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool)
	push(t, s, templatestore.Draft{Name: "base", Kind: templatestore.KindLayout, HTMLBody: "<html>{{.Content}}</html>"})
	if _, _, err := s.Push(t.Context(), templatestore.Draft{Name: "base", Subject: "x"}); !errors.Is(err, templatestore.ErrKindMismatch) {
		t.Errorf("pushing a template over a layout: %v, want ErrKindMismatch", err)
	}
	if _, _, err := s.Push(t.Context(), templatestore.Draft{Name: "Bad Name"}); !errors.Is(err, templatestore.ErrInvalidName) {
		t.Errorf("bad name: %v, want ErrInvalidName", err)
	}
	// The database checks names too.
	_, err := pool.Exec(t.Context(), `INSERT INTO postline_templates (name) VALUES ('Bad/Name')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Errorf("inserting a bad name in SQL: %v, want a check violation", err)
	}
	list, err := s.List(t.Context())
	if err != nil || len(list) != 1 || list[0].Kind != templatestore.KindLayout {
		t.Errorf("List = %+v, %v; want the layout alone", list, err)
	}
}

func TestVersionsAreImmutable(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool)
	push(t, s, draft("receipt", "Your receipt"))
	for _, stmt := range []string{
		`UPDATE postline_template_versions SET subject = 'changed' WHERE name = 'receipt'`,
		`UPDATE postline_template_versions SET html_body = html_body WHERE name = 'receipt'`,
		`UPDATE postline_template_versions SET version = 7 WHERE name = 'receipt'`,
	} {
		_, err := pool.Exec(t.Context(), stmt)
		if err == nil || !strings.Contains(err.Error(), "immutable") {
			t.Errorf("%s: %v, want the immutability error", stmt, err)
		}
	}
	v, err := s.Get(t.Context(), "receipt", 1)
	if err != nil || v.Subject != "Your receipt" {
		t.Errorf("after the refused updates: %q, %v", v.Subject, err)
	}
}

func TestConcurrentPushesCreateOneVersion(t *testing.T) {
	t.Parallel()
	url, _ := migrated(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, _ := newStore(t, pool)
	push(t, s, draft("digest", "v1"))

	const n = 16
	var wg sync.WaitGroup
	versions := make([]int, n)
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { versions[i], created[i], errs[i] = s.Push(t.Context(), draft("digest", "v2")) })
	}
	wg.Wait()
	var nCreated int
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("push %d: %v", i, errs[i])
		}
		if versions[i] != 2 {
			t.Errorf("push %d returned version %d, want 2", i, versions[i])
		}
		if created[i] {
			nCreated++
		}
	}
	if nCreated != 1 {
		t.Errorf("%d pushes created the version, want 1", nCreated)
	}
	vs, err := s.Versions(t.Context(), "digest")
	if err != nil || len(vs) != 2 {
		t.Errorf("Versions = %+v, %v; want 2", vs, err)
	}
}

func TestLabelsAndRollback(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool)
	ctx := t.Context()
	for _, subj := range []string{"one", "two", "three"} {
		push(t, s, draft("welcome", subj))
	}
	push(t, s, draft("other", "x"))
	start, err := s.LabelsVersion(ctx)
	if err != nil || start.Revision != 0 {
		t.Fatalf("LabelsVersion = %+v, %v; want revision 0", start, err)
	}
	before := time.Now().Add(-time.Minute)

	mustSet := func(label string, version, percent int) templatestore.Label {
		t.Helper()
		l, err := s.SetLabel(ctx, "welcome", label, version, percent, "ops")
		if err != nil {
			t.Fatalf("SetLabel(%s, %d, %d): %v", label, version, percent, err)
		}
		return l
	}
	mustSet("active", 1, 0)
	l := mustSet("active", 2, 0)
	if l.Revision != 2 || l.Version != 2 {
		t.Errorf("second SetLabel = %+v, want revision 2, version 2", l)
	}
	mustSet("canary", 3, 10)
	// Setting a label as it is changes nothing.
	if l := mustSet("canary", 3, 10); l.Revision != 3 {
		t.Errorf("setting canary as it is: revision %d, want 3 (unchanged)", l.Revision)
	}

	refusals := []struct {
		name, label string
		version     int
		percent     int
		want        error
	}{
		{"welcome", "active", 9, 0, templatestore.ErrNotFound},
		{"missing", "active", 1, 0, templatestore.ErrNotFound},
		{"welcome", "canary", 3, 0, templatestore.ErrInvalidLabel},
		{"welcome", "canary", 3, 101, templatestore.ErrInvalidLabel},
		{"welcome", "active", 3, 50, templatestore.ErrInvalidLabel},
		{"welcome", "beta", 3, 0, templatestore.ErrInvalidLabel},
	}
	for _, r := range refusals {
		if _, err := s.SetLabel(ctx, r.name, r.label, r.version, r.percent, "ops"); !errors.Is(err, r.want) {
			t.Errorf("SetLabel(%s, %s, %d, %d) = %v, want %v", r.name, r.label, r.version, r.percent, err, r.want)
		}
	}
	rev, err := s.LabelsVersion(ctx)
	if err != nil || rev.Revision != 3 {
		t.Errorf("LabelsVersion after 3 changes and refusals = %+v, %v; want 3", rev, err)
	}

	labels, err := s.Labels(ctx, []string{"welcome", "other"})
	if err != nil || len(labels) != 2 || labels[0].Label != "active" || labels[0].Version != 2 ||
		labels[1].Label != "canary" || labels[1].Version != 3 || labels[1].Percent != 10 || labels[1].UpdatedBy != "ops" {
		t.Fatalf("Labels = %+v, %v", labels, err)
	}

	// Without a fallback, rollback returns to the previous active version,
	// and a second rollback undoes the first.
	if l, err := s.Rollback(ctx, "welcome", "ops"); err != nil || l.Version != 1 {
		t.Fatalf("Rollback = %+v, %v; want version 1", l, err)
	}
	if l, err := s.Rollback(ctx, "welcome", "ops"); err != nil || l.Version != 2 {
		t.Fatalf("second Rollback = %+v, %v; want version 2", l, err)
	}
	// With a fallback, rollback goes to it.
	mustSet("fallback", 1, 0)
	mustSet("active", 3, 0)
	if l, err := s.Rollback(ctx, "welcome", "ops"); err != nil || l.Version != 1 {
		t.Fatalf("Rollback to fallback = %+v, %v; want version 1", l, err)
	}
	// Active already is the fallback: the previous active (3) is the target.
	if l, err := s.Rollback(ctx, "welcome", "ops"); err != nil || l.Version != 3 {
		t.Fatalf("Rollback from the fallback = %+v, %v; want version 3", l, err)
	}
	// A template that never had an active version has nothing to roll back to.
	if _, err := s.Rollback(ctx, "other", "ops"); !errors.Is(err, templatestore.ErrNoRollbackTarget) {
		t.Errorf("Rollback without history: %v, want ErrNoRollbackTarget", err)
	}

	if removed, err := s.ClearLabel(ctx, "welcome", "canary", "ops"); err != nil || !removed {
		t.Errorf("ClearLabel(canary) = %v, %v; want true", removed, err)
	}
	if removed, err := s.ClearLabel(ctx, "welcome", "canary", "ops"); err != nil || removed {
		t.Errorf("ClearLabel(canary) again = %v, %v; want false", removed, err)
	}

	changes, err := s.Changes(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, c := range changes {
		got = append(got, c.Label+":"+strconv.Itoa(c.Version))
		if i > 0 && c.Revision <= changes[i-1].Revision {
			t.Errorf("changes out of revision order: %+v", changes)
		}
	}
	want := "active:1 active:2 canary:3 active:1 active:2 fallback:1 active:3 active:1 active:3 canary:0"
	if strings.Join(got, " ") != want {
		t.Errorf("Changes = %s, want %s", strings.Join(got, " "), want)
	}
	last := changes[len(changes)-1]
	if later, err := s.Changes(ctx, last.ChangedAt); err != nil || len(later) != 0 {
		t.Errorf("Changes since the last = %+v, %v; want none", later, err)
	}
	final, err := s.LabelsVersion(ctx)
	if err != nil || final.Revision != last.Revision {
		t.Errorf("LabelsVersion = %+v, %v; want the last change's revision %d", final, err, last.Revision)
	}

	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[1].Name != "welcome" || len(list[1].Labels) != 2 ||
		list[1].Labels[0].Label != "active" || list[1].Labels[0].Version != 3 || list[1].LatestVersion != 3 {
		t.Errorf("List = %+v, %v", list, err)
	}
	all, err := s.Labels(ctx, nil)
	if err != nil || len(all) != 2 {
		t.Errorf("Labels(nil) = %+v, %v; want welcome's active and fallback", all, err)
	}
}

// TestVersionCarriesTheDefaultLocale: a version read back carries its
// template's default locale, the end of the locale chain the renderer
// walks.
func TestVersionCarriesTheDefaultLocale(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool)
	d := draft("greeting", "Hi")
	d.DefaultLocale = "fr"
	push(t, s, d)
	v, err := s.Get(t.Context(), "greeting", 1)
	if err != nil || v.DefaultLocale != "fr" {
		t.Fatalf("Get = %+v, %v; want the default locale fr", v, err)
	}
	if l, err := s.Latest(t.Context(), "greeting"); err != nil || l.DefaultLocale != "fr" {
		t.Fatalf("Latest = %+v, %v; want the default locale fr", l, err)
	}
}
