package job

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestHash(t *testing.T) {
	base := validJob()
	baseHash := base.Hash()
	if len(baseHash) != 32 {
		t.Fatalf("hash is %d bytes, want 32", len(baseHash))
	}
	utc := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	paris := utc.In(time.FixedZone("CET", 3600))
	tests := []struct {
		name   string
		mutate func(*Job)
		same   bool
	}{
		{"identical", func(*Job) {}, true},
		{"angle brackets", func(j *Job) { j.MessageID = "<" + j.MessageID + ">" }, true},
		{"explicit normal priority", func(j *Job) { j.Priority = PriorityNormal }, true},
		{"empty versus nil lists", func(j *Job) { j.Cc = []string{} }, true},
		{"empty versus nil map", func(j *Job) { j.Metadata = map[string]string{} }, true},
		{"subject", func(j *Job) { j.Subject += "!" }, false},
		{"recipient", func(j *Job) { j.To = []string{"other@example.test"} }, false},
		{"recipient moved to cc", func(j *Job) { j.Cc, j.To = j.To, nil }, false},
		{"priority", func(j *Job) { j.Priority = PriorityBulk }, false},
		{"metadata", func(j *Job) { j.Metadata = map[string]string{"k": "v"} }, false},
		{"unsubscribe", func(j *Job) { j.Unsubscribe = true }, false},
		{"attachment byte", func(j *Job) { j.Attachments = []Attachment{{Filename: "a", Content: []byte{1}}} }, false},
	}
	for _, tt := range tests {
		j := validJob()
		tt.mutate(&j)
		if same := bytes.Equal(j.Hash(), baseHash); same != tt.same {
			t.Errorf("%s: same hash = %v, want %v", tt.name, same, tt.same)
		}
	}

	a, b := validJob(), validJob()
	a.NotAfter, b.NotAfter = &utc, &paris
	if !bytes.Equal(a.Hash(), b.Hash()) {
		t.Error("the same deadline in another time zone changed the hash")
	}
	if *b.NotAfter != paris || b.MessageID != base.MessageID {
		t.Error("Hash modified its receiver")
	}
}

func TestHashIgnoresEncoding(t *testing.T) {
	docs := []string{
		validDoc,
		`{ "text" : "Hello", "subject":"Hi", "to":["ada@example.test"], "from":"noreply@example.com",
		   "message_id":"<a.1@postline.test>", "version":1, "priority":"normal" }`,
		`{"version":1,"message_id":"a.1@postline.test","from":"noreply@example.com","to":["ada@example.test"],"cc":[],"subject":"H\u0069","text":"Hello","headers":{}}`,
	}
	var first []byte
	for i, d := range docs {
		j, err := Decode([]byte(d), Limits{})
		if err != nil {
			t.Fatalf("doc %d: %v", i, err)
		}
		h := j.Hash()
		if i == 0 {
			first = h
		} else if !bytes.Equal(h, first) {
			t.Errorf("doc %d hashes differently from doc 0", i)
		}
	}
}

func TestNewMessageID(t *testing.T) {
	shape := regexp.MustCompile(`^[a-z2-7]{26}\.[0-9]{19}@example\.com$`)
	seen := make(map[string]bool)
	for range 1000 {
		id := NewMessageID("example.com")
		if !shape.MatchString(id) {
			t.Fatalf("%q does not look like <base32>.<unix-nano>@example.com", id)
		}
		if err := validateMessageID(id); err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		if seen[id] {
			t.Fatalf("duplicate %q", id)
		}
		seen[id] = true
	}
	if id := NewMessageID(""); !strings.HasSuffix(id, "@"+DefaultMessageIDDomain) {
		t.Fatalf("NewMessageID(\"\") = %q, want the default domain", id)
	}
}
