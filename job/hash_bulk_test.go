package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// appendStringPerByte is appendString as it was before it copied safe runs
// in bulk: the reference the bulk one must equal byte for byte, since
// replays compare hashes stored in PostgreSQL rows.
func appendStringPerByte(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// FuzzAppendStringMatchesPerByte holds the bulk appendString to the
// per-byte one it replaced, and both to json.Marshal for valid UTF-8.
func FuzzAppendStringMatchesPerByte(f *testing.F) {
	for _, s := range []string{"", "plain text of some length", "<a href=\"x\">&amp;</a>", "\x00\x1f\x7f\xff",
		"é\u2028\u2029\u2027 ✓", "\xe2\x80", strings.Repeat("abcdefg<", 9), "tab\there\r\nnew\\line\"q"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, want := appendString(nil, s), appendStringPerByte(nil, s)
		if !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q)\n got  %s\n want %s", s, got, want)
		}
		if m, err := json.Marshal(s); err == nil && !bytes.Equal(got, m) {
			t.Fatalf("appendString(%q) = %s, json.Marshal %s", s, got, m)
		}
	})
}

// randomJob is a job whose strings mix long safe runs with every byte
// class appendString treats apart: controls, quotes, backslashes, HTML
// characters, non-ASCII, U+2028, U+2029 and bytes that are not UTF-8.
func randomJob(rng *rand.Rand) Job {
	pieces := []string{"The quick brown fox jumps over the lazy dog. ", "a", "0123456789abcdef",
		"<", ">", "&", "\"", "\\", "\n", "\r\n", "\t", "\x00", "\x1f", "\x7f", "é", "Grüße ", "✓",
		"\u2028", "\u2029", "\U0001F600", "\xff", "\xe2\x80", "=3D", "."}
	str := func(n int) string {
		var b strings.Builder
		for range rng.IntN(n) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	deadline := time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).In(time.FixedZone("Z", rng.IntN(50_000)))
	j := Job{Version: SchemaVersion, MessageID: str(4) + "@x", From: str(3), To: []string{str(3), str(3)},
		Subject: str(8), Text: str(400), HTML: str(400), Priority: Priority(str(2)), Tenant: str(2),
		Headers: map[string]string{str(3): str(6)}, Metadata: map[string]string{str(3): str(3), str(2): str(4)}}
	if rng.IntN(2) == 0 {
		j.NotAfter = &deadline
		j.Attachments = []Attachment{{Filename: str(3), ContentType: str(2), Content: []byte(str(20))}}
		j.Template = &TemplateRef{Name: str(3), Locale: str(2), Data: map[string]any{str(3): str(5),
			str(2): []any{json.Number("12.5e3"), true, nil, map[string]any{str(2): str(9)}}}}
	}
	return j
}

// hashOfManyJobs is the SHA-256 of the hashes of n random jobs, in order.
func hashOfManyJobs(t *testing.T, n int, check func(Job)) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(32, 1))
	all := sha256.New()
	for range n {
		j := randomJob(rng)
		if check != nil {
			check(j)
		}
		all.Write(j.Hash())
	}
	return hex.EncodeToString(all.Sum(nil))
}

// goldenHashOfManyJobs is hashOfManyJobs(3000) as the per-byte
// appendString computed it (at the commit before the bulk one): the hash
// of a given job must never change, since the dedupe compares it with
// hashes stored by earlier versions.
const goldenHashOfManyJobs = "3b3e3c94ccea7c2cf13a2e86e90b795e1b2b4123de284077efc64488e7b7f907"

func TestHashUnchangedOverManyJobs(t *testing.T) {
	got := hashOfManyJobs(t, 3000, func(j Job) { checkHashMatchesReference(t, j) })
	if got != goldenHashOfManyJobs {
		t.Fatalf("the hashes of 3000 jobs changed: %s, want %s", got, goldenHashOfManyJobs)
	}
}
