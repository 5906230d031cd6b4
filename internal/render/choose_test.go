package render_test

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/postline/postline/internal/render"
)

func TestCanaryBucketDefinition(t *testing.T) {
	t.Parallel()
	// The bucket is computed here from its documented definition, so that
	// another tool following the documentation agrees with it.
	for _, id := range []string{"", "<a@example.com>", "a@example.com", "<ünïcode@example.com>"} {
		sum := sha256.Sum256([]byte(id))
		want := int(binary.BigEndian.Uint64(sum[:8]) % 10000)
		if got := render.CanaryBucket(id); got != want || got < 0 || got >= render.CanaryBuckets {
			t.Errorf("CanaryBucket(%q) = %d, want %d", id, got, want)
		}
	}
}

func TestCanaryShare(t *testing.T) {
	t.Parallel()
	const n = 100000
	for _, pct := range []int{0, 1, 5, 10, 33, 50, 90, 99, 100} {
		t.Run(fmt.Sprint(pct), func(t *testing.T) {
			t.Parallel()
			labels := render.Labels{Active: 1, Canary: 2, CanaryPercent: pct, Fallback: 1}
			canary := 0
			for i := range n {
				id := fmt.Sprintf("<%d.%x@mail.example.com>", i, i*7919)
				v, why := render.Choose(id, labels, "")
				switch {
				case v == 2 && why == render.WhyCanary:
					canary++
				case v == 1 && why == render.WhyActive:
				default:
					t.Fatalf("Choose(%q) = %d %q", id, v, why)
				}
				if i%1000 == 0 {
					// A retry of the same mail picks the same version.
					if v2, why2 := render.Choose(id, labels, ""); v2 != v || why2 != why {
						t.Fatalf("Choose(%q) = %d then %d", id, v, v2)
					}
				}
			}
			share := float64(canary) / n * 100
			if math.Abs(share-float64(pct)) > 0.5 {
				t.Errorf("canary share = %.3f%%, want %d%% ± 0.5", share, pct)
			}
			if pct == 0 && canary != 0 || pct == 100 && canary != n {
				t.Errorf("percent %d picked the canary %d times of %d", pct, canary, n)
			}
		})
	}
}

func TestChoose(t *testing.T) {
	t.Parallel()
	full := render.Labels{Active: 3, Canary: 4, CanaryPercent: 100, Fallback: 2}
	tests := []struct {
		name      string
		labels    render.Labels
		requested string
		want      int
		why       string
	}{
		{"canary at 100", full, "", 4, render.WhyCanary},
		{"canary unset", render.Labels{Active: 3, CanaryPercent: 100}, "", 3, render.WhyActive},
		{"percent over 100 clamps", render.Labels{Active: 3, Canary: 4, CanaryPercent: 250}, "", 4, render.WhyCanary},
		{"negative percent clamps", render.Labels{Active: 3, Canary: 4, CanaryPercent: -5}, "", 3, render.WhyActive},
		{"active", full, "active", 3, render.WhyRequestedActive},
		{"canary", full, "canary", 4, render.WhyRequestedCanary},
		{"fallback", full, "fallback", 2, render.WhyRequestedFallback},
		{"number", full, "7", 7, render.WhyRequestedVersion},
		{"number with spaces", full, " 7 ", 7, render.WhyRequestedVersion},
		{"canary label unset", render.Labels{Active: 3}, "canary", 3, render.WhyLabelUnset},
		{"fallback label unset", render.Labels{Active: 3}, "fallback", 3, render.WhyLabelUnset},
		{"bad request", full, "latest", 3, render.WhyBadRequest},
		{"zero version", full, "0", 3, render.WhyBadRequest},
		{"negative version", full, "-2", 3, render.WhyBadRequest},
		{"no labels", render.Labels{}, "", 0, render.WhyNoVersion},
		{"no active for a bad request", render.Labels{}, "x", 0, render.WhyNoVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, why := render.Choose("<id@example.com>", tt.labels, tt.requested)
			if v != tt.want || why != tt.why {
				t.Errorf("Choose = %d %q, want %d %q", v, why, tt.want, tt.why)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		labels    render.Labels
		requested string
		want      []int
	}{
		{"canary then fallback then active", render.Labels{Active: 3, Canary: 4, CanaryPercent: 100, Fallback: 2}, "", []int{4, 2, 3}},
		{"active then fallback", render.Labels{Active: 3, Canary: 4, CanaryPercent: 0, Fallback: 2}, "", []int{3, 2}},
		{"fallback is active", render.Labels{Active: 3, Canary: 4, CanaryPercent: 100, Fallback: 3}, "", []int{4, 3}},
		{"no fallback", render.Labels{Active: 3, Canary: 4, CanaryPercent: 100}, "", []int{4, 3}},
		{"requested fallback", render.Labels{Active: 3, Fallback: 2}, "fallback", []int{2, 3}},
		{"requested version", render.Labels{Active: 3, Fallback: 2}, "9", []int{9, 2, 3}},
		{"only active", render.Labels{Active: 1}, "", []int{1}},
		{"nothing", render.Labels{}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := render.Plan("<id@example.com>", tt.labels, tt.requested); !slices.Equal(got, tt.want) {
				t.Errorf("Plan = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRenderWithFallback(t *testing.T) {
	t.Parallel()
	good := func(n int) render.Version {
		return render.Version{Template: "t", Number: n, Subject: fmt.Sprintf("v%d {{.name}}", n), Text: "hi"}
	}
	versions := map[int]render.Version{
		1: good(1),
		2: good(2),
		3: {Template: "t", Number: 3, Subject: "s", Text: "{{.missing}}"},             // fails at render
		4: {Template: "t", Number: 4, Subject: "s", Text: "{{.unclosed"},              // fails at compile
		5: {Template: "t", Number: 5, Subject: "{{.name}}", Text: "{{upper .count}}"}, // fails at render
	}
	errLoad := errors.New("version store down")
	compiled := func(n int) (*render.Compiled, error) {
		v, ok := versions[n]
		if !ok {
			return nil, errLoad
		}
		return render.Compile(v, nil)
	}
	data := map[string]any{"name": "Ann", "count": 3}
	tests := []struct {
		name     string
		plan     []int
		wantUsed int
		wantSubj string
		wantWhys []string
		wantErrs []bool
		failed   bool
	}{
		{"first renders", []int{1, 2}, 1, "v1 Ann", []string{render.WhyChosen}, []bool{false}, false},
		{"broken canary falls back", []int{3, 2, 1}, 2, "v2 Ann", []string{render.WhyChosen, render.WhyFallback}, []bool{true, false}, false},
		{"uncompilable and unloadable fall back", []int{4, 99, 1}, 1, "v1 Ann", []string{render.WhyChosen, render.WhyFallback, render.WhyFallback}, []bool{true, true, false}, false},
		{"all broken", []int{3, 4, 5}, 0, "", []string{render.WhyChosen, render.WhyFallback, render.WhyFallback}, []bool{true, true, true}, true},
		{"empty plan", nil, 0, "", nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, used, tried, err := render.RenderWithFallback(tt.plan, compiled, "", data)
			if used != tt.wantUsed || r.Subject != tt.wantSubj {
				t.Errorf("used %d subject %q, want %d %q", used, r.Subject, tt.wantUsed, tt.wantSubj)
			}
			if len(tried) != len(tt.wantWhys) {
				t.Fatalf("tried = %+v, want %d attempts", tried, len(tt.wantWhys))
			}
			for i, a := range tried {
				if a.Version != tt.plan[i] || a.Why != tt.wantWhys[i] || (a.Err != nil) != tt.wantErrs[i] {
					t.Errorf("attempt %d = %+v, want version %d why %s failed %v", i, a, tt.plan[i], tt.wantWhys[i], tt.wantErrs[i])
				}
			}
			if !tt.failed {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			var e *render.Error
			if !errors.As(err, &e) || e.Reason != render.ReasonRenderFailed {
				t.Fatalf("err = %v, want a render_failed *Error", err)
			}
			if len(tt.plan) == 0 {
				if !errors.Is(err, render.ErrNoVersion) {
					t.Errorf("err = %v, want ErrNoVersion", err)
				}
				return
			}
			last := tried[len(tried)-1].Err
			if !errors.Is(err, last) || e.Version != tt.plan[len(tt.plan)-1] || e.Template != "t" {
				t.Errorf("err = %v (%+v), want it to wrap the last failure %v", err, e, last)
			}
			if strings.Contains(err.Error(), "Ann") {
				t.Errorf("error text carries a data value: %v", err)
			}
		})
	}
}
