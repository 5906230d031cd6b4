package settingsrc

import (
	"maps"
	"slices"
	"testing"
)

func TestRead(t *testing.T) {
	// testdata/mod/cmd/bin embeds, holds in a named field, declares and
	// builds settings structs of its module's conf package; a pointer field
	// and an unreferenced type stay out, as they do for internal/config.
	// unused is a module import without source whose selector is no type
	// reference (following it would fail to parse a missing directory).
	tests := []struct {
		name     string
		literals bool
		want     []string
	}{
		{"tags and followed types", false, []string{"POSTLINE_COMPOSITE", "POSTLINE_DECLARED", "POSTLINE_INNER", "POSTLINE_NAMED", "POSTLINE_OWN", "POSTLINE_SHARED"}},
		{"with whole literals", true, []string{"POSTLINE_COMPOSITE", "POSTLINE_DECLARED", "POSTLINE_INNER", "POSTLINE_LITERAL", "POSTLINE_NAMED", "POSTLINE_OWN", "POSTLINE_SHARED"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read("testdata/mod", "cmd/bin", tt.literals)
			if err != nil {
				t.Fatal(err)
			}
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, tt.want) {
				t.Errorf("Read = %v, want %v", keys, tt.want)
			}
		})
	}
}

func TestReadFailsWithoutSettings(t *testing.T) {
	if _, err := Read("testdata/mod", "conf", false); err != nil {
		t.Errorf("conf declares settings, got %v", err)
	}
	if _, err := Read("testdata/mod", "missing", false); err == nil {
		t.Error("a directory without Go source: want an error")
	}
}

// TestReadFindsTheBinariesKafkaSettings pins the reason this package exists:
// the Kafka settings of internal/config reach every binary.
func TestReadFindsTheBinariesKafkaSettings(t *testing.T) {
	for _, tt := range []struct {
		dir      string
		literals bool
	}{{"cmd/worker", false}, {"cmd/retry-scheduler", false}, {"cmd/postctl", true}} {
		got, err := Read("../../..", tt.dir, tt.literals)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"POSTLINE_KAFKA_BROKERS", "POSTLINE_KAFKA_TLS", "POSTLINE_KAFKA_SASL_PASSWORD_FILE"} {
			if !got[want] {
				t.Errorf("%s: %s not found", tt.dir, want)
			}
		}
	}
}
