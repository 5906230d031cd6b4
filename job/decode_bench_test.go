package job

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkDecodeAndHash measures Decode and Hash of a record shaped like
// bench/e2e's jobs (a 1 KiB text body with line breaks, as Publisher
// encodes it), against the two passes and json.Marshal hash they replaced
// (today's Validate in both).
func BenchmarkDecodeAndHash(b *testing.B) {
	j := Job{
		Version:   SchemaVersion,
		MessageID: "5ka3gvvskca22kxjuvrabxsehe.1796116999087067239@postline.test",
		From:      "Postline Bench <bench@postline.test>",
		To:        []string{"rcpt1234@sink.postline.test"},
		Subject:   "bench mail 1234",
		Text:      strings.Repeat("The quick brown fox jumps over the lazy dog, again and again and again.\n", 15),
		Priority:  PriorityNormal,
	}
	record, err := json.Marshal(j)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		decode func([]byte, Limits) (Job, error)
		hash   func(Job) []byte
	}{{"one-pass", Decode, Job.Hash}, {"encoding-json", referenceDecode, referenceHash}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(record)))
			for b.Loop() {
				j, err := tc.decode(record, Limits{})
				if err != nil {
					b.Fatal(err)
				}
				if len(tc.hash(j)) != 32 {
					b.Fatal("hash is not SHA-256")
				}
			}
		})
	}
}

// BenchmarkDecodeHashBySize measures DecodeHashInto on records of 1, 10
// and 100 KiB of text and HTML bodies (lines of text; HTML with tags and
// attributes, which json.Marshal escapes), as json.Marshal writes them.
func BenchmarkDecodeHashBySize(b *testing.B) {
	const (
		line = "The quick brown fox jumps over the lazy dog, again and again and again.\n"
		para = "<p class=\"body\">The quick brown fox jumps over the <a href=\"https://example.test/dog?id=42&amp;x=1\">lazy dog</a>, again.</p>\n"
	)
	for _, size := range []int{1 << 10, 10 << 10, 100 << 10} {
		j := Job{Version: SchemaVersion, MessageID: "5ka3gvvskca22kxjuvrabxsehe.1796116999087067239@postline.test",
			From: "Postline Bench <bench@postline.test>", To: []string{"rcpt1234@sink.postline.test"}, Subject: "bench mail 1234",
			Text: strings.Repeat(line, size/2/len(line)+1)[:size/2], HTML: strings.Repeat(para, size/2/len(para)+1)[:size/2]}
		record, err := json.Marshal(j)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(record)))
			for b.Loop() {
				var j Job
				if _, err := DecodeHashInto(&j, record, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
