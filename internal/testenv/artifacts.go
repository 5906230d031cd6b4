package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ArtifactDir returns the directory, made if missing, where t leaves files
// for a person to look at after the run, such as screenshots:
// $POSTLINE_TEST_ARTIFACTS/<test name>, by default <repo>/.artifacts/<test
// name> (git-ignored). A subtest's directory sits inside its parent's. Files
// stay after the test; the next run overwrites those of the same name.
func ArtifactDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv("POSTLINE_TEST_ARTIFACTS")
	if root == "" {
		root = filepath.Join(repoRoot(t), ".artifacts")
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = safeFileName(p)
	}
	dir := filepath.Join(append([]string{root}, parts...)...)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("test artifacts: %v", err)
	}
	return dir
}

// repoRoot is the nearest directory above the working directory (a test's
// package directory) that holds go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("test artifacts: %v", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			t.Fatalf("test artifacts: no go.mod above %s; set POSTLINE_TEST_ARTIFACTS", wd)
		}
	}
}

// safeFileName maps name to one path element of letters, digits, '.', '-'
// and '_' (every other byte becomes '_'), never "", "." or "..".
func safeFileName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	switch s := string(b); s {
	case "", ".", "..":
		return "_" + s
	default:
		return s
	}
}
