package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// alertRule is one alerting rule of deploy/prometheus/alerts.yml.
type alertRule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

// readAlertRules returns the alerting rules of the rule file at path.
func readAlertRules(path string) ([]alertRule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	var rules []alertRule
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				rules = append(rules, r)
			}
		}
	}
	return rules, nil
}

// alertOperands returns the metric-bearing operands of an alert expression:
// the queries that must return data in a healthy system although the alert
// itself (the condition) returns nothing. It strips what turns data into a
// condition: a comparison with a threshold (keeping the non-scalar sides),
// and/or/unless (keeping both sides), absent() and absent_over_time()
// (keeping what they test), label_replace() and label_join() (keeping what
// they relabel). Each subquery's resolution is set to subqueryStep, so that
// an expression over [10m:1m] has points after a test of a minute, and
// offsets are dropped: a comparison with a day ago has no data in a test
// of minutes, while the series it reads are what the check is about.
func alertOperands(expr string, subqueryStep time.Duration) ([]string, error) {
	root, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	var operands []string
	var walk func(e parser.Expr)
	walk = func(e parser.Expr) {
		switch n := e.(type) {
		case *parser.ParenExpr:
			walk(n.Expr)
			return
		case *parser.BinaryExpr:
			if n.Op.IsSetOperator() || (n.Op.IsComparisonOperator() && !n.ReturnBool) {
				for _, side := range []parser.Expr{n.LHS, n.RHS} {
					if side.Type() != parser.ValueTypeScalar {
						walk(side)
					}
				}
				return
			}
		case *parser.Call:
			switch n.Func.Name {
			case "absent", "absent_over_time", "label_replace", "label_join":
				walk(n.Args[0])
				return
			}
		}
		parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
			switch n := node.(type) {
			case *parser.SubqueryExpr:
				n.Step = subqueryStep
				n.OriginalOffset, n.OriginalOffsetExpr, n.Offset = 0, nil, 0
			case *parser.VectorSelector:
				n.OriginalOffset, n.OriginalOffsetExpr, n.Offset = 0, nil, 0
			}
			return nil
		})
		if s := e.String(); !slices.Contains(operands, s) {
			operands = append(operands, s)
		}
	}
	walk(root)
	return operands, nil
}

// metricNames returns the metric names expr selects, histogram series
// (_bucket, _sum, _count) named by their family.
func metricNames(expr string) ([]string, error) {
	root, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	var names []string
	parser.Inspect(root, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		return nil
	})
	return names, nil
}

func TestAlertOperands(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want []string
	}{
		{
			name: "threshold",
			expr: `sum by (reason) (rate(postline_deadletter_records_total[10m])) * 60 > 3`,
			want: []string{`sum by (reason) (rate(postline_deadletter_records_total[10m])) * 60`},
		},
		{
			name: "threshold on the left",
			expr: `0.9 > avg(postline_adaptive_success_ratio)`,
			want: []string{`avg(postline_adaptive_success_ratio)`},
		},
		{
			name: "and of two conditions, subquery step shortened",
			expr: "sum(postline_consumer_group_lag) > 10000\nand\nderiv(sum(postline_consumer_group_lag)[10m:1m]) > 0",
			want: []string{`sum(postline_consumer_group_lag)`, `deriv(sum(postline_consumer_group_lag)[10m:1s])`},
		},
		{
			name: "or of conditions in parentheses",
			expr: `(sum(a) / sum(rate(b[10m]))) > 900 or histogram_quantile(0.99, sum by (le) (rate(c_bucket[10m]))) > 900`,
			want: []string{`sum(a) / sum(rate(b[10m]))`, `histogram_quantile(0.99, sum by (le) (rate(c_bucket[10m])))`},
		},
		{
			name: "absent inside label_replace",
			expr: `label_replace(absent(up{job="w"} == 1), "job", "w", "", "") or label_replace(absent(up{job="s"} == 1), "job", "s", "", "")`,
			want: []string{`up{job="w"}`, `up{job="s"}`},
		},
		{
			name: "bool comparison is data",
			expr: `up == bool 1`,
			want: []string{`up == bool 1`},
		},
		{
			name: "offset dropped",
			expr: `sum(rate(a[1h])) / sum(rate(b[1h] offset 24h)) > 0.05 and sum(increase(a[1h])) >= 20`,
			want: []string{`sum(rate(a[1h])) / sum(rate(b[1h]))`, `sum(increase(a[1h]))`},
		},
		{
			name: "same operand twice",
			expr: `sum(x) > 1 and sum(x) < 5`,
			want: []string{`sum(x)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := alertOperands(tt.expr, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("alertOperands(%q) = %q, want %q", tt.expr, got, tt.want)
			}
		})
	}
}

func TestMetricNames(t *testing.T) {
	got, err := metricNames(`histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket[5m]))) / sum(b_total) + on() count(up == 1) + sum(b_total)`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_seconds", "b_total", "up"}; !slices.Equal(got, want) {
		t.Errorf("metricNames = %q, want %q", got, want)
	}
}
