package main

import (
	"os"
	"testing"

	"github.com/postline/postline/internal/config"
)

// The console's table in docs/configuration.md is the operators'
// reference: every setting must have its row under "## console".
func TestConfigurationDocListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	missing, err := config.Undocumented(&settings{}, doc, "console")
	if err != nil {
		t.Fatalf("docs/configuration.md: %v", err)
	}
	for _, m := range missing {
		t.Errorf(`docs/configuration.md has no row for %s in its "## console" table`, m)
	}
}
