package dkim_test

import (
	"reflect"
	"testing"

	"github.com/postline/postline/internal/dkim"
)

// FuzzParseKeys checks that whatever ParseKeys accepts validates, formats
// back to a setting that parses to the same keys, and never yields more
// keys than the input has entries.
func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{
		"",
		"example.com=s1:/etc/postline/dkim/example.com.pem,other.org=s2:/path.pem",
		" Example.COM. = s1 : /k.pem ",
		"a.b=c:d:e=f",
		"example.com=s1",
		"=:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := dkim.ParseKeys(s)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseKeys(%q) returned a config that does not validate: %v", s, err)
		}
		entries := 1
		for i := 0; i < len(s); i++ {
			if s[i] == ',' {
				entries++
			}
		}
		if len(cfg.Keys) > entries {
			t.Fatalf("ParseKeys(%q) returned %d keys from %d entries", s, len(cfg.Keys), entries)
		}
		again, err := dkim.ParseKeys(dkim.FormatKeys(cfg.Keys))
		if err != nil {
			t.Fatalf("FormatKeys(ParseKeys(%q)) = %q does not parse: %v", s, dkim.FormatKeys(cfg.Keys), err)
		}
		if len(cfg.Keys) > 0 && !reflect.DeepEqual(again.Keys, cfg.Keys) {
			t.Fatalf("round trip of %q: %+v, want %+v", s, again.Keys, cfg.Keys)
		}
	})
}
