package dkim_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/postline/postline/internal/dkim"
)

func TestParseKeys(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []dkim.KeyConfig
		wantErr []string // substrings of the error; nil: no error
	}{
		{name: "empty", in: "", want: []dkim.KeyConfig{}},
		{name: "blank", in: "  ", want: []dkim.KeyConfig{}},
		{
			name: "two keys",
			in:   "example.com=s1:/etc/postline/dkim/example.com.pem,other.org=s2:/path.pem",
			want: []dkim.KeyConfig{
				{Domain: "example.com", Selector: "s1", KeyFile: "/etc/postline/dkim/example.com.pem"},
				{Domain: "other.org", Selector: "s2", KeyFile: "/path.pem"},
			},
		},
		{
			name: "spaces, upper case and a trailing dot",
			in:   " Example.COM. = s1 : /k.pem , mail.other.org=2026-01.s:/keys/a:b=c.pem ",
			want: []dkim.KeyConfig{
				{Domain: "example.com", Selector: "s1", KeyFile: "/k.pem"},
				{Domain: "mail.other.org", Selector: "2026-01.s", KeyFile: "/keys/a:b=c.pem"},
			},
		},
		{name: "no equals", in: "example.com:s1:/k.pem", wantErr: []string{"entry 1", "domain=selector:keyfile"}},
		{name: "no colon", in: "example.com=s1", wantErr: []string{"entry 1", `"example.com"`, "selector:keyfile"}},
		{name: "empty entry", in: "example.com=s1:/k.pem,", wantErr: []string{"entry 2"}},
		{name: "bad domain", in: "exa mple.com=s1:/k.pem", wantErr: []string{`"exa mple.com"`, "not a domain"}},
		{name: "hyphen label", in: "-a.com=s1:/k.pem", wantErr: []string{`"-a.com"`}},
		{name: "bad selector", in: "example.com=s_1:/k.pem", wantErr: []string{"example.com", `"s_1"`}},
		{name: "empty selector", in: "example.com=:/k.pem", wantErr: []string{"example.com", "Selector"}},
		{name: "no file", in: "example.com=s1:", wantErr: []string{"example.com", "KeyFile is required"}},
		{name: "duplicate domain", in: "example.com=s1:/a.pem,EXAMPLE.com=s2:/b.pem", wantErr: []string{"Keys[1]", "more than one key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := dkim.ParseKeys(tt.in)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("ParseKeys(%q) = %+v, want an error", tt.in, cfg)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKeys(%q): %v", tt.in, err)
			}
			if got := cfg.Keys; !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("ParseKeys(%q).Keys = %+v, want %+v", tt.in, got, tt.want)
			}
			if cfg.NowFunc == nil {
				t.Error("NowFunc is nil after ParseKeys")
			}
			again, err := dkim.ParseKeys(dkim.FormatKeys(cfg.Keys))
			if err != nil || !reflect.DeepEqual(again.Keys, cfg.Keys) && len(cfg.Keys) > 0 {
				t.Errorf("round trip through FormatKeys: %+v, %v; want %+v", again.Keys, err, cfg.Keys)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", 64) + ".com"
	tests := []struct {
		name    string
		keys    []dkim.KeyConfig
		wantErr string
	}{
		{"ok", []dkim.KeyConfig{{Domain: "example.com", Selector: "s1", KeyFile: "/k"}}, ""},
		{"label too long", []dkim.KeyConfig{{Domain: long, Selector: "s1", KeyFile: "/k"}}, long},
		{"newline in file", []dkim.KeyConfig{{Domain: "example.com", Selector: "s1", KeyFile: "/k\n"}}, "KeyFile"},
		{"no domain", []dkim.KeyConfig{{Selector: "s1", KeyFile: "/k"}}, "Domain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := dkim.Config{Keys: tt.keys}.WithDefaults().Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
