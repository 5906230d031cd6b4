package grafana

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// generated is the output of Generate, decoded.
func generated(t *testing.T) map[string]grafanaDashboard {
	t.Helper()
	files, err := Generate()
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	dashboards := make(map[string]grafanaDashboard, len(files))
	for _, f := range files {
		var d grafanaDashboard
		if err := json.Unmarshal(f.Content, &d); err != nil {
			t.Fatalf("decode %s: %v", f.Name, err)
		}
		dashboards[f.Name] = d
	}
	return dashboards
}

// grafanaDashboard is the part of Grafana's dashboard JSON the tests read.
type grafanaDashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name    string `json:"name"`
			Type    string `json:"type"`
			Query   any    `json:"query"`
			Current struct {
				Value any `json:"value"`
			} `json:"current"`
			Datasource *grafanaDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID          int                `json:"id"`
		Type        string             `json:"type"`
		Title       string             `json:"title"`
		Description string             `json:"description"`
		Datasource  *grafanaDatasource `json:"datasource"`
		FieldConfig struct {
			Defaults struct {
				Unit       string `json:"unit"`
				Thresholds *struct {
					Steps []struct {
						Value *float64 `json:"value"`
					} `json:"steps"`
				} `json:"thresholds"`
				Custom struct {
					ThresholdsStyle *struct {
						Mode string `json:"mode"`
					} `json:"thresholdsStyle"`
				} `json:"custom"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Options struct {
			Legend struct {
				ShowLegend bool `json:"showLegend"`
			} `json:"legend"`
		} `json:"options"`
		Targets []struct {
			RefID        string             `json:"refId"`
			Expr         string             `json:"expr"`
			LegendFormat string             `json:"legendFormat"`
			Datasource   *grafanaDatasource `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

type grafanaDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func TestCommittedDashboardsAreFresh(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	committed, err := filepath.Glob(filepath.Join("dashboards", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := make(map[string]bool)
	for _, f := range files {
		want[f.Name] = true
		got, err := os.ReadFile(filepath.Join("dashboards", f.Name))
		if err != nil {
			t.Errorf("dashboards/%s: %v; regenerate with `%s`", f.Name, err, RegenerateCommand)
			continue
		}
		if !bytes.Equal(got, f.Content) {
			t.Errorf("dashboards/%s is stale: regenerate with `%s`", f.Name, RegenerateCommand)
		}
	}
	for _, path := range committed {
		if !want[filepath.Base(path)] {
			t.Errorf("%s is not generated any more: regenerate with `%s` (it removes it)", path, RegenerateCommand)
		}
	}
}

// Documentation pages the dashboards are checked against, relative to this
// package: the metric catalogue, and the panel tables.
var (
	metricsPage    = filepath.Join("..", "..", "docs", "metrics.md")
	dashboardsPage = filepath.Join("..", "..", "docs", "operations", "dashboards.md")
)

func TestCatalogueMatchesMetricsDoc(t *testing.T) {
	readme, err := os.ReadFile(metricsPage)
	if err != nil {
		t.Fatal(err)
	}
	// A row of a metrics table of docs/metrics.md:
	// | `name` | type | `label` (`value`, ...), `label` | meaning |
	// under the section "## <process>" of the process that serves it.
	readmeMetricRow := regexp.MustCompile("^\\| `(postline_[a-z0-9_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	parenthesised := regexp.MustCompile(`\([^)]*\)`)
	backticked := regexp.MustCompile("`([a-z_]+)`")
	documented := make(map[string]Metric)
	var sections []Process
	section := Process("")
	for line := range strings.Lines(string(readme)) {
		if title, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "## "); ok {
			section = Process(title)
			sections = append(sections, section)
			continue
		}
		row := readmeMetricRow.FindStringSubmatch(line)
		if row == nil {
			continue
		}
		if _, dup := documented[row[1]]; dup {
			t.Errorf("docs/metrics.md lists %s twice", row[1])
		}
		var labels []string
		for _, m := range backticked.FindAllStringSubmatch(parenthesised.ReplaceAllString(row[3], ""), -1) {
			labels = append(labels, m[1])
		}
		documented[row[1]] = Metric{Name: row[1], Type: MetricType(row[2]), Labels: labels, Process: section}
	}
	if len(documented) == 0 {
		t.Fatal("docs/metrics.md has no metrics table rows like | `postline_...` | type | labels | meaning |")
	}
	if !slices.Equal(sections, Processes) {
		t.Errorf("docs/metrics.md has the sections %q, want one per process: %q", sections, Processes)
	}
	catalogued := make(map[string]bool)
	for _, m := range Catalogue() {
		catalogued[m.Name] = true
		doc, ok := documented[m.Name]
		if !ok {
			t.Errorf("%s is in Catalogue but not in the metrics table of docs/metrics.md: document it there", m.Name)
			continue
		}
		if doc.Type != m.Type || !slices.Equal(doc.Labels, m.Labels) {
			t.Errorf("%s: docs/metrics.md says %s %q, Catalogue says %s %q", m.Name, doc.Type, doc.Labels, m.Type, m.Labels)
		}
		if doc.Process != m.Process {
			t.Errorf("%s: docs/metrics.md lists it under %q, Catalogue says %q", m.Name, doc.Process, m.Process)
		}
	}
	for name := range documented {
		if !catalogued[name] {
			t.Errorf("%s is in the metrics table of docs/metrics.md but not in Catalogue: add it", name)
		}
	}
}

// TestOperationsDocDescribesEveryPanel keeps the panel tables of
// docs/operations/dashboards.md equal to the dashboards: under "Dashboard: <title>",
// one row per panel, in order, with its title, what it means and what to do
// (the description split at " What to do: ").
func TestOperationsDocDescribesEveryPanel(t *testing.T) {
	doc, err := os.ReadFile(dashboardsPage)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string][]string{} // dashboard title -> table rows
	dashboard := ""
	for line := range strings.Lines(string(doc)) {
		line = strings.TrimRight(line, "\n")
		if title, ok := strings.CutPrefix(line, "### Dashboard: "); ok {
			dashboard = title
			continue
		}
		if strings.HasPrefix(line, "#") {
			dashboard = ""
			continue
		}
		if dashboard != "" && strings.HasPrefix(line, "| ") &&
			!strings.HasPrefix(line, "| panel |") && !strings.HasPrefix(line, "| --- |") {
			documented[dashboard] = append(documented[dashboard], line)
		}
	}
	want := map[string][]string{}
	for _, p := range Panels() {
		meaning, action, ok := strings.Cut(p.Description, " What to do: ")
		if !ok {
			t.Fatalf("panel %q: description has no \" What to do: \"", p.Title)
		}
		want[p.Dashboard] = append(want[p.Dashboard],
			"| "+p.Title+" | "+meaning+" | "+strings.ToUpper(action[:1])+action[1:]+" |")
	}
	for dash, rows := range want {
		if !slices.Equal(documented[dash], rows) {
			t.Errorf("docs/operations/dashboards.md, \"### Dashboard: %s\": the panel table differs from the dashboard; want these rows:\n%s",
				dash, strings.Join(rows, "\n"))
		}
	}
	for dash := range documented {
		if _, ok := want[dash]; !ok {
			t.Errorf("docs/operations/dashboards.md documents a dashboard %q that is not generated", dash)
		}
	}
}

// seriesLabels returns the labels a series name may carry, and whether the
// name is one a worker or the scheduler exports.
func seriesLabels(catalogue map[string]Metric, name string) ([]string, bool) {
	// Prometheus adds job and instance to every scraped series, and the
	// series up for every target.
	targetLabels := []string{"job", "instance"}
	if name == "up" {
		return targetLabels, true
	}
	if m, ok := catalogue[name]; ok && m.Type != Histogram {
		return append(slices.Clone(targetLabels), m.Labels...), true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		m, ok := catalogue[strings.TrimSuffix(name, suffix)]
		if !ok || m.Type != Histogram || !strings.HasSuffix(name, suffix) {
			continue
		}
		labels := append(slices.Clone(targetLabels), m.Labels...)
		if suffix == "_bucket" {
			labels = append(labels, "le")
		}
		return labels, true
	}
	return nil, false
}

func TestQueriesParseAndUseCataloguedMetrics(t *testing.T) {
	catalogue := make(map[string]Metric)
	for _, m := range Catalogue() {
		catalogue[m.Name] = m
	}
	promql := parser.NewParser(parser.Options{})
	queries := Queries()
	if len(queries) == 0 {
		t.Fatal("Queries returned none")
	}
	for _, q := range queries {
		t.Run(q.Panel+"/"+q.RefID, func(t *testing.T) {
			plain := q.PromQL(time.Minute)
			if strings.Contains(plain, "$") {
				t.Fatalf("%s still has a Grafana variable", plain)
			}
			expr, err := promql.ParseExpr(plain)
			if err != nil {
				t.Fatalf("parse %s: %v", plain, err)
			}
			parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
				switch n := node.(type) {
				case *parser.VectorSelector:
					labels, ok := seriesLabels(catalogue, n.Name)
					if !ok {
						t.Errorf("%s: metric %q is not in Catalogue", plain, n.Name)
						return nil
					}
					for _, m := range n.LabelMatchers {
						if m.Name != "__name__" && !slices.Contains(labels, m.Name) {
							t.Errorf("%s: %s has no label %q", plain, n.Name, m.Name)
						}
					}
				case *parser.AggregateExpr:
					checkLabelsExist(t, catalogue, plain, n.Grouping, n.Expr)
				case *parser.BinaryExpr:
					if n.VectorMatching != nil {
						checkLabelsExist(t, catalogue, plain, n.VectorMatching.MatchingLabels, n)
					}
				}
				return nil
			})
		})
	}
}

// checkLabelsExist fails the test for each label no series under node can
// carry: grouping by it would only ever see the empty value.
func checkLabelsExist(t *testing.T, catalogue map[string]Metric, query string, labels []string, node parser.Node) {
	t.Helper()
	var available []string
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			l, _ := seriesLabels(catalogue, vs.Name)
			available = append(available, l...)
		}
		return nil
	})
	for _, l := range labels {
		if !slices.Contains(available, l) {
			t.Errorf("%s: no series under %q has the label %q", query, node, l)
		}
	}
}

func TestPanelsAreComplete(t *testing.T) {
	titles := make(map[string]string)
	for file, d := range generated(t) {
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: uid %q, title %q", file, d.UID, d.Title)
		}
		var datasourceDefault any
		for _, v := range d.Templating.List {
			if v.Name == datasourceVar {
				datasourceDefault = v.Current.Value
				if v.Type != "datasource" || v.Query != "prometheus" {
					t.Errorf("%s: datasource variable is %s of %v, want a prometheus datasource variable", file, v.Type, v.Query)
				}
			}
		}
		if datasourceDefault != DatasourceUID {
			t.Errorf("%s: datasource variable defaults to %v, want %q", file, datasourceDefault, DatasourceUID)
		}
		wantDatasource := grafanaDatasource{Type: "prometheus", UID: "${" + datasourceVar + "}"}
		ids := make(map[int]bool)
		for _, p := range d.Panels {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("%s: panel %q has id %d, zero or already used", file, p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				continue
			}
			where := file + ": panel " + p.Title
			if p.Title == "" {
				t.Errorf("%s: a %s panel has no title", file, p.Type)
			}
			if other, ok := titles[p.Title]; ok {
				t.Errorf("%s: title also used in %s; Queries and Panels key on it", where, other)
			}
			titles[p.Title] = file
			// docs/operations/dashboards.md splits each description into meaning
			// and action at this phrase.
			if strings.Count(p.Description, " What to do: ") != 1 {
				t.Errorf("%s: description %q must say \" What to do: \" once", where, p.Description)
			}
			if p.Datasource == nil || *p.Datasource != wantDatasource {
				t.Errorf("%s: datasource %+v, want %+v", where, p.Datasource, wantDatasource)
			}
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: no unit", where)
			}
			if !p.Options.Legend.ShowLegend {
				t.Errorf("%s: legend hidden", where)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no query", where)
			}
			for _, q := range p.Targets {
				if q.Expr == "" || q.LegendFormat == "" {
					t.Errorf("%s/%s: expr %q, legend %q", where, q.RefID, q.Expr, q.LegendFormat)
				}
				if q.Datasource == nil || *q.Datasource != wantDatasource {
					t.Errorf("%s/%s: datasource %+v, want %+v", where, q.RefID, q.Datasource, wantDatasource)
				}
			}
		}
	}
}

// TestThresholdsMatchTheAlerts keeps the dashed lines of the outcomes
// dashboard at the levels and over the window the alert rules of
// deploy/prometheus judge, and checks that the JSON draws them.
func TestThresholdsMatchTheAlerts(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join("..", "prometheus", "alerts.yml"), &rules)
	exprs := map[string][]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = append(exprs[r.Alert], r.Expr)
		}
	}
	type thresholdCase struct {
		panel, alert string
		values       []float64
		window       string // the range the alert's rates use, if it must match the panel's
	}
	tests := []thresholdCase{
		{"Complaint rate", "PostlineComplaintRateHigh", []float64{complaintRateWarning, complaintRateCritical}, reputationWindow},
		{"Bounce rate by bounce type", "PostlineHardBounceRateHigh", []float64{hardBounceRateWarning}, reputationWindow},
		{"Oldest pending webhook event", "PostlineWebhookBacklog", []float64{webhookOldestPendingMax}, ""},
	}
	drawn := map[string][]float64{}
	for file, d := range generated(t) {
		for _, p := range d.Panels {
			th := p.FieldConfig.Defaults.Thresholds
			if th == nil || len(th.Steps) < 2 {
				continue
			}
			if style := p.FieldConfig.Defaults.Custom.ThresholdsStyle; style == nil || style.Mode != "dashed" {
				t.Errorf("%s: panel %q has thresholds but does not draw them as dashed lines", file, p.Title)
			}
			if th.Steps[0].Value != nil {
				t.Errorf("%s: panel %q: the base threshold step has value %v, want null", file, p.Title, *th.Steps[0].Value)
			}
			for _, step := range th.Steps[1:] {
				if step.Value == nil {
					t.Errorf("%s: panel %q: a threshold step above the base has no value", file, p.Title)
					continue
				}
				drawn[p.Title] = append(drawn[p.Title], *step.Value)
			}
		}
	}
	for _, tt := range tests {
		if !slices.Equal(drawn[tt.panel], tt.values) {
			t.Errorf("panel %q draws thresholds %v, want %v", tt.panel, drawn[tt.panel], tt.values)
		}
		if len(exprs[tt.alert]) == 0 {
			t.Errorf("alerts.yml has no alert %s", tt.alert)
			continue
		}
		for _, v := range tt.values {
			level := regexp.MustCompile(`>\s*` + regexp.QuoteMeta(strconv.FormatFloat(v, 'g', -1, 64)) + `\b`)
			if !slices.ContainsFunc(exprs[tt.alert], level.MatchString) {
				t.Errorf("panel %q draws %v, but no rule of alert %s fires above it: %q", tt.panel, v, tt.alert, exprs[tt.alert])
			}
		}
		for _, e := range exprs[tt.alert] {
			if tt.window != "" && !strings.Contains(e, "["+tt.window+"]") {
				t.Errorf("alert %s judges over another window than panel %q (%s): %s", tt.alert, tt.panel, tt.window, e)
			}
		}
	}
	for title := range drawn {
		if !slices.ContainsFunc(tests, func(tt thresholdCase) bool { return tt.panel == title }) {
			t.Errorf("panel %q draws thresholds no alert is checked against: add it to this test", title)
		}
	}
}

func TestExportsMatchTheJSON(t *testing.T) {
	var fromJSON []Query
	var panels []Panel
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	dashboards := generated(t)
	for _, f := range files {
		d := dashboards[f.Name]
		row := ""
		for _, p := range d.Panels {
			if p.Type == "row" {
				row = p.Title
				continue
			}
			panels = append(panels, Panel{Dashboard: d.Title, Row: row, Title: p.Title, Description: p.Description, Unit: p.FieldConfig.Defaults.Unit})
			for _, q := range p.Targets {
				fromJSON = append(fromJSON, Query{Dashboard: d.Title, Panel: p.Title, RefID: q.RefID, Legend: q.LegendFormat, Expr: q.Expr})
			}
		}
	}
	if got := Queries(); !slices.Equal(got, fromJSON) {
		t.Errorf("Queries() differs from the generated JSON:\n got %+v\nwant %+v", got, fromJSON)
	}
	if got := Panels(); !slices.Equal(got, panels) {
		t.Errorf("Panels() differs from the generated JSON:\n got %+v\nwant %+v", got, panels)
	}
}

func TestPromQLReplacesGrafanaVariables(t *testing.T) {
	tests := []struct {
		expr         string
		rateInterval time.Duration
		want         string
	}{
		{
			expr:         `sum(rate(x_total{job=~"$job", instance=~"$instance"}[$__rate_interval]))`,
			rateInterval: time.Minute,
			want:         `sum(rate(x_total{job=~".*", instance=~".*"}[1m]))`,
		},
		{
			expr:         `max(y{job=~"$job"})`,
			rateInterval: 30 * time.Second,
			want:         `max(y{job=~".*"})`,
		},
		{
			expr:         `rate(z_total[$__rate_interval])`,
			rateInterval: 90 * time.Second,
			want:         `rate(z_total[1m30s])`,
		},
	}
	for _, tt := range tests {
		if got := (Query{Expr: tt.expr}).PromQL(tt.rateInterval); got != tt.want {
			t.Errorf("PromQL(%q, %v) = %q, want %q", tt.expr, tt.rateInterval, got, tt.want)
		}
	}
}

func TestProvisioning(t *testing.T) {
	var datasources struct {
		Datasources []struct {
			Name, Type, UID, URL string
		}
	}
	readYAML(t, filepath.Join("provisioning", "datasources", "prometheus.yaml"), &datasources)
	if len(datasources.Datasources) != 1 {
		t.Fatalf("want one datasource, got %+v", datasources.Datasources)
	}
	ds := datasources.Datasources[0]
	if ds.Type != "prometheus" || ds.UID != DatasourceUID || ds.URL != "http://prometheus:9090" {
		t.Errorf("datasource %+v: want type prometheus, uid %q, url http://prometheus:9090", ds, DatasourceUID)
	}

	var dashboards struct {
		Providers []struct {
			Type    string
			Options struct{ Path string }
		}
	}
	readYAML(t, filepath.Join("provisioning", "dashboards", "postline.yaml"), &dashboards)
	if len(dashboards.Providers) != 1 {
		t.Fatalf("want one dashboard provider, got %+v", dashboards.Providers)
	}
	if p := dashboards.Providers[0]; p.Type != "file" || p.Options.Path == "" {
		t.Errorf("dashboard provider %+v: want type file and a path", p)
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(content, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestProcessOf(t *testing.T) {
	tests := []struct {
		series string
		want   Process
		ok     bool
	}{
		{"postline_delivery_records_total", WorkerAndScheduler, true},
		{"postline_scheduler_lateness_seconds_bucket", WorkerAndScheduler, true},
		{"postline_events_published_total", WorkerAndScheduler, true},
		{"postline_outcome_transitions_total", BounceReceiver, true},
		{"postline_inbound_parse_seconds_count", BounceReceiver, true},
		{"postline_webhook_delivery_seconds_sum", WebhookDispatcher, true},
		{"postline_webhook_backlog", WebhookDispatcher, true},
		{"postline_webhook_backlog_bucket", "", false}, // a gauge has no buckets
		{"postline_delivery_records_total_count", "", false},
		{"up", "", false},
		{"postline_no_such_metric", "", false},
	}
	for _, tt := range tests {
		got, ok := ProcessOf(tt.series)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ProcessOf(%q) = %q, %v; want %q, %v", tt.series, got, ok, tt.want, tt.ok)
		}
	}
	// Every catalogued metric has a process docs/metrics.md lists.
	for _, m := range Catalogue() {
		if !slices.Contains(Processes, m.Process) {
			t.Errorf("%s: process %q is not one of %q", m.Name, m.Process, Processes)
		}
	}
}
