package grafana

import (
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Query is one PromQL query of one dashboard panel.
type Query struct {
	Dashboard string // dashboard title
	Panel     string // panel title, unique across the dashboards
	RefID     string // the query's letter within the panel: A, B, ...
	Legend    string
	// Expr is the query as Grafana sends it, with the dashboard variables
	// $job and $instance and Grafana's $__rate_interval still in it.
	Expr string
}

// PromQL returns Expr as plain PromQL, the way Grafana runs it with every job
// and instance selected and the given rate interval.
func (q Query) PromQL(rateInterval time.Duration) string {
	return strings.NewReplacer(
		"$__rate_interval", model.Duration(rateInterval).String(),
		"$"+jobVar, allValue,
		"$"+instanceVar, allValue,
	).Replace(q.Expr)
}

// Queries returns every query of every panel of every dashboard.
func Queries() []Query {
	var queries []Query
	for _, d := range dashboardSpecs() {
		for _, row := range d.rows {
			for _, p := range row.panels {
				for i, t := range p.targets {
					queries = append(queries, Query{Dashboard: d.title, Panel: p.title, RefID: refID(i), Legend: t.legend, Expr: t.expr})
				}
			}
		}
	}
	return queries
}

// Panel describes one dashboard panel for people: the README's table of
// panels is rendered from these.
type Panel struct {
	Dashboard   string // dashboard title
	Row         string // row title within the dashboard
	Title       string
	Description string // what the panel means, then "What to do: ..."
	Unit        string // Grafana unit id
}

// Panels returns every panel of every dashboard, in dashboard order.
func Panels() []Panel {
	var panels []Panel
	for _, d := range dashboardSpecs() {
		for _, row := range d.rows {
			for _, p := range row.panels {
				panels = append(panels, Panel{Dashboard: d.title, Row: row.title, Title: p.title, Description: p.description, Unit: p.unit})
			}
		}
	}
	return panels
}
