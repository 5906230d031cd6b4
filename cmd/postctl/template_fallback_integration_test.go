package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/compose"
	"github.com/postline/postline/internal/render"
	"github.com/postline/postline/internal/templatestore"
)

// historyJSON is template history's JSON output.
type historyJSON struct {
	Name    string `json:"name"`
	Changes []struct {
		Revision int64     `json:"revision"`
		At       time.Time `json:"at"`
		Label    string    `json:"label"`
		From     *int      `json:"from"`
		To       *int      `json:"to"`
		By       string    `json:"by"`
		Reason   string    `json:"reason"`
	} `json:"changes"`
}

// moves shows the changes as "label:from>to", "-" for not set.
func (h historyJSON) moves() string {
	v := func(p *int) string {
		if p == nil {
			return "-"
		}
		return itoa(*p)
	}
	var out []string
	for _, c := range h.Changes {
		out = append(out, c.Label+":"+v(c.From)+">"+v(c.To))
	}
	return strings.Join(out, " ")
}

// composer is the worker's render path on the template tables at url: a
// store, the label watcher and the composer, as the worker builds them.
func composer(t *testing.T, url string) (*compose.Composer, *templatestore.Watcher) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := templatestore.New(templatestore.Config{}, pool, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w, err := templatestore.NewWatcher(templatestore.WatcherConfig{Interval: 10 * time.Millisecond}, store, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("watcher Run: %v", err)
		}
	})
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher loaded no snapshot in 10s")
	}
	c, err := compose.New(compose.Config{}, nil, prometheus.NewRegistry(), store, w)
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// waitLabel waits until the watcher's snapshot has label of name at version.
func waitLabel(t *testing.T, w *templatestore.Watcher, name, label string, version int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l, ok := w.Snapshot().Label(name, label); ok && l.Version == version {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher's snapshot has no %s %s=%d after 10s", name, label, version)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTemplateFallbackPostgres: activating version 2 with postctl keeps
// version 1, active before, as the fallback; mail whose data version 2
// cannot render is rendered by the worker's composer from version 1, not
// failed; history lists every move in order, by whom and why; the fallback
// command sets the label by hand.
func TestTemplateFallbackPostgres(t *testing.T) {
	t.Setenv("USER", "ada")
	url := templateSchema(t)
	must := func(args ...string) string {
		t.Helper()
		out, _, err := postctl(t, nil, "", append([]string{"--database-url", url}, args...)...)
		if err != nil {
			t.Fatalf("postctl %v: %v", args, err)
		}
		return out
	}
	labels := func() string {
		t.Helper()
		var l lsJSON
		if err := json.Unmarshal([]byte(must("template", "ls", "-o", "json")), &l); err != nil {
			t.Fatal(err)
		}
		return l.labels("receipt")
	}
	history := func() historyJSON {
		t.Helper()
		var h historyJSON
		if err := json.Unmarshal([]byte(must("template", "history", "receipt", "-o", "json")), &h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	dir := copyExamples(t)
	must("template", "push", dir)
	if out := must("template", "history", "receipt"); !strings.Contains(out, "no label has moved") {
		t.Errorf("history before any label: %q", out)
	}
	must("template", "activate", "base", "1")
	must("template", "activate", "receipt", "1", "--reason", "first version")
	if got := labels(); got != "active=1" {
		t.Fatalf("after activating 1: %s, want active=1 (no version before it to fall back to)", got)
	}

	// Version 2 requires an order link that senders do not send yet: it
	// passes its own sample, and fails mail without the link.
	var schema map[string]any
	if err := json.Unmarshal([]byte(must("template", "show", "receipt", "-o", "json")), &struct {
		Schema *map[string]any `json:"schema"`
	}{&schema}); err != nil {
		t.Fatal(err)
	}
	schema["required"] = append(schema["required"].([]any), "order_url")
	schemaJSON, _ := json.Marshal(schema)
	writeTree(t, dir, map[string]string{
		"receipt/schema.json": string(schemaJSON),
		"receipt/sample.json": `{"name": "Ada Lovelace", "number": "R-1042", "paid_at": "2026-03-14T09:26:53Z",
			"items": [], "total": "42.50", "currency": "EUR", "order_url": "https://shop.example/o/1042"}`,
		"receipt/text.txt": "Hello {{.name}},\n\nReceipt {{.number}}: {{.total}} {{.currency}}. Your order: {{.order_url}}\n",
	})
	must("template", "push", dir)
	var act struct {
		Name    string `json:"name"`
		Label   string `json:"label"`
		Version int    `json:"version"`
		By      string `json:"updated_by"`
		Changes []struct {
			Label string `json:"label"`
			From  *int   `json:"from"`
			To    *int   `json:"to"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(must("template", "activate", "receipt", "2", "-o", "json")), &act); err != nil {
		t.Fatal(err)
	}
	if act.Name != "receipt" || act.Label != "active" || act.Version != 2 || act.By != "postctl:ada" || len(act.Changes) != 2 ||
		act.Changes[0].Label != "fallback" || act.Changes[0].To == nil || *act.Changes[0].To != 1 ||
		act.Changes[1].Label != "active" || act.Changes[1].From == nil || *act.Changes[1].From != 1 {
		t.Errorf("activate 2: %+v", act)
	}
	if got := labels(); got != "active=2,fallback=1" {
		t.Fatalf("after activating 2: %s, want active=2,fallback=1", got)
	}
	if out := must("template", "ls"); !strings.Contains(out, "FALLBACK") {
		t.Errorf("ls text shows no fallback column: %q", out)
	}

	// The worker's render path, on the labels postctl set.
	c, w := composer(t, url)
	waitLabel(t, w, "receipt", templatestore.LabelFallback, 1)
	waitLabel(t, w, "receipt", templatestore.LabelActive, 2)
	data := map[string]any{"name": "Grace", "number": "R-7", "paid_at": "2026-05-01T00:00:00Z", "items": []any{},
		"total": "1.00", "currency": "USD"}
	res, err := c.Compose(t.Context(), compose.Request{MessageID: "<r7@shop.example>", Template: "receipt", Data: data})
	if err != nil {
		t.Fatalf("a mail version 2 cannot render: %v; want it rendered by the fallback", err)
	}
	if res.Version != 1 || res.Builtin || !strings.HasPrefix(res.Why, "fallback") || len(res.Tried) != 2 ||
		res.Tried[0].Version != 2 || res.Tried[0].Err == nil || res.Tried[1].Why != render.WhyFallback ||
		!strings.Contains(res.Text, "Thank you for your payment. Receipt R-7") {
		t.Errorf("composed version %d (builtin %v, why %q, tried %+v), text %q; want version 1 after version 2 failed",
			res.Version, res.Builtin, res.Why, res.Tried, res.Text)
	}
	data["order_url"] = "https://shop.example/o/7"
	if res, err := c.Compose(t.Context(), compose.Request{MessageID: "<r7b@shop.example>", Template: "receipt", Data: data}); err != nil ||
		res.Version != 2 || !strings.Contains(res.Text, "Your order: https://shop.example/o/7") {
		t.Errorf("a mail version 2 can render: version %d, %q, %v; want version 2", res.Version, res.Text, err)
	}

	// Version 3 goes live keeping 1 as the fallback, then is set as the
	// fallback by hand once it is known good.
	writeTree(t, dir, map[string]string{"receipt/text.txt": "Hello {{.name}},\n\nReceipt {{.number}}: {{.total}} {{.currency}}.\n{{with .order_url}}Your order: {{.}}\n{{end}}"})
	must("template", "push", dir)
	if out := must("template", "activate", "receipt", "3", "--keep-fallback", "--reason", "order link optional"); !strings.Contains(out, "active is version 3") ||
		strings.Contains(out, "fallback") {
		t.Errorf("activate 3 --keep-fallback: %q", out)
	}
	if got := labels(); got != "active=3,fallback=1" {
		t.Errorf("after activating 3 keeping the fallback: %s", got)
	}
	if out := must("template", "fallback", "receipt", "3", "--reason", "3 verified"); !strings.Contains(out, "fallback is version 3") {
		t.Errorf("fallback 3: %q", out)
	}
	if out := must("template", "activate", "receipt", "3"); !strings.Contains(out, "nothing changed") {
		t.Errorf("activating the active version again: %q", out)
	}
	if got := labels(); got != "active=3,fallback=3" {
		t.Errorf("after setting the fallback: %s", got)
	}

	h := history()
	if want := "active:->1 fallback:->1 active:1>2 active:2>3 fallback:1>3"; h.moves() != want {
		t.Fatalf("history %s, want %s", h.moves(), want)
	}
	reasons := []string{"first version", "kept as the last known good version when version 2 was activated", "",
		"order link optional", "3 verified"}
	for i, ch := range h.Changes {
		if ch.Reason != reasons[i] || ch.By != "postctl:ada" || ch.At.IsZero() || (i > 0 && ch.Revision <= h.Changes[i-1].Revision) {
			t.Errorf("history entry %d: %+v; want reason %q by postctl:ada, in revision order", i, ch, reasons[i])
		}
	}
	out := must("template", "history", "receipt")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "AT") || !strings.Contains(lines[0], "REASON") ||
		!strings.Contains(lines[2], "fallback") || !strings.Contains(lines[2], "last known good") ||
		!strings.Contains(lines[5], "3 verified") {
		t.Errorf("history text:\n%s", out)
	}
	if _, _, err := postctl(t, nil, "", "--database-url", url, "template", "history", "missing"); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Errorf("history of a missing template: %v", err)
	}
}
