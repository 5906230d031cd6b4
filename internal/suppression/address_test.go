package suppression

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  string
	}{
		{in: "ada@example.com", want: "ada@example.com"},
		{in: "  Ada@Example.COM \r\n", want: "ada@example.com"},
		{in: "Ada Lovelace <ADA@example.com>", want: "ada@example.com"},
		{in: `"Lovelace, Ada" <ada@example.com>`, want: "ada@example.com"},
		{in: "<ada@example.com>", want: "ada@example.com"},
		{in: "ada@example.com (Ada)", want: "ada@example.com"},
		{in: "=?utf-8?q?Ad=C3=A1?= <ada@example.com>", want: "ada@example.com"},
		{in: "first.last+tag@sub.example.com", want: "first.last+tag@sub.example.com"},
		{in: `"John Doe"@Example.com`, want: `"john doe"@example.com`},
		{in: `"john doe"@example.com`, want: `"john doe"@example.com`},
		{in: `Q <">"@X.org>`, want: `">"@x.org`},
		{in: "ÄDA@BÜCHER.example", want: "äda@bücher.example"},
		{in: "ada@[192.0.2.1]", want: "ada@[192.0.2.1]"},
		{in: "", wantErr: "empty"},
		{in: "   ", wantErr: "empty"},
		{in: "ada", wantErr: "address"},
		{in: "ada@", wantErr: "address"},
		{in: "@example.com", wantErr: "address"},
		{in: "a@b.c, d@e.f", wantErr: "address"},
		{in: "Ada <ada@example.com", wantErr: "address"},
		{in: "ada@exa mple.com", wantErr: "address"},
		{in: "\xff@example.com", wantErr: "UTF-8"},
		{in: strings.Repeat("a", 64) + "@" + strings.Repeat("b", 200) + ".com", wantErr: "at most 254"},
		{in: strings.Repeat(" ", 10) + strings.Repeat("x", MaxInputBytes+1), wantErr: "at most 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Normalize(tt.in)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Normalize(%q) = %q, %v; want an ErrInvalid error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Normalize(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

// FuzzNormalize checks that a normalized address is a fixed point of
// Normalize, holds no uppercase, is bounded in size and in allocations, and is found in the input's
// lowercased addr-spec (Normalize invents nothing but quoting).
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"ada@example.com", "Ada <ADA@Example.com>", `"John Doe"@x.org`, "a@[1.2.3.4]",
		"=?utf-8?q?x?= <Q@W.E>", "a(b)@c", "ÄDA@BÜCHER.example", "Group: a@b;", `"a\"b"@c`, "a..b@c", "K@x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		// Work is bounded by the input: a few allocations, growing at most
		// linearly (MaxInputBytes caps what is parsed at all).
		if n := testing.AllocsPerRun(1, func() { _, _ = Normalize(in) }); n > 40+float64(min(len(in), MaxInputBytes))/4 {
			t.Fatalf("Normalize(%q) made %v allocations", in, n)
		}
		out, err := Normalize(in)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Normalize(%q): error %v does not wrap ErrInvalid", in, err)
			}
			return
		}
		if out == "" || len(out) > MaxAddressBytes || !utf8.ValidString(out) {
			t.Fatalf("Normalize(%q) = %q: empty, too long or not UTF-8", in, out)
		}
		if strings.ToLower(out) != out {
			t.Fatalf("Normalize(%q) = %q holds uppercase", in, out)
		}
		// Angle brackets only inside a quoted local part, never a line break.
		if at := strings.LastIndexByte(out, '@'); at <= 0 || strings.ContainsAny(out[at:], "<>") ||
			(strings.ContainsAny(out[:at], "<>") && out[0] != '"') || strings.ContainsAny(out, "\r\n") {
			t.Fatalf("Normalize(%q) = %q holds brackets outside quotes, or a line break", in, out)
		}
		again, err := Normalize(out)
		if err != nil || again != out {
			t.Fatalf("Normalize(Normalize(%q)) = %q, %v; want %q", in, again, err, out)
		}
	})
}
