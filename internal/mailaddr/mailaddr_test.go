package mailaddr

import (
	"net/mail"
	"strings"
	"testing"
)

func TestBare(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"a@b", true},
		{"first.last+tag@mail.example.com", true},
		{"o'neil{x}~@x-y.example", true},
		{"UPPER@Example.COM", true},
		{"", false},
		{"@example.com", false},
		{"a@", false},
		{"a@b@c", false},
		{"a..b@example.com", false},
		{".a@example.com", false},
		{"a.@example.com", false},
		{"a@example..com", false},
		{"a@.example.com", false},
		{"Name <a@example.com>", false},
		{"<a@example.com>", false},
		{`"quoted"@example.com`, false},
		{"a b@example.com", false},
		{"a@example.com (comment)", false},
		{"a@[127.0.0.1]", false},
		{"ünï@example.com", false},
		{"a@example.com\r\nBcc: x@y", false},
	}
	for _, tt := range tests {
		if got := Bare(tt.in); got != tt.want {
			t.Errorf("Bare(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// FuzzBare holds Bare to its promise: whatever it accepts,
// mail.ParseAddress accepts too and returns unchanged with no name, and
// mail.Address.String writes it lower-cased without quoting (what
// suppression.Normalize relies on).
func FuzzBare(f *testing.F) {
	for _, s := range []string{"a@b", "first.last+tag@mail.example.com", "a..b@x", "N <a@b>", `"q"@x`, "a@b@c", "x@[1.2.3.4]", "a@b!#$%&'*+-/=?^_`{|}~.c", "-@-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !Bare(s) {
			return
		}
		a, err := mail.ParseAddress(s)
		if err != nil {
			t.Fatalf("Bare(%q) but ParseAddress: %v", s, err)
		}
		if a.Name != "" || a.Address != s {
			t.Fatalf("Bare(%q) but ParseAddress = %q <%s>", s, a.Name, a.Address)
		}
		lower := strings.ToLower(s)
		if got := (&mail.Address{Address: lower}).String(); got != "<"+lower+">" {
			t.Fatalf("Bare(%q) but String of its lower case = %q", s, got)
		}
	})
}

func TestSimple(t *testing.T) {
	tests := []struct {
		in         string
		name, addr string
		ok         bool
	}{
		{"a@b", "", "a@b", true},
		{"Jane Doe <jane@example.com>", "Jane Doe", "jane@example.com", true},
		{"Postline Bench <bench@postline.test>", "Postline Bench", "bench@postline.test", true},
		{"J <j@x>", "J", "j@x", true},
		{"<j@x>", "", "", false},
		{" J <j@x>", "", "", false},
		{"J  D <j@x>", "", "", false},
		{"J. Doe <j@x>", "", "", false},
		{`"Doe, Jane" <j@x>`, "", "", false},
		{"=?utf-8?q?J=C3=A9?= <j@x>", "", "", false},
		{"Jürgen <j@x>", "", "", false},
		{"J <j@x> ", "", "", false},
		{"J <a..b@x>", "", "", false},
		{"J <j@x>\r\nBcc: y@z", "", "", false},
	}
	for _, tt := range tests {
		name, addr, ok := Simple(tt.in)
		if name != tt.name || addr != tt.addr || ok != tt.ok {
			t.Errorf("Simple(%q) = %q, %q, %v; want %q, %q, %v", tt.in, name, addr, ok, tt.name, tt.addr, tt.ok)
		}
	}
}

// FuzzSimple holds Simple to its promise: whatever it
// splits, mail.ParseAddress parses into exactly that name and addr-spec.
func FuzzSimple(f *testing.F) {
	for _, s := range []string{"a@b", "Jane Doe <jane@example.com>", "J <j@x>", "=?utf-8?q?x?= <j@x>", "J  D <j@x>", `"Q" <j@x>`, "a!b#c <x@y>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, addr, ok := Simple(s)
		if !ok {
			return
		}
		a, err := mail.ParseAddress(s)
		if err != nil {
			t.Fatalf("Simple(%q) ok but ParseAddress: %v", s, err)
		}
		if a.Name != name || a.Address != addr {
			t.Fatalf("Simple(%q) = %q <%s>, ParseAddress = %q <%s>", s, name, addr, a.Name, a.Address)
		}
	})
}
