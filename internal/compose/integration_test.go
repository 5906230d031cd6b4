package compose_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/compose"
	"github.com/postline/postline/internal/render"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/templatestore"
	"github.com/postline/postline/internal/testenv"
)

// countingStore counts the versions fetched from a real store.
type countingStore struct {
	*templatestore.Store
	mu sync.Mutex
	n  map[string]int
}

func (c *countingStore) Get(ctx context.Context, name string, version int) (templatestore.Version, error) {
	c.mu.Lock()
	c.n[fmt.Sprintf("%s/%d", name, version)]++
	c.mu.Unlock()
	return c.Store.Get(ctx, name, version)
}

func TestComposeFromPostgres(t *testing.T) {
	testenv.Integration(t, "PostgreSQL")
	url, admin := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), admin); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	// A pool of the composer's own, closed below to take the store away.
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := templatestore.New(templatestore.Config{}, pool, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, _, err := store.Push(ctx, templatestore.Draft{Name: "frame", Kind: templatestore.KindLayout,
		TextBody: "[{{template \"content\" .}}]", HTMLBody: "<main>{{template \"content\" .}}</main>", CreatedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 2; n++ {
		v, created, err := store.Push(ctx, templatestore.Draft{Name: "order", Layout: "frame", DefaultLocale: "en",
			Subject: fmt.Sprintf("Order {{.id}} (v%d)", n), TextBody: fmt.Sprintf("v%d order {{.id}}", n),
			HTMLBody: fmt.Sprintf("<p>v%d order {{.id}}</p>", n), CreatedBy: "test"})
		if err != nil || !created || v != n {
			t.Fatalf("Push order v%d: version %d created %v: %v", n, v, created, err)
		}
	}
	for _, l := range []struct {
		name, label string
		version     int
		percent     int
	}{{"frame", templatestore.LabelActive, 1, 0}, {"order", templatestore.LabelActive, 1, 0}, {"order", templatestore.LabelCanary, 2, 10}} {
		if _, err := store.SetLabel(ctx, l.name, l.label, l.version, l.percent, "test"); err != nil {
			t.Fatalf("SetLabel %s %s: %v", l.name, l.label, err)
		}
	}
	w, err := templatestore.NewWatcher(templatestore.WatcherConfig{Interval: 10 * time.Millisecond}, store, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("watcher Run: %v", err)
		}
	}()
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("watcher loaded no snapshot in 10s")
	}
	if l, ok := w.Snapshot().Label("order", templatestore.LabelCanary); !ok || l.Version != 2 || l.Percent != 10 {
		t.Fatalf("snapshot canary = %+v, %v", l, ok)
	}

	counting := &countingStore{Store: store, n: map[string]int{}}
	c, err := compose.New(compose.Config{}, nil, prometheus.NewRegistry(), counting, w)
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]int{}
	for i := range 1000 {
		id := fmt.Sprintf("<%d.order@postline.test>", i)
		res, err := c.Compose(ctx, compose.Request{MessageID: id, Template: "order", Data: map[string]any{"id": i}})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		want := 1
		if render.CanaryBucket(id) < 10*100 {
			want = 2
		}
		if res.Version != want || res.Builtin {
			t.Fatalf("%s: version %d (builtin %v, why %q), want %d by its bucket %d", id, res.Version, res.Builtin, res.Why, want, render.CanaryBucket(id))
		}
		if wantText := fmt.Sprintf("[v%d order %d]", want, i); res.Text != wantText {
			t.Fatalf("%s: text %q, want %q", id, res.Text, wantText)
		}
		used[res.Version]++
	}
	t.Logf("versions used over 1000 mails: %v", used)
	if used[1] == 0 || used[2] == 0 {
		t.Fatalf("versions used %v: want both", used)
	}
	for _, k := range []string{"order/1", "order/2", "frame/1"} {
		if n := counting.n[k]; n != 1 {
			t.Errorf("%s fetched %d times, want 1", k, n)
		}
	}

	// With the database out of reach, a version not yet compiled cannot be
	// fetched: the composition is retryable, not a render failure.
	pool.Close()
	_, err = c.Compose(ctx, compose.Request{MessageID: "<x@postline.test>", Template: "order", Requested: "active", Data: map[string]any{"id": 1}})
	if err != nil {
		t.Fatalf("a cached version with the database closed: %v", err)
	}
	_, err = c.Compose(ctx, compose.Request{MessageID: "<x@postline.test>", Template: "order", Requested: "3", Data: map[string]any{"id": 1}})
	var re *compose.RenderError
	if !errors.Is(err, compose.ErrUnavailable) || errors.As(err, &re) {
		t.Fatalf("version 3 with the database closed: %v, want ErrUnavailable", err)
	}
}
