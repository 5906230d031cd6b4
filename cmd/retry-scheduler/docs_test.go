package main

import (
	"os"
	"strings"
	"testing"

	"github.com/postline/postline/internal/config"
)

// The scheduler's table in docs/configuration.md is the operators'
// reference: every setting must have its row there, under
// "## retry-scheduler" (a row that only the worker's table holds does not
// count).
func TestConfigurationDocListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## retry-scheduler\n")
	if !ok {
		t.Fatal(`docs/configuration.md has no "## retry-scheduler" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	list, err := config.Settings(&settings{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if !strings.Contains(section, "\n| `"+s.Env+"` | `--"+s.Flag+"` |") {
			t.Errorf(`docs/configuration.md has no row for %s (--%s) in its "## retry-scheduler" table`, s.Env, s.Flag)
		}
	}
}
