package suppression

import (
	"strings"
	"testing"
	"time"
)

func TestParseImport(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := ImportDefaults{Reason: "manual", Stream: "*", Source: "console", Now: now}
	tests := []struct {
		name      string
		in        string
		wantLines []int
		wantBad   []string
		badCount  int
		wantErr   string
	}{
		{name: "addresses only", in: "address\nada@x.org\n\nbob@x.org\n", wantLines: []int{2, 4}},
		{name: "CSV with bad rows", in: "address,stream\nada@x.org,*\nnope,*\nbob@x.org,news\ncy@x.org,bulk\n",
			wantLines: []int{2, 5}, wantBad: []string{"line 3: suppression: invalid address", `line 4: suppression: invalid stream "news"`}, badCount: 2},
		{name: "JSON lines", in: `{"address": "ada@x.org"}` + "\n" + `{"address": 1}` + "\n",
			wantLines: []int{1}, wantBad: []string{"line 2: not a JSON object"}, badCount: 1},
		{name: "more bad rows than kept", in: "address\n" + strings.Repeat("bad\n", MaxRowErrors+5), badCount: MaxRowErrors + 5},
		{name: "empty", in: "\n \n", wantErr: "the file is empty"},
		{name: "unknown column", in: "address,colour\n", wantErr: `unknown column "colour"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseImport(strings.NewReader(tt.in), d)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Entries) != len(tt.wantLines) || got.BadCount != tt.badCount || len(got.Bad) != min(tt.badCount, MaxRowErrors) {
				t.Fatalf("got %d entries at %v, %d bad (%d kept); want lines %v, %d bad", len(got.Entries), got.Lines, got.BadCount, len(got.Bad), tt.wantLines, tt.badCount)
			}
			for i, line := range tt.wantLines {
				if got.Lines[i] != line || got.Entries[i].Reason != "manual" || got.Entries[i].Source != "console" {
					t.Errorf("entry %d = %+v at line %d, want line %d with the defaults", i, got.Entries[i], got.Lines[i], line)
				}
			}
			for i, w := range tt.wantBad {
				if !strings.HasPrefix(got.Bad[i].Error(), w) {
					t.Errorf("bad row %d = %v, want %q", i, got.Bad[i], w)
				}
			}
			if (got.Err() == nil) != (tt.badCount == 0) {
				t.Errorf("Err() = %v with %d bad rows", got.Err(), tt.badCount)
			}
		})
	}
}

// FuzzParseImport: every entry an import file yields is valid, its line
// is within the file, and no row is both an entry and bad.
func FuzzParseImport(f *testing.F) {
	f.Add("address,reason\nada@x.org,manual\nnope,x\n")
	f.Add(`{"address": "ada@x.org", "reason": "complaint"}` + "\n{}\n")
	f.Add("\xef\xbb\xbfAddress\r\n\"a\"\"b\"@x.org\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseImport(strings.NewReader(in), ImportDefaults{Reason: "manual", Stream: "*", Now: time.Unix(0, 0)})
		if err != nil {
			return
		}
		lines := strings.Count(in, "\n") + 1
		seen := map[int]bool{}
		for i, e := range got.Entries {
			if err := e.Validate(); err != nil {
				t.Fatalf("entry %+v is invalid: %v", e, err)
			}
			if got.Lines[i] < 1 || got.Lines[i] > lines {
				t.Fatalf("entry at line %d of a %d-line file", got.Lines[i], lines)
			}
			seen[got.Lines[i]] = true
		}
		for _, b := range got.Bad {
			if seen[b.Line] {
				t.Fatalf("line %d is both an entry and bad", b.Line)
			}
		}
	})
}
