package helm_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestChartCopiesMatchSources keeps the chart's copies of the alert rules and dashboards equal to
// their sources: Helm reads only files inside the chart, so the chart carries copies, and a copy
// that drifts would ship rules or panels that the Prometheus tests never checked.
func TestChartCopiesMatchSources(t *testing.T) {
	tests := []struct {
		name      string
		sourceDir string // relative to this package
		copyDir   string
		pattern   string
	}{
		{"alert rules", "../prometheus", "postline/files", "alerts.yml"},
		{"dashboards", "../grafana/dashboards", "postline/files/dashboards", "*.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sources := baseNames(t, tt.sourceDir, tt.pattern)
			if len(sources) == 0 {
				t.Skipf("no %s in deploy/%s yet: nothing to compare the chart's copy with", tt.pattern, filepath.Base(tt.sourceDir))
			}
			copies := baseNames(t, tt.copyDir, tt.pattern)
			fix := "copy them: cp " + filepath.Join("deploy", tt.sourceDir[len("../"):], tt.pattern) + " " + filepath.Join("deploy/helm", tt.copyDir) + "/"
			if !slices.Equal(sources, copies) {
				t.Fatalf("chart has %v in %s, deploy/%s has %v; %s (and remove stale copies)", copies, tt.copyDir, tt.sourceDir[len("../"):], sources, fix)
			}
			for _, name := range sources {
				source := readFile(t, filepath.Join(tt.sourceDir, name))
				copied := readFile(t, filepath.Join(tt.copyDir, name))
				if !bytes.Equal(source, copied) {
					t.Errorf("%s differs from its source in deploy/%s; %s", filepath.Join(tt.copyDir, name), tt.sourceDir[len("../"):], fix)
				}
			}
		})
	}
}

// baseNames lists the files in dir matching pattern, sorted; a missing dir has none.
func baseNames(t *testing.T, dir, pattern string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatalf("glob %s: %v", filepath.Join(dir, pattern), err)
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	slices.Sort(names)
	return names
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
