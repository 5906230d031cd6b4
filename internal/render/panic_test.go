package render

import (
	"errors"
	"strings"
	"testing"
)

// TestPanicInFunction checks that a template function that panics makes
// the render fail with a typed error that does not carry the panic value.
func TestPanicInFunction(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	extra := map[string]any{
		"boom": func(s string) (string, error) { panic("boom " + s) },
		"boomErr": func(s string) (string, error) {
			var m map[string]int
			m[s] = 1 // a runtime error, not a value passed to panic
			return s, nil
		},
	}
	for _, part := range []string{"subject", "text", "html"} {
		for _, fn := range []string{"boom", "boomErr"} {
			t.Run(part+"/"+fn, func(t *testing.T) {
				t.Parallel()
				v := Version{Template: "t", Number: 2, Subject: "s", Text: "t"}
				src := "{{" + fn + " .x}}"
				switch part {
				case "subject":
					v.Subject = src
				case "text":
					v.Text = src
				case "html":
					v.HTML = src
				}
				c, err := compile(v, nil, extra)
				if err != nil {
					t.Fatalf("compile: %v", err)
				}
				_, err = c.Render("", map[string]any{"x": secret})
				var e *Error
				if !errors.As(err, &e) || e.Reason != ReasonPanic || e.Stage != StageExecute || e.Part != part {
					t.Fatalf("Render error = %#v, want a panic error of the %s", err, part)
				}
				if !errors.Is(err, ErrPanic) {
					t.Errorf("error %v is not ErrPanic", err)
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error text carries the data value: %v", err)
				}
			})
		}
	}
}

func TestFunctionsDoNotPanic(t *testing.T) {
	t.Parallel()
	odd := []any{nil, "", "x", 0, -1, 1e300, []any{nil}, map[string]any{}, (*int)(nil), struct{}{}}
	for _, a := range odd {
		if _, err := fnDefault(a, a); err != nil {
			t.Errorf("default(%v): %v", a, err)
		}
		_, _ = fnJoin(",", a)
		_, _ = fnDate("2006", a)
		_, _ = fnPrintf("%v %d %s", a, a, a)
	}
	for _, n := range []int{-5, 0, 1, 2, 100} {
		for _, s := range []string{"", "é", "héllo", "\xff\xfe"} {
			got, err := fnTruncate(n, s)
			if err != nil {
				t.Fatal(err)
			}
			if len([]rune(got)) > max(n, 0) {
				t.Errorf("truncate(%d, %q) = %q, longer than %d runes", n, s, got, n)
			}
		}
	}
}
