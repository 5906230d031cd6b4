package sender_test

import (
	"strings"
	"testing"

	"github.com/postline/postline/internal/sender"
)

func TestParseRelayURL(t *testing.T) {
	tests := []struct {
		raw  string
		want sender.Config
	}{
		{"smtp://mail.example.com", sender.Config{Name: "mail.example.com", Host: "mail.example.com", Port: 587, TLS: sender.TLSAuto}},
		{" smtp://mail.example.com:2525/ ", sender.Config{Name: "mail.example.com", Host: "mail.example.com", Port: 2525, TLS: sender.TLSAuto}},
		{"smtps://mail.example.com", sender.Config{Name: "mail.example.com", Host: "mail.example.com", Port: 465, TLS: sender.TLSImplicit}},
		{"SMTPS://mail.example.com:4650?tls=implicit", sender.Config{Name: "mail.example.com", Host: "mail.example.com", Port: 4650, TLS: sender.TLSImplicit}},
		{"smtp://127.0.0.1:1025?tls=none&name=mailpit", sender.Config{Name: "mailpit", Host: "127.0.0.1", Port: 1025, TLS: sender.TLSNone}},
		{"smtp://[::1]:25", sender.Config{Name: "::1", Host: "::1", Port: 25, TLS: sender.TLSAuto}},
		{
			"smtp://ada%40example.com:p%40ss%3Aw%2Fo%2Crd@relay.example.com?name=ses&priority=2&tls=mandatory&helo=me.example.com&max_conns=8&rate=12.5&insecure_skip_verify=true",
			sender.Config{
				Name: "ses", Host: "relay.example.com", Port: 587, TLS: sender.TLSMandatory, Priority: 2, MaxConns: 8, Rate: 12.5,
				HELO: "me.example.com", InsecureSkipVerify: true, Username: "ada@example.com", Password: "p@ss:w/o,rd",
			},
		},
		{"smtp://relay.example.com?pipelining=false", sender.Config{Name: "relay.example.com", Host: "relay.example.com", Port: 587, TLS: sender.TLSAuto, NoPipelining: true}},
		{"smtp://relay.example.com?pipelining=true", sender.Config{Name: "relay.example.com", Host: "relay.example.com", Port: 587, TLS: sender.TLSAuto}},
		{"smtp://user@relay.example.com?tls=Opportunistic", sender.Config{Name: "relay.example.com", Host: "relay.example.com", Port: 587, TLS: sender.TLSOpportunistic, Username: "user"}},
		{"smtp://user:@localhost?tls=none", sender.Config{Name: "localhost", Host: "localhost", Port: 587, TLS: sender.TLSNone, Username: "user"}},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := sender.ParseRelayURL(tt.raw)
			if err != nil {
				t.Fatalf("ParseRelayURL: %v", err)
			}
			if got != tt.want {
				t.Errorf("ParseRelayURL =\n%+v, want\n%+v", got, tt.want)
			}
		})
	}
}

func TestParseRelayURLErrors(t *testing.T) {
	const secret = "s3cr3t"
	tests := []struct {
		raw  string
		part string // the error names it
	}{
		{"http://mail.example.com", "scheme"},
		{"mail.example.com:587", "scheme"},
		{"smtp:mail.example.com", "smtp://host"},
		{"smtp://", "host is missing"},
		{"smtp://u:" + secret + "@", "host is missing"},
		{"smtp://mail.example.com:0", "port"},
		{"smtp://mail.example.com:70000", "port"},
		{"smtp://u:" + secret + "@mail.example.com:abc", "port"},
		{"smtp://mail.example.com/relay", "path"},
		{"smtp://mail.example.com#x", "fragment"},
		{"smtp://:" + secret + "@mail.example.com", "user is empty"},
		{"smtp://u:" + secret + "%zz@mail.example.com", "percent-encoding"},
		{"smtp://u:" + secret + "@mail.example.com?tls=starttls", "tls"},
		{"smtp://u:" + secret + "@mail.example.com?tls=implicit", "smtps://"},
		{"smtps://u:" + secret + "@mail.example.com?tls=mandatory", "conflicts"},
		{"smtp://mail.example.com?priority=high", "priority"},
		{"smtp://mail.example.com?priority=-1", "Priority"},
		{"smtp://mail.example.com?max_conns=many", "max_conns"},
		{"smtp://mail.example.com?max_conns=-2", "MaxConns"},
		{"smtp://mail.example.com?rate=fast", "rate"},
		{"smtp://mail.example.com?rate=-1", "Rate"},
		{"smtp://mail.example.com?insecure_skip_verify=yes", "insecure_skip_verify"},
		{"smtp://mail.example.com?pipelining=off", "pipelining"},
		{"smtp://mail.example.com?port=25", `unknown parameter "port"`},
		{"smtp://mail.example.com?name=a&name=b", `"name" is given 2 times`},
		{"smtp://mail.example.com?name=a%20b", "Name"},
		{"smtp://mail.example.com?helo=a%20b", "HELO"},
		{"smtp://u:" + secret + "@mail.example.com?tls=none", "clear text"},
		{"smtp://u:" + secret + "@mail.example.com?x=%zz", "query"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			_, err := sender.ParseRelayURL(tt.raw)
			if err == nil {
				t.Fatal("ParseRelayURL succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.part) {
				t.Errorf("error %q does not name %q", err, tt.part)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q echoes the password", err)
			}
		})
	}
}

func TestParseRelayURLs(t *testing.T) {
	got, err := sender.ParseRelayURLs("smtp://b.example.com?priority=1, smtp://a.example.com?priority=0,smtp://c.example.com?priority=1&name=c,smtps://d.example.com")
	if err != nil {
		t.Fatalf("ParseRelayURLs: %v", err)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	if want := "a.example.com d.example.com b.example.com c"; strings.Join(names, " ") != want {
		t.Errorf("order %q, want %q (by priority, stable)", strings.Join(names, " "), want)
	}

	for _, tt := range []struct{ list, part string }{
		{"", "empty"},
		{"  ", "empty"},
		{"smtp://a.example.com,,smtp://b.example.com", "entry 2 is empty"},
		{"smtp://a.example.com,", "entry 2 is empty"},
		{"smtp://a.example.com,smtp://b.example.com?tls=bad", "entry 2"},
		{"smtp://a.example.com,smtp://x.example.com?name=a.example.com", `entries 1 and 2 are both named "a.example.com"`},
		{"smtp://a.example.com:25,smtp://a.example.com:587", "both named"},
	} {
		if _, err := sender.ParseRelayURLs(tt.list); err == nil || !strings.Contains(err.Error(), tt.part) {
			t.Errorf("ParseRelayURLs(%q) = %v, want an error naming %q", tt.list, err, tt.part)
		}
	}
}

func TestErrorSMTPReply(t *testing.T) {
	for _, tt := range []struct {
		err          *sender.Error
		code         int
		enhanced, tx string
	}{
		{&sender.Error{Stage: sender.StageRcpt, Code: 550, Enhanced: "5.1.1", Text: "no such user"}, 550, "5.1.1", "no such user"},
		{&sender.Error{Stage: sender.StageMail, Code: 421, Text: "bye"}, 421, "", "bye"},
		{&sender.Error{Stage: sender.StageDial}, 0, "", ""},
	} {
		code, enh, text := tt.err.SMTPReply()
		if code != tt.code || enh != tt.enhanced || text != tt.tx {
			t.Errorf("SMTPReply() = %d, %q, %q; want %d, %q, %q", code, enh, text, tt.code, tt.enhanced, tt.tx)
		}
		if got := tt.err.SMTPStage(); got != tt.err.Stage {
			t.Errorf("SMTPStage() = %q, want %q", got, tt.err.Stage)
		}
	}
}
