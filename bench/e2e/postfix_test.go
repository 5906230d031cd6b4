package main

import (
	"fmt"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postline/postline/bench/internal/benchproc"
	"github.com/postline/postline/internal/smtptest"
)

func TestCountDeliveries(t *testing.T) {
	log := `Dec  1 17:20:01.101 relay postfix-bench/smtpd[10]: connect from localhost[127.0.0.1]
Dec  1 17:20:01.102 relay postfix-bench/smtp[11]: 4Xz: to=<rcpt@sink.postline.test>, relay=127.0.0.1[127.0.0.1]:2525, delay=0.1, dsn=2.0.0, status=sent (250 2.0.0 Ok)
Dec  1 17:20:01.103 relay postfix-bench/smtp[12]: 4Xy: to=<rcpt@sink.postline.test>, relay=127.0.0.1[127.0.0.1]:2525, dsn=2.0.0, status=sent (250 2.0.0 Ok)
Dec  1 17:20:01.104 relay postfix-bench/smtp[12]: 4Xw: to=<rcpt@sink.postline.test>, relay=none, dsn=4.4.1, status=deferred (connect to 127.0.0.1[127.0.0.1]:2525: Connection refused)
Dec  1 17:20:01.105 relay postfix-bench/error[13]: 4Xv: to=<a@b>, dsn=5.0.0, status=bounced (local delivery disabled)
Dec  1 17:20:01.106 relay postfix-bench/smtp[12]: 4Xu: to=<rcpt@sink.postline.test>, dsn=5.0.0, status=bounced (host said 550)
Dec  1 17:20:01.107 relay postfix-bench/qmgr[9]: 4Xz: removed
`
	got := countDeliveries(log)
	// Only the smtp client's lines: the error agent's bounce is not a relay outcome.
	if want := (logCounts{sent: 2, deferred: 1, bounced: 1}); got != want {
		t.Errorf("countDeliveries = %+v, want %+v", got, want)
	}
	if got.add(got) != (logCounts{4, 2, 2}) {
		t.Errorf("add = %+v", got.add(got))
	}
}

func TestLogTailReturnsWholeLinesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "postfix.log")
	var tail logTail
	if got, err := tail.read(path); err != nil || got != "" {
		t.Fatalf("a log not yet written: %q, %v; want empty, nil", got, err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	steps := []struct{ write, want string }{
		{"one\ntw", "one\n"},
		{"o\nthree\n", "two\nthree\n"},
		{"", ""},
		{"four", ""},
		{"\n", "four\n"},
	}
	for i, s := range steps {
		if _, err := f.WriteString(s.write); err != nil {
			t.Fatal(err)
		}
		got, err := tail.read(path)
		if err != nil || got != s.want {
			t.Errorf("step %d: read = %q, %v; want %q", i, got, err, s.want)
		}
	}
}

func TestPostfixMainCf(t *testing.T) {
	p := &postfixInstance{dir: "/tmp/pf", queue: "/tmp/pf/queue", logPath: "/tmp/pf/postfix.log"}
	cf := postfixMainCf(p, "127.0.0.1:2525")
	for _, want := range []string{
		"\nqueue_directory = /tmp/pf/queue\n",
		"\ndata_directory = /tmp/pf/data\n",
		"\nmaillog_file = /tmp/pf/postfix.log\n",
		"\nmaillog_file_prefixes = /tmp/pf\n",
		"\nrelayhost = [127.0.0.1]:2525\n",
		"\nmydestination =\n",
		"\nmynetworks = 127.0.0.0/8\n",
		"\ndefault_process_limit = 200\n",
		"\nsmtp_destination_concurrency_limit = 64\n",
	} {
		if !strings.Contains(cf, want) {
			t.Errorf("main.cf lacks %q:\n%s", strings.TrimSpace(want), cf)
		}
	}
	// The durable queue is Postfix's default: nothing may turn it off.
	for _, never := range []string{"in_flow_delay", "sync"} {
		if strings.Contains(cf, never) {
			t.Errorf("main.cf sets %s; the relay is meant to run with its defaults there", never)
		}
	}
}

// TestBenchPostfixRelays starts the benchmark's own Postfix in front
// of an SMTP server over TCP (standing in for the benchmark's smtp-sink,
// which `make test` does not start), relays mails through it and
// stops it.
func TestBenchPostfixRelays(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: starts a Postfix relay from Debian's postfix package; skipped under -short")
	}
	dest := smtptest.NewServer(t)
	sink := dest.Addr()
	if os.Geteuid() != 0 {
		t.Skip("the postfix command needs root to run an instance from its own config directory")
	}
	if _, err := os.Stat("/usr/sbin/postfix"); err != nil {
		t.Skip("Debian's postfix is not installed (scripts/stack.sh up installs it)")
	}
	var log strings.Builder
	p, err := startPostfix(sink, &log)
	if err != nil {
		t.Fatal(err)
	}
	master, err := p.masterPID()
	if err != nil {
		p.stop(false, &log)
		t.Fatal(err)
	}
	defer func() {
		p.stop(false, &log)
		if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
			t.Errorf("%s is still there after stop: %v", p.dir, err)
		}
		if syscall.Kill(master, 0) == nil {
			t.Errorf("the master (pid %d) still runs after stop", master)
		}
		if log.Len() > 0 {
			t.Logf("harness output: %s", log.String())
		}
	}()

	// Enough mails for the relay's processes to use clock ticks of CPU: a
	// fast machine relays 20 in well under a tick per process, and the
	// kernel's per-process times are counted in ticks.
	const n = 300
	for i := range n {
		msg := fmt.Sprintf("From: bench@postline.test\r\nTo: rcpt%d@sink.postline.test\r\nSubject: relay test %d\r\n\r\nbody\r\n", i, i)
		if err := smtp.SendMail(p.addr, nil, "bench@postline.test", []string{fmt.Sprintf("rcpt%d@sink.postline.test", i)}, []byte(msg)); err != nil {
			t.Fatalf("mail %d into the relay: %v", i, err)
		}
	}
	var tail logTail
	var c logCounts
	deadline := time.Now().Add(60 * time.Second)
	for c.sent < n {
		lines, err := tail.read(p.logPath)
		if err != nil {
			t.Fatal(err)
		}
		c = c.add(countDeliveries(lines))
		if c.bounced > 0 || time.Now().After(deadline) {
			b, _ := os.ReadFile(p.logPath)
			t.Fatalf("relayed %+v of %d mails; log:\n%s", c, n, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := len(dest.Messages()); got != n {
		t.Errorf("the destination received %d mails, want %d", got, n)
	}
	cpu, err := benchproc.TreeCPU(master)
	if err != nil {
		t.Fatal(err)
	}
	if cpu <= 0 {
		t.Errorf("the relay's process tree used %v of CPU for %d mails; want some", cpu, n)
	}
}
