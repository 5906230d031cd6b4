package main

import (
	"os"
	"testing"

	"github.com/postline/postline/internal/config"
)

// The receiver's table in docs/configuration.md is the operators'
// reference: every setting must have its row under "## bounce-receiver".
func TestConfigurationDocListsEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	missing, err := config.Undocumented(&settings{}, doc, "bounce-receiver")
	if err != nil {
		t.Fatalf("docs/configuration.md: %v", err)
	}
	for _, m := range missing {
		t.Errorf(`docs/configuration.md has no row for %s in its "## bounce-receiver" table`, m)
	}
}
