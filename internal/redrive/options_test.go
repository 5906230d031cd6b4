package redrive

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name      string
		o         Options
		wantField string // "" = valid
	}{
		{"default rate", Options{Rate: DefaultRate}, ""},
		{"the maximum", Options{Rate: MaxRate, Note: strings.Repeat("n", MaxNoteBytes), Actor: strings.Repeat("a", MaxActorBytes)}, ""},
		{"a slow rate", Options{Rate: 0.5, Note: "relay fixed, INC-42 ✓", Actor: "postctl:ada"}, ""},
		{"no rate", Options{}, FieldRate},
		{"negative rate", Options{Rate: -1}, FieldRate},
		{"NaN rate", Options{Rate: math.NaN()}, FieldRate},
		{"infinite rate", Options{Rate: math.Inf(1)}, FieldRate},
		{"above the maximum", Options{Rate: MaxRate + 1}, FieldRate},
		{"long note", Options{Rate: 1, Note: strings.Repeat("n", MaxNoteBytes+1)}, FieldNote},
		{"note on two lines", Options{Rate: 1, Note: "a\nb"}, FieldNote},
		{"note not UTF-8", Options{Rate: 1, Note: "\xff"}, FieldNote},
		{"long actor", Options{Rate: 1, Actor: strings.Repeat("a", MaxActorBytes+1)}, FieldActor},
		{"actor with a tab", Options{Rate: 1, Actor: "a\tb"}, FieldActor},
	}
	for _, tt := range tests {
		err := tt.o.Validate(func(f string) string { return "--" + f })
		var fe *FieldError
		switch {
		case tt.wantField == "" && err != nil:
			t.Errorf("%s: %v, want valid", tt.name, err)
		case tt.wantField != "" && (!errors.As(err, &fe) || fe.Field != tt.wantField || !strings.HasPrefix(err.Error(), "--"+tt.wantField+" ")):
			t.Errorf("%s: %v, want an error naming --%s", tt.name, err, tt.wantField)
		}
	}
}

func TestBurst(t *testing.T) {
	tests := []struct {
		rate  float64
		batch int
		want  int
	}{
		{0.5, 500, 1}, {9, 500, 1}, {100, 500, 10}, {500, 500, 50}, {MaxRate, 500, 500}, {MaxRate, 20, 20},
	}
	for _, tt := range tests {
		if got := burst(tt.rate, tt.batch); got != tt.want {
			t.Errorf("burst(%g, %d) = %d, want %d", tt.rate, tt.batch, got, tt.want)
		}
	}
}
