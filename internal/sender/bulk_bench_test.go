package sender

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/postline/postline/job"
)

// BenchmarkPerMailBySize is the worker's per-byte path for a text and HTML
// job of 1, 10 and 100 KiB of bodies: job.DecodeHashInto (the job and its
// payload hash, as the delivery pipeline reads a record), the
// message (MIME, transfer encodings, DKIM when -dkim) and the DATA write
// with dot-stuffing into a sink that discards it, as a pipelined session
// writes it. The bodies are plain ASCII with short lines, what a
// newsletter's text and HTML mostly are, with a few escapes JSON needs.
func BenchmarkPerMailBySize(b *testing.B) {
	kr := benchKeyring(b, "postline.test")
	for _, size := range []int{1 << 10, 10 << 10, 100 << 10} {
		for _, signed := range []bool{false, true} {
			j := plainBenchJob()
			j.Text = benchBody(size / 2)
			j.HTML = benchHTML(size / 2)
			record, err := json.Marshal(j)
			if err != nil {
				b.Fatal(err)
			}
			cfg := Config{Host: "127.0.0.1", Port: 2525}
			name := strconv.Itoa(size>>10) + "KiB"
			if signed {
				cfg.DKIM = kr
				name += "-dkim"
			}
			r, err := New(cfg, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(record)))
				var buf bytes.Buffer // a session's, reused from mail to mail
				var signed []byte    // likewise
				sink := bufio.NewWriter(io.Discard)
				cpu := processCPU()
				for b.Loop() {
					var j job.Job
					hash, err := job.DecodeHashInto(&j, record, job.Limits{})
					if err != nil {
						b.Fatal(err)
					}
					if len(hash) != 32 {
						b.Fatal("hash is not SHA-256")
					}
					body, e := r.renderSigned(&j, &buf, &signed)
					if e != nil {
						b.Fatal(e)
					}
					if err := writeData(sink, body); err != nil {
						b.Fatal(err)
					}
					if err := sink.Flush(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// benchHTML is about n bytes of HTML in short lines: paragraphs and links
// with attributes, as a newsletter has them.
func benchHTML(n int) string {
	const para = "<p class=\"body\">The quick brown fox jumps over the <a href=\"https://example.test/dog?id=42&amp;x=1\">lazy dog</a>, again.</p>\n"
	return strings.Repeat(para, n/len(para)+1)[:n]
}
