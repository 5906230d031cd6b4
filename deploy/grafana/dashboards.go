// Package grafana owns Postline's Grafana dashboards: it builds them in Go
// with the Grafana Foundation SDK, and the JSON under dashboards/ is its
// generated output (regenerate with `go generate ./deploy/grafana/...`).
// It also exports every panel's PromQL and description, so that tests can
// run the queries against a real Prometheus and the README can list what
// each panel means. Alert rules and Prometheus itself live elsewhere
// (deploy/prometheus); this package only reads metric names.
package grafana

//go:generate go run ./cmd/gendashboards -out dashboards

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// DatasourceUID is the uid of the Prometheus datasource the provisioning file
// creates; it is the default of every dashboard's datasource variable.
const DatasourceUID = "prometheus"

// RegenerateCommand rewrites dashboards/*.json from this package.
const RegenerateCommand = "go generate ./deploy/grafana/..."

// File is one generated dashboard: its file name under dashboards/ and its
// JSON, indented and ending in a newline.
type File struct {
	Name    string
	Content []byte
}

// Generate builds every dashboard and returns its JSON, in a stable order.
func Generate() ([]File, error) {
	specs := dashboardSpecs()
	files := make([]File, 0, len(specs))
	for _, d := range specs {
		built, err := d.build()
		if err != nil {
			return nil, fmt.Errorf("build dashboard %q: %w", d.title, err)
		}
		content, err := json.MarshalIndent(built, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("marshal dashboard %q: %w", d.title, err)
		}
		files = append(files, File{Name: d.uid + ".json", Content: append(content, '\n')})
	}
	return files, nil
}

// panelKind is the Grafana visualisation of a panel.
type panelKind int

const (
	timeSeries panelKind = iota
	// stateTimeline shows a relay's circuit state as coloured bands.
	stateTimeline
)

// dashboardSpec is one dashboard, row by row. The specs are the single
// source of the JSON, of Queries and of Panels.
type dashboardSpec struct {
	uid, title, description string
	tags                    []string
	rows                    []rowSpec
}

type rowSpec struct {
	title  string
	panels []panelSpec
}

type panelSpec struct {
	kind        panelKind
	title       string
	description string // what the panel means, then what to do about it
	unit        string
	stacked     bool
	width       uint32 // grid columns out of 24; defaults to 12
	// thresholds are drawn as dashed lines across a time series, lowest
	// first; a ratio panel with thresholds is not capped at 1, so that lines
	// at a fraction of a percent stay visible.
	thresholds []threshold
	targets    []target
}

// threshold is a level worth seeing on a panel, such as an alert's.
type threshold struct {
	value float64
	color string // a Grafana colour name
}

type target struct {
	expr, legend string
}

// Grid sizes.
const (
	defaultPanelWidth  = 12
	defaultPanelHeight = 8
)

// Units, as Grafana names them.
const (
	unitPerSecond = "ops"
	unitSeconds   = "s"
	unitRatio     = "percentunit"
	unitCount     = "short"
	unitNone      = "none"
)

func (d dashboardSpec) build() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder(d.title).
		Uid(d.uid).
		Description(d.description).
		Tags(d.tags).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(datasourceVariable()).
		WithVariable(jobVariable()).
		WithVariable(instanceVariable())
	// Stable panel ids keep links to a panel (viewPanel=<id>) valid across
	// regenerations.
	id := uint32(0)
	for _, row := range d.rows {
		id++
		b.WithRow(dashboard.NewRowBuilder(row.title).Id(id))
		for _, p := range row.panels {
			id++
			b.WithPanel(p.builder(id))
		}
	}
	return b.Build()
}

// panelDatasource is the datasource variable every panel and query uses.
func panelDatasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + datasourceVar + "}")}
}

// Names of the dashboard variables.
const (
	datasourceVar = "datasource"
	jobVar        = "job"
	instanceVar   = "instance"
	// allValue selects every job or instance when "All" is chosen, so the
	// matchers stay valid regular expressions.
	allValue = ".*"
)

func datasourceVariable() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder(datasourceVar).
		Label("Data source").
		Type("prometheus").
		Current(dashboard.VariableOption{
			Text:  dashboard.StringOrArrayOfString{String: cog.ToPtr("Prometheus")},
			Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(DatasourceUID)},
		})
}

func jobVariable() *dashboard.QueryVariableBuilder {
	return filterVariable(jobVar, "Job", `label_values({__name__=~"postline_.+"}, job)`)
}

func instanceVariable() *dashboard.QueryVariableBuilder {
	return filterVariable(instanceVar, "Instance", `label_values(up{job=~"$job"}, instance)`)
}

func filterVariable(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(panelDatasource()).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(allValue).
		Current(dashboard.VariableOption{
			Text:  dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
			Value: dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
		})
}

func (p panelSpec) builder(id uint32) cog.Builder[dashboard.Panel] {
	switch p.kind {
	case stateTimeline:
		return withPanelSpec(statetimeline.NewPanelBuilder(), p, id).
			Mappings(circuitStateMappings()).
			ShowValue(common.VisibilityModeAuto).
			MergeValues(true)
	default:
		b := withPanelSpec(timeseries.NewPanelBuilder(), p, id).
			Min(0).
			FillOpacity(10).
			ShowPoints(common.VisibilityModeNever).
			Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
		if p.unit == unitRatio && len(p.thresholds) == 0 {
			b.Max(1)
		}
		if len(p.thresholds) > 0 {
			b.Thresholds(thresholdsConfig(p.thresholds)).
				ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
		}
		if p.stacked {
			b.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(40)
		}
		return b
	}
}

// panelBuilder is what every kind of panel builder in the SDK offers; each
// method returns the builder itself, B.
type panelBuilder[B any] interface {
	Id(id uint32) B
	Title(title string) B
	Description(description string) B
	Datasource(datasource common.DataSourceRef) B
	Unit(unit string) B
	Span(w uint32) B
	Height(h uint32) B
	Legend(legend cog.Builder[common.VizLegendOptions]) B
	WithTarget(target cog.Builder[variants.Dataquery]) B
}

// withPanelSpec sets what p says of any panel, whatever its kind, on b: its
// id, title, description, datasource, unit, size, legend and queries.
func withPanelSpec[B panelBuilder[B]](b B, p panelSpec, id uint32) B {
	width := p.width
	if width == 0 {
		width = defaultPanelWidth
	}
	b.Id(id).
		Title(p.title).
		Description(p.description).
		Datasource(panelDatasource()).
		Unit(p.unit).
		Span(width).
		Height(defaultPanelHeight).
		Legend(legend())
	for i, t := range p.targets {
		b.WithTarget(t.query(i))
	}
	return b
}

func legend() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().
		ShowLegend(true).
		DisplayMode(common.LegendDisplayModeList).
		Placement(common.LegendPlacementBottom)
}

// thresholdsConfig is Grafana's step list for thresholds: a base step below
// the first (its value is minus infinity, written as null), then one step
// per threshold.
func thresholdsConfig(ts []threshold) *dashboard.ThresholdsConfigBuilder {
	steps := []dashboard.Threshold{{Color: "green"}}
	for _, t := range ts {
		steps = append(steps, dashboard.Threshold{Value: cog.ToPtr(t.value), Color: t.color})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)
}

// circuitStateMappings turns the circuit-state encoding of circuitStateExpr
// into names and colours.
func circuitStateMappings() []dashboard.ValueMapping {
	state := func(text, color string, index int32) dashboard.ValueMappingResult {
		return dashboard.ValueMappingResult{Text: cog.ToPtr(text), Color: cog.ToPtr(color), Index: cog.ToPtr(index)}
	}
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{
		Type: dashboard.MappingTypeValueToText,
		Options: map[string]dashboard.ValueMappingResult{
			"0": state("closed", "green", 0),
			"1": state("half-open", "yellow", 1),
			"2": state("open", "red", 2),
		},
	}}}
}

// refID names the i-th query of a panel A, B, C...
func refID(i int) string {
	return string(rune('A' + i))
}

func (t target) query(i int) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(panelDatasource()).
		Expr(t.expr).
		LegendFormat(t.legend).
		Range().
		RefId(refID(i))
}

// sel is a selector of metric restricted to the dashboard's job and
// instance, plus any extra matchers (`result="sent"`).
func sel(metric string, matchers ...string) string {
	all := append([]string{`job=~"$job"`, `instance=~"$instance"`}, matchers...)
	return metric + "{" + strings.Join(all, ", ") + "}"
}

// rate is the per-second rate of a counter over Grafana's rate interval.
func rate(metric string, matchers ...string) string {
	return rateOver("$__rate_interval", metric, matchers...)
}

// fleetRateOver is rateOver without the dashboard's job and instance
// filters, for ratios whose two sides come from different processes.
func fleetRateOver(window, metric string, matchers ...string) string {
	return "rate(" + metric + "{" + strings.Join(matchers, ", ") + "}[" + window + "])"
}

// rateOver is the per-second rate of a counter over a fixed window, for
// ratios of slow events (bounces, complaints) that the alerts judge over the
// same window.
func rateOver(window, metric string, matchers ...string) string {
	return "rate(" + sel(metric, matchers...) + "[" + window + "])"
}

// quantile is the q-quantile of a histogram, grouped by the given labels.
func quantile(q string, histogram string, by ...string) string {
	return quantileOf(q, histogram, nil, by...)
}

// quantileOf is the q-quantile of the series of a histogram that match the
// extra matchers, grouped by the given labels.
func quantileOf(q string, histogram string, matchers []string, by ...string) string {
	return fmt.Sprintf("histogram_quantile(%s, sum by (%s) (%s))",
		q, strings.Join(append(by, "le"), ", "), rate(histogram+"_bucket", matchers...))
}
