package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
)

func TestParseSuppressions(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := importDefaults{stream: "*", source: "import", now: now}
	tests := []struct {
		name    string
		in      string
		d       importDefaults
		want    []suppression.Entry
		wantErr []string
	}{
		{
			name: "CSV with every column, in another order",
			in: "tenant,address,stream,reason,expires_at,source,note,message_id,created_at\n" +
				"acme,Ada <ADA@x.org>,bulk,soft_bounce,2026-03-02T00:00:00Z,dsn,\"two, words\",m1@x,2026-02-01T00:00:00Z\n" +
				",bob@x.org,transactional,complaint,,arf,,,\n",
			d: d,
			want: []suppression.Entry{
				{Tenant: "acme", Address: "ada@x.org", Stream: "bulk", Reason: "soft_bounce", Source: "dsn", Note: "two, words",
					MessageID: "m1@x", CreatedAt: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), ExpiresAt: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)},
				{Address: "bob@x.org", Stream: "transactional", Reason: "complaint", Source: "arf", CreatedAt: now},
			},
		},
		{
			name: "CSV of addresses only takes the flags, after a byte order mark",
			in:   "\xef\xbb\xbfAddress\r\nada@x.org\r\n\r\nbob@x.org\r\n",
			d:    importDefaults{reason: "unsubscribe", tenant: "acme", stream: "bulk", source: "esp", now: now},
			want: []suppression.Entry{
				{Tenant: "acme", Address: "ada@x.org", Stream: "bulk", Reason: "unsubscribe", Source: "esp", CreatedAt: now},
				{Tenant: "acme", Address: "bob@x.org", Stream: "bulk", Reason: "unsubscribe", Source: "esp", CreatedAt: now},
			},
		},
		{
			name: "JSON lines, missing fields from the flags",
			in: "\n  {\"address\": \"ADA@x.org\", \"reason\": \"hard_bounce\", \"tenant\": \"\", \"expires_at\": null}\n\n" +
				`{"address": "bob@x.org", "reason": "manual", "stream": "bulk", "note": " kept ", "expires_at": "2026-04-01T00:00:00Z"}` + "\n",
			d: importDefaults{tenant: "dflt", stream: "*", source: "import", now: now},
			want: []suppression.Entry{
				{Address: "ada@x.org", Stream: "*", Reason: "hard_bounce", Source: "import", CreatedAt: now},
				{Tenant: "dflt", Address: "bob@x.org", Stream: "bulk", Reason: "manual", Source: "import", Note: " kept ", CreatedAt: now,
					ExpiresAt: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)},
			},
		},
		{
			name: "CSV bad rows by line",
			in: "address,reason,stream,expires_at\n" +
				"ok@x.org,manual,*,\n" +
				"nope,manual,*,\n" +
				"a@x.org,spam,*,\n" +
				"b@x.org,manual,news,\n" +
				"c@x.org,manual,*,tomorrow\n" +
				"d@x.org,manual\n" +
				"e@x.org,,*,\n",
			d: d,
			wantErr: []string{"6 bad rows, nothing imported", "line 3: suppression: invalid address", `line 4: suppression: invalid reason "spam"`,
				`line 5: suppression: invalid stream "news"`, `line 6: expires_at "tomorrow"`, "line 7: want 4 fields", "line 8: reason is missing"},
		},
		{
			name:    "JSON bad rows by line",
			in:      `{"address": "a@x.org", "reason": "manual"}` + "\n" + `{"address": "b@x.org", "reason": "manual", "typo": 1}` + "\n" + "[1]\n" + `{"reason": "manual"}` + "\n",
			d:       d,
			wantErr: []string{"3 bad rows", `line 2: not a JSON object of an entry: json: unknown field "typo"`, "line 3: not a JSON object", "line 4: address is missing"},
		},
		{name: "unknown column", in: "address,colour\na@x.org,red\n", d: d, wantErr: []string{`unknown column "colour"`}},
		{name: "no address column", in: "reason\nmanual\n", d: d, wantErr: []string{"no address column"}},
		{name: "empty", in: " \n\n", d: d, wantErr: []string{"the file is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSuppressions(strings.NewReader(tt.in), tt.d)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("parse = %+v, want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("parse = %+v, want %+v", got, tt.want)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if !g.CreatedAt.Equal(w.CreatedAt) || !g.ExpiresAt.Equal(w.ExpiresAt) {
					t.Errorf("entry %d times: created %v expires %v, want %v, %v", i, g.CreatedAt, g.ExpiresAt, w.CreatedAt, w.ExpiresAt)
				}
				g.CreatedAt, g.ExpiresAt, w.CreatedAt, w.ExpiresAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
				if g != w {
					t.Errorf("entry %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestSuppressCursor(t *testing.T) {
	k := suppression.Key{Tenant: "a,b", Stream: suppression.StreamAll, Address: `"x y"@z`}
	got, err := decodeCursor(encodeCursor(k))
	if err != nil || got != k {
		t.Errorf("cursor round trip = %+v, %v; want %+v", got, err, k)
	}
	for _, bad := range []string{"!!", "bnVsbA", encodeCursorParts(t, "a", "b")} {
		if _, err := decodeCursor(bad); err == nil {
			t.Errorf("decodeCursor(%q) succeeded", bad)
		}
	}
}

func encodeCursorParts(t *testing.T, parts ...string) string {
	t.Helper()
	b, err := json.Marshal(parts)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestSuppressArgumentErrors(t *testing.T) {
	// Nothing listens on port 1: every case must fail before it matters.
	env := map[string]string{"POSTLINE_DATABASE_URL": "postgres://u:p@127.0.0.1:1/db?connect_timeout=2"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"suppress", "add"}, "requires at least 1 arg"},
		{[]string{"suppress", "add", "not-an-address"}, "not-an-address: suppression: invalid address"},
		{[]string{"suppress", "add", "a@x.org", "--reason", "spam"}, `--reason: suppression: invalid reason "spam"`},
		{[]string{"suppress", "add", "a@x.org", "--stream", "news"}, `--stream: suppression: invalid stream "news"`},
		{[]string{"suppress", "add", "a@x.org", "--expires", "-1h"}, "--expires -1h0m0s"},
		{[]string{"suppress", "add", "a@x.org", "--note", strings.Repeat("n", 1001)}, "note: 1001 bytes"},
		{[]string{"suppress", "rm", "bad"}, "bad: suppression: invalid address"},
		{[]string{"suppress", "rm", "a@x.org", "--stream", ""}, `--stream: suppression: invalid stream ""`},
		{[]string{"suppress", "ls", "--limit", "0"}, "--limit 0"},
		{[]string{"suppress", "ls", "--reason", "x"}, "--reason"},
		{[]string{"suppress", "ls", "--after", "zz"}, "--after: not a token"},
		{[]string{"suppress", "import"}, "accepts 1 arg"},
		{[]string{"suppress", "import", filepath.Join(t.TempDir(), "none.csv")}, "no such file"},
		{[]string{"suppress", "import", "-", "--stream", "x"}, "--stream"},
		{[]string{"suppress", "export", "-o", "table"}, `--output "table": want csv or json`},
		{[]string{"suppress", "export", "--stream", "x"}, "--stream"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := postctl(t, env, "", tt.args...)
			if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v (exit %d), want a usage error containing %q", err, exitCode(err), tt.want)
			}
		})
	}
}

// suppressSchema returns the URL of a fresh schema holding
// postline_suppressions (its migration applied on its own).
func suppressSchema(t *testing.T) string {
	t.Helper()
	url, pool := testenv.NewSchema(t)
	ddl, err := os.ReadFile("../../internal/schema/migrations/0008_suppressions.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), string(ddl)); err != nil {
		t.Fatal(err)
	}
	return url
}

func TestSuppressPostgres(t *testing.T) {
	url := suppressSchema(t)
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, _, err := postctl(t, nil, stdin, append([]string{"--database-url", url}, args...)...)
		if err != nil {
			t.Fatalf("postctl %v: %v", args, err)
		}
		return out
	}
	out := run("", "suppress", "add", "Ada <ADA@x.org>", "bob@x.org", "--tenant", "acme", "--note", "asked by phone")
	if !strings.Contains(out, "added 2 entries: 2 added or replaced, 0 unchanged") {
		t.Errorf("add: %q", out)
	}
	run("", "suppress", "add", "carol@x.org", "--reason", "soft_bounce", "--stream", "bulk")
	// A hard bounce does not replace the operator's lasting manual entry.
	out = run("", "-o", "json", "suppress", "add", "ada@x.org", "--tenant", "acme", "--reason", "hard_bounce")
	var change suppressChange
	if err := json.Unmarshal([]byte(out), &change); err != nil || change != (suppressChange{Entries: 1, Changed: 0, Unchanged: 1}) {
		t.Errorf("add over a stronger entry: %s (%v)", out, err)
	}

	out = run("", "suppress", "ls")
	for _, want := range []string{"ADDRESS", "ada@x.org", "acme", "asked by phone", "never", "carol@x.org", "soft_bounce"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls lacks %q:\n%s", want, out)
		}
	}
	// Pages of one, by the --after token, until a short page.
	var seen []string
	args := []string{"-o", "json", "suppress", "ls", "--limit", "1"}
	for range 5 {
		var page suppressList
		if err := json.Unmarshal([]byte(run("", args...)), &page); err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			seen = append(seen, e.Tenant+"/"+e.Address)
		}
		if page.NextAfter == "" {
			break
		}
		args = []string{"-o", "json", "suppress", "ls", "--limit", "1", "--after", page.NextAfter}
	}
	if got := strings.Join(seen, " "); got != "/carol@x.org acme/ada@x.org acme/bob@x.org" {
		t.Errorf("paged ls = %s", got)
	}
	if out := run("", "-o", "json", "suppress", "ls", "--tenant", "", "--reason", "soft_bounce"); !strings.Contains(out, `"carol@x.org"`) ||
		strings.Contains(out, "ada@") || !strings.Contains(out, `"expires_at":"`) {
		t.Errorf("ls --tenant '' --reason soft_bounce: %s", out)
	}

	// A file with a bad row imports nothing.
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("address,reason\nnew@x.org,complaint\nbroken,complaint\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := postctl(t, nil, "", "--database-url", url, "suppress", "import", bad)
	if err == nil || exitCode(err) != exitFailure || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("import of a bad file: %v, want line 3 named", err)
	}
	if out := run("", "suppress", "ls", "--prefix", "new@"); !strings.Contains(out, "no suppressed addresses match") {
		t.Errorf("a failed import wrote: %s", out)
	}

	out = run("", "suppress", "rm", "BOB@x.org", "--tenant", "acme")
	if !strings.Contains(out, "removed 1 entry") {
		t.Errorf("rm: %q", out)
	}

	// Export round-trips through import, in both formats, into a fresh
	// schema: the second export equals the first.
	for _, format := range []string{"csv", "json"} {
		t.Run(format, func(t *testing.T) {
			first := run("", "suppress", "export", "-o", format)
			if lines := strings.Count(first, "\n"); (format == "csv" && lines != 3) || (format == "json" && lines != 2) {
				t.Fatalf("export -o %s: %d lines:\n%s", format, lines, first)
			}
			if format == "csv" && !strings.HasPrefix(first, strings.Join(suppressColumns, ",")+"\n") {
				t.Errorf("export lacks the header:\n%s", first)
			}
			other := suppressSchema(t)
			out, _, err := postctl(t, nil, first, "--database-url", other, "suppress", "import", "-")
			if err != nil || !strings.Contains(out, "imported 2 entries: 2 added or replaced") {
				t.Fatalf("import of the export: %q, %v", out, err)
			}
			second, _, err := postctl(t, nil, "", "--database-url", other, "suppress", "export", "-o", format)
			if err != nil || second != first {
				t.Errorf("export after import differs (%v):\n%s\nwant\n%s", err, second, first)
			}
			// Importing again changes nothing: the entries are there.
			out, _, err = postctl(t, nil, first, "--database-url", other, "-o", "json", "suppress", "import", "-")
			if err != nil || !strings.Contains(out, `"changed":0,"unchanged":2`) {
				t.Errorf("import again: %q, %v", out, err)
			}
		})
	}

	// A database without the table says what to do.
	bare, _ := testenv.NewSchema(t)
	_, _, err = postctl(t, nil, "", "--database-url", bare, "suppress", "ls")
	if err == nil || !strings.Contains(err.Error(), "postctl migrate") {
		t.Errorf("ls on an unmigrated schema: %v, want the migrate hint", err)
	}
}
