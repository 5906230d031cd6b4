package configerr_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/postline/postline/internal/configerr"
)

func TestFields(t *testing.T) {
	inner := configerr.Errorf("Delays", "Delays[0] = 0s: must be positive")
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{"none", errors.New("plain"), nil},
		{"one, wrapped", fmt.Errorf("webhook: %w", configerr.Errorf("Topic", "Topic required")), []string{"Topic"}},
		{"joined, in order", errors.Join(configerr.Errorf("A", "a"), errors.New("b"), configerr.Errorf("C", "c")), []string{"A", "C"}},
		{"nested config", configerr.Within("Schedule", func(err error) error { return fmt.Errorf("webhook config: Schedule.%w", err) }, inner),
			[]string{"Schedule.Delays", "Delays"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, fe := range configerr.Fields(tt.err) {
				got = append(got, fe.Field)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Fields = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMessageIsTheComponents(t *testing.T) {
	cause := errors.New("no such file")
	err := configerr.Errorf("TLS.CAFile", "kafka: TLS.CAFile: %w", cause)
	if got, want := err.Error(), "kafka: TLS.CAFile: no such file"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, cause) {
		t.Error("the cause is not wrapped")
	}
	within := configerr.Within("Schedule", func(err error) error { return fmt.Errorf("webhook config: Schedule.%w", err) }, errors.New("Jitter = 2: bad"))
	if got, want := within.Error(), "webhook config: Schedule.Jitter = 2: bad"; got != want {
		t.Errorf("Within of a plain error = %q, want %q", got, want)
	}
	if configerr.Within("Schedule", nil, nil) != nil {
		t.Error("Within(nil) is not nil")
	}
}
