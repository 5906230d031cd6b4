package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// designPage holds the package map: every package of the module, one line
// each, grouped by the stage of the flow it serves.
const designPage = "docs/design.md"

// packageMapLine matches a line of the map: "- `internal/consumer`: ...".
var packageMapLine = regexp.MustCompile("^- `([a-z0-9_./-]+)`:")

// mappedPackages returns the packages the "## Package map" section of a
// design page lists, relative to the module root, in order.
func mappedPackages(text string) []string {
	_, section, ok := strings.Cut(text, "\n## Package map\n")
	if !ok {
		return nil
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var pkgs []string
	for line := range strings.Lines(section) {
		if m := packageMapLine.FindStringSubmatch(line); m != nil {
			pkgs = append(pkgs, m[1])
		}
	}
	return pkgs
}

// modulePackages returns every package of the module, as `go list ./...`
// lists them, relative to the module root ("." for the root package).
func modulePackages(t *testing.T) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("find the go command for go list: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "list", "-f", "{{.ImportPath}} {{.Module.Path}}", "./...")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var pkgs []string
	for line := range strings.Lines(string(out)) {
		importPath, module, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			t.Fatalf("go list ./...: unexpected line %q", line)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
		if rel == "" {
			rel = "."
		}
		pkgs = append(pkgs, rel)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list ./... listed no package")
	}
	return pkgs
}

// TestDesignMapsEveryPackage keeps the package map of docs/design.md equal
// to the module: a package added, moved or removed must get, change or lose
// its line, so that the map a newcomer reads matches the territory.
func TestDesignMapsEveryPackage(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot, designPage))
	if err != nil {
		t.Fatal(err)
	}
	mapped := mappedPackages(string(text))
	if len(mapped) == 0 {
		t.Fatalf("%s has no \"## Package map\" section with lines like \"- `internal/consumer`: ...\"", designPage)
	}
	seen := map[string]bool{}
	for _, p := range mapped {
		if seen[p] {
			t.Errorf("%s maps %s twice", designPage, p)
		}
		seen[p] = true
	}
	pkgs := modulePackages(t)
	for _, p := range pkgs {
		if !seen[p] {
			t.Errorf("package %s is missing from the package map of %s: add a line saying what it owns, under the stage it serves", p, designPage)
		}
	}
	for _, p := range mapped {
		if !slices.Contains(pkgs, p) {
			t.Errorf("%s maps %s, which go list ./... does not list: remove or rename its line", designPage, p)
		}
	}
}

// TestMappedPackagesReadsOnlyTheMap proves the parser on a small page: lines
// outside the map's section and lines that do not start with a backticked
// path are not packages.
func TestMappedPackagesReadsOnlyTheMap(t *testing.T) {
	page := strings.Join([]string{
		"# Design",
		"- `outside/before`: not in the map",
		"## Package map",
		"**Intake**",
		"- `job`: the job document.",
		"- `internal/consumer`: reading Kafka.",
		"- a line that names `internal/other` later",
		"## Architecture",
		"- `outside/after`: not in the map",
	}, "\n")
	got := mappedPackages(page)
	if want := []string{"job", "internal/consumer"}; !slices.Equal(got, want) {
		t.Errorf("mappedPackages = %q, want %q", got, want)
	}
	if got := mappedPackages("# Design\n- `job`: no map section\n"); got != nil {
		t.Errorf("mappedPackages without a map = %q, want none", got)
	}
}
