package main

import (
	"os"
	"strings"
	"testing"

	"github.com/postline/postline/internal/config"
)

// The README's settings table of the scheduler is the operators' reference:
// every setting must be in it.
func TestREADMEDocumentsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	list, err := config.Settings(&settings{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if !strings.Contains(string(readme), "| `"+s.Env+"` | `--"+s.Flag+"` |") {
			t.Errorf("README.md has no configuration row for %s (--%s)", s.Env, s.Flag)
		}
	}
}
