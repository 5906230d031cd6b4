package deploy

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// dockerStage is one FROM ... of a Dockerfile with its instructions.
type dockerStage struct {
	base, name   string
	instructions []*parser.Node
}

func parseDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("parse Dockerfile: %v", err)
	}
	var stages []dockerStage
	for _, n := range res.AST.Children {
		args := nodeArgs(n)
		if instruction(n) == "from" {
			st := dockerStage{base: args[0]}
			if len(args) == 3 && strings.EqualFold(args[1], "as") {
				st.name = args[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			continue // ARG before the first FROM
		}
		last := &stages[len(stages)-1]
		last.instructions = append(last.instructions, n)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a final stage", len(stages))
	}
	return stages
}

// instruction returns the lower-case keyword of n; the parser keeps the
// Dockerfile's spelling.
func instruction(n *parser.Node) string {
	return strings.ToLower(n.Value)
}

// nodeArgs returns the words of an instruction (JSON or shell form).
func nodeArgs(n *parser.Node) []string {
	var out []string
	for a := n.Next; a != nil; a = a.Next {
		out = append(out, a.Value)
	}
	return out
}

func flagValue(n *parser.Node, name string) string {
	for _, f := range n.Flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func TestDockerfileFinalStageIsNonRootWithoutShell(t *testing.T) {
	stages := parseDockerfile(t)
	final := stages[len(stages)-1]
	user := ""
	for _, n := range final.instructions {
		switch instruction(n) {
		case "user":
			user = nodeArgs(n)[0]
		case "run":
			t.Errorf("Dockerfile:%d: RUN in the final stage: it has no shell", n.StartLine)
		}
	}
	if user == "" {
		// distroless' :nonroot images set USER 65532 themselves.
		if !strings.HasSuffix(final.base, ":nonroot") {
			t.Errorf("Dockerfile: final stage (FROM %s) sets no USER and its base is not a :nonroot image", final.base)
		}
		return
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "0" || uid == "root" || uid == "" {
		t.Errorf("Dockerfile: final stage runs as %q, want a non-root user", user)
	}
	if strings.Trim(uid, "0123456789") != "" {
		t.Errorf("Dockerfile: USER %q: use a numeric uid so runAsNonRoot can verify it", user)
	}
}

func TestDockerfileBuildsStaticBinaries(t *testing.T) {
	stages := parseDockerfile(t)
	final := stages[len(stages)-1]
	var copied []string // stages the final stage copies from
	for _, n := range final.instructions {
		if instruction(n) == "copy" {
			copied = append(copied, flagValue(n, "from"))
		}
	}
	var build *dockerStage
	for i := range stages[:len(stages)-1] {
		if stages[i].name != "" && slices.Contains(copied, stages[i].name) {
			build = &stages[i]
		}
	}
	if build == nil {
		t.Fatalf("Dockerfile: the final stage copies from no named build stage (COPY --from: %q)", copied)
	}
	if !strings.HasPrefix(build.base, "golang:") {
		t.Errorf("Dockerfile: build stage FROM %s, want golang", build.base)
	}
	cgoOff := false
	var goBuild string
	for _, n := range build.instructions {
		switch instruction(n) {
		case "env":
			// ENV key value pairs come as key, value, "=" triples.
			args := nodeArgs(n)
			for i := 0; i+1 < len(args); i += 3 {
				if args[i] == "CGO_ENABLED" {
					cgoOff = args[i+1] == "0"
				}
			}
		case "run":
			cmd := strings.Join(nodeArgs(n), " ")
			if strings.Contains(cmd, "go build") {
				goBuild = cmd
				if strings.Contains(cmd, "CGO_ENABLED=0") {
					cgoOff = true
				}
			}
		}
	}
	if !cgoOff {
		t.Error("Dockerfile: the build stage does not set CGO_ENABLED=0 (the final stage has no libc)")
	}
	if goBuild == "" {
		t.Fatal("Dockerfile: no RUN go build in the build stage")
	}
	for _, want := range []string{"-trimpath", `-ldflags "-s -w"`} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("Dockerfile: go build lacks %s: %s", want, goBuild)
		}
	}
	for _, b := range postlineBinaries {
		if !strings.Contains(goBuild, "./cmd/"+b) {
			t.Errorf("Dockerfile: go build does not build ./cmd/%s: %s", b, goBuild)
		}
	}
}

// TestDockerignoreKeepsTheSources checks that .dockerignore, which keeps the
// build context small, leaves every file the binaries compile or embed.
func TestDockerignoreKeepsTheSources(t *testing.T) {
	patterns := readDockerignore(t)
	args := []string{"list", "-deps", "-json=Dir,GoFiles,EmbedFiles,Module"}
	for _, b := range postlineBinaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var pkg struct {
			Dir        string
			GoFiles    []string
			EmbedFiles []string
			Module     *struct{ Main bool }
		}
		if err := dec.Decode(&pkg); err != nil {
			t.Fatal(err)
		}
		if pkg.Module == nil || !pkg.Module.Main {
			continue
		}
		rel, err := filepath.Rel(root, pkg.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(pkg.GoFiles, pkg.EmbedFiles...) {
			p := filepath.ToSlash(filepath.Join(rel, f))
			checked++
			if pattern := dockerignored(patterns, p); pattern != "" {
				t.Errorf(".dockerignore: %q leaves %s out of the build context", pattern, p)
			}
		}
	}
	if checked == 0 {
		t.Fatal("go list found no source file of the binaries")
	}
	for _, p := range []string{"go.mod", "go.sum"} {
		if pattern := dockerignored(patterns, p); pattern != "" {
			t.Errorf(".dockerignore: %q leaves %s out of the build context", pattern, p)
		}
	}
}

func readDockerignore(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var patterns []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf(".dockerignore: exception %q: this test's matcher does not handle exceptions", line)
		}
		patterns = append(patterns, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return patterns
}

// dockerignored returns the pattern that excludes file (slash-separated,
// relative to the context), or "". A pattern excludes a path when it matches
// the path or one of its parent folders; a leading **/ matches any depth.
func dockerignored(patterns []string, file string) string {
	parts := strings.Split(file, "/")
	for _, pattern := range patterns {
		anyDepth := strings.HasPrefix(pattern, "**/")
		glob := strings.TrimPrefix(pattern, "**/")
		for i := 1; i <= len(parts); i++ {
			candidates := []string{strings.Join(parts[:i], "/")}
			if anyDepth {
				for j := 1; j < i; j++ {
					candidates = append(candidates, strings.Join(parts[j:i], "/"))
				}
			}
			for _, c := range candidates {
				if ok, _ := path.Match(glob, c); ok {
					return pattern
				}
			}
		}
	}
	return ""
}

func TestDockerignored(t *testing.T) {
	patterns := []string{".git", "bin", "deploy", "**/*.test", "**/*.md", "docs/*.txt"}
	tests := []struct {
		file, want string
	}{
		{"go.mod", ""},
		{"cmd/worker/main.go", ""},
		{".git/config", ".git"},
		{"bin/worker", "bin"},
		{"deploy/grafana/dashboards.go", "deploy"},
		{"cmd/deploy/main.go", ""},
		{"job.test", "**/*.test"},
		{"internal/sender/sender.test", "**/*.test"},
		{"job/schema/README.md", "**/*.md"},
		{"docs/a.txt", "docs/*.txt"},
		{"docs/sub/a.txt", ""},
	}
	for _, tt := range tests {
		if got := dockerignored(patterns, tt.file); got != tt.want {
			t.Errorf("dockerignored(%q) = %q, want %q", tt.file, got, tt.want)
		}
	}
}
