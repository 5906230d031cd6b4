package sender

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postline/postline/internal/dkim"
	"github.com/postline/postline/job"
)

// BenchmarkPerMail measures the worker's per-mail CPU path from the Kafka
// record's bytes to the bytes the session writes after DATA: job.Decode,
// the payload hash the idempotency claim carries, Message, go-mail's
// rendering and DKIM signing (Ed25519, so that the key's arithmetic does not
// drown the rest). cpu-ns/op is the process's CPU time per mail, steadier
// than ns/op on a shared machine. It leaves out the network and the SMTP commands, whose
// cost is the relay's, and the delivery pipeline's bookkeeping. Compare B/op and
// allocs/op, which the machine's load does not change, before ns/op.
func BenchmarkPerMail(b *testing.B) {
	kr := benchKeyring(b, "postline.test")
	for _, tc := range []struct {
		name string
		job  job.Job
		dkim bool
	}{
		// The shape of bench/e2e's jobs, as Publisher encodes them.
		{"plain-1KiB", plainBenchJob(), false},
		{"plain-1KiB-dkim", plainBenchJob(), true},
		// Every field the worker reads: both bodies, custom headers,
		// attachments, metadata, a deadline.
		{"full-dkim", fullBenchJob(), true},
	} {
		record, err := json.Marshal(tc.job)
		if err != nil {
			b.Fatal(err)
		}
		cfg := Config{Host: "127.0.0.1", Port: 2525}
		if tc.dkim {
			cfg.DKIM = kr
		}
		r, err := New(cfg, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(record)))
			var (
				wrote int
				buf   bytes.Buffer // a session's, reused from mail to mail
			)
			cpu := processCPU()
			for b.Loop() {
				j, err := job.Decode(record, job.Limits{})
				if err != nil {
					b.Fatal(err)
				}
				if len(j.Hash()) != 32 {
					b.Fatal("hash is not SHA-256")
				}
				body, e := r.render(&j, &buf)
				if e != nil {
					b.Fatal(e)
				}
				wrote = len(body)
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(wrote), "mail-bytes")
		})
	}
}

// processCPU is the CPU time the process has used, user and system, in
// nanoseconds: GC and background goroutines included, and, unlike wall
// time, not stretched when other processes share the cores.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func plainBenchJob() job.Job {
	return job.Job{
		Version:   job.SchemaVersion,
		MessageID: "5ka3gvvskca22kxjuvrabxsehe.1796116999087067239@postline.test",
		From:      "Postline Bench <bench@postline.test>",
		To:        []string{"rcpt1234@sink.postline.test"},
		Subject:   "bench mail 1234",
		Text:      benchBody(1024),
		Priority:  job.PriorityNormal,
	}
}

func fullBenchJob() job.Job {
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	j := plainBenchJob()
	j.To = []string{"Ada Lovelace <ada@example.test>", "bob@example.test"}
	j.Cc = []string{"cc@example.test"}
	j.Bcc = []string{"bcc@example.test"}
	j.ReplyTo = []string{"support@postline.test"}
	j.Subject = "Grüße, your <order> & receipt"
	j.HTML = "<html><body><p>" + benchBody(2048) + "</p></body></html>"
	j.Headers = map[string]string{"X-Campaign": "spring", "List-Unsubscribe": "<mailto:unsubscribe@postline.test>"}
	j.Attachments = []job.Attachment{{Filename: "receipt.csv", ContentType: "text/csv", Content: []byte(strings.Repeat("sku,qty\nA-1,2\n", 64))}}
	j.Tenant = "acme"
	j.NotAfter = &deadline
	j.Metadata = map[string]string{"order": "1234", "customer": "c-99"}
	return j
}

// benchBody is n bytes of text in lines of 72 characters.
func benchBody(n int) string {
	const line = "The quick brown fox jumps over the lazy dog, again and again and again.\n"
	return strings.Repeat(line, n/len(line)+1)[:n]
}

func benchKeyring(b *testing.B, domain string) *dkim.Keyring {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), domain+".pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, err := dkim.ParseKeys(domain + "=bench:" + path)
	if err != nil {
		b.Fatal(err)
	}
	kr, err := dkim.Load(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return kr
}
