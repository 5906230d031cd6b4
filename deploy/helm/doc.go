// Package helm owns the tests of the Helm chart in postline/ (the chart itself is not Go). They
// lint the chart, render it with several value sets and decode every manifest strictly into its
// Kubernetes API type, check the rendered settings against the binaries' own settings, and keep
// the chart's copies of the alert rules and dashboards equal to deploy/prometheus and
// deploy/grafana. Helm comes from scripts/tools.sh; the tests skip under -short.
package helm
