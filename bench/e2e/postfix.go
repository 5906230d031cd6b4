package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchproc"
)

// The postfix variant: Debian's Postfix as a relay in front of the same
// smtp-sink, configured by the benchmark itself. smtp-source injects the
// mails into it (-d, reusing its connections, the relay's best case) and
// the variant ends when Postfix has logged every mail status=sent: the
// sink's 250 to the relay's smtp client, the same event a Postline row
// records as sent_at.

const variantPostfix = "postfix"

// postfixInstance is one Postfix of the benchmark: its own config, queue
// and data directories under dir, listening on addr.
type postfixInstance struct {
	dir, conf, queue, logPath string
	addr                      string
}

// postfixMainCf is the relay's main.cf: a relay for loopback clients to
// relayhost, with Postfix's durable queue (cleanup fsyncs every queue file
// before it answers 250) and the limits of a busy relay raised from the
// defaults; everything else is Postfix's default, in_flow_delay included.
func postfixMainCf(p *postfixInstance, relayhost string) string {
	return fmt.Sprintf(`# Written by bench/e2e for one run of the postfix variant.
compatibility_level = 3.6
queue_directory = %[1]s
data_directory = %[2]s
mail_owner = postfix
setgid_group = postdrop
syslog_name = postfix-bench
maillog_file = %[3]s
maillog_file_prefixes = %[4]s
myhostname = relay.bench.postline.test
mydomain = postline.test
myorigin = $myhostname
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mydestination =
relay_domains =
local_recipient_maps =
alias_maps =
alias_database =
local_transport = error:local delivery disabled
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject
relayhost = [%[5]s]:%[6]s
smtp_dns_support_level = disabled
smtp_tls_security_level = none
smtpd_tls_security_level = none
notify_classes =
biff = no
# A relay's limits: enough processes for the sessions smtp-source opens and
# the deliveries the queue manager runs to the one destination.
default_process_limit = 200
smtp_destination_concurrency_limit = 64
smtpd_client_connection_count_limit = 0
smtpd_client_message_rate_limit = 0
`, p.queue, filepath.Join(p.dir, "data"), p.logPath, p.dir, hostOf(relayhost), portOf(relayhost))
}

func hostOf(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func portOf(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

// startPostfix writes a fresh instance's configuration and starts it.
// Postfix's daemons run as the postfix user, so the directories are
// world-traversable (not the harness's 0700 temp dirs).
func startPostfix(relayhost string, stderr io.Writer) (_ *postfixInstance, err error) {
	for _, bin := range []string{"/usr/sbin/postfix", "/usr/sbin/postconf", "/usr/share/postfix/master.cf.dist"} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("postfix: %s missing: install Debian's postfix (scripts/stack.sh up does)", bin)
		}
	}
	pu, err := user.Lookup("postfix")
	if err != nil {
		return nil, fmt.Errorf("postfix: %w", err)
	}
	uid, _ := strconv.Atoi(pu.Uid)
	gid, _ := strconv.Atoi(pu.Gid)
	dir, err := os.MkdirTemp("", "postline-bench-postfix-")
	if err != nil {
		return nil, err
	}
	p := &postfixInstance{dir: dir, conf: filepath.Join(dir, "etc"), queue: filepath.Join(dir, "queue"), logPath: filepath.Join(dir, "postfix.log")}
	defer func() {
		if err != nil {
			p.stop(false, stderr)
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	for _, d := range []string{p.conf, p.queue} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chown(data, uid, gid); err != nil {
		return nil, err
	}
	if p.addr, err = benchenv.FreeAddr(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(p.conf, "main.cf"), []byte(postfixMainCf(p, relayhost)), 0o644); err != nil {
		return nil, err
	}
	dist, err := os.ReadFile("/usr/share/postfix/master.cf.dist")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(p.conf, "master.cf"), dist, 0o644); err != nil {
		return nil, err
	}
	// No port 25 listener, ours on the free port, nothing chrooted (the
	// queue is not set up as a chroot).
	for _, edit := range [][]string{
		{"-MX", "smtp/inet"},
		{"-M", p.addr + "/inet=" + p.addr + " inet n - n - - smtpd"},
		{"-F", "*/*/chroot = n"},
	} {
		if err := p.run("postconf", append([]string{"-c", p.conf}, edit...)...); err != nil {
			return nil, err
		}
	}
	if err := p.run("postfix", "-c", p.conf, "check"); err != nil {
		return nil, err
	}
	if err := p.run("postfix", "-c", p.conf, "start"); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for !smtpGreets(p.addr) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("postfix: %s does not greet after 20 s; log %s", p.addr, p.logPath)
		}
		time.Sleep(100 * time.Millisecond) // polling a port: there is nothing to wait on
	}
	return p, nil
}

func (p *postfixInstance) run(name string, args ...string) error {
	cmd := exec.Command("/usr/sbin/"+name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// smtpGreets reports whether addr answers with a 220 greeting.
func smtpGreets(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 4)
	_, err = io.ReadFull(c, b)
	return err == nil && string(b[:3]) == "220"
}

// masterPID is the pid of the instance's master process.
func (p *postfixInstance) masterPID() (int, error) {
	return benchproc.PIDFromFile(filepath.Join(p.queue, "pid", "master.pid"))
}

// stop stops the instance, waits for its master to exit and removes its
// directories unless keep (-keep: its config and log stay for a look).
func (p *postfixInstance) stop(keep bool, stderr io.Writer) {
	pid, perr := p.masterPID()
	if err := p.run("postfix", "-c", p.conf, "stop"); err != nil && perr == nil {
		fmt.Fprintf(stderr, "bench: postfix: %v\n", err)
	}
	if perr == nil {
		deadline := time.Now().Add(30 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // the master is not our child: poll it
		}
		if syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if keep {
		fmt.Fprintf(stderr, "bench: postfix: kept %s\n", p.dir)
		return
	}
	if err := os.RemoveAll(p.dir); err != nil {
		fmt.Fprintf(stderr, "bench: postfix: remove %s: %v\n", p.dir, err)
	}
}

// logCounts are the delivery outcomes the relay's smtp client logged.
type logCounts struct{ sent, deferred, bounced int }

// countDeliveries counts status= outcomes in a Postfix mail log, lines
// from the smtp delivery agent only.
func countDeliveries(log string) logCounts {
	var c logCounts
	for line := range strings.Lines(log) {
		if !strings.Contains(line, "/smtp[") {
			continue
		}
		switch {
		case strings.Contains(line, " status=sent "):
			c.sent++
		case strings.Contains(line, " status=deferred "):
			c.deferred++
		case strings.Contains(line, " status=bounced "):
			c.bounced++
		}
	}
	return c
}

func (c logCounts) add(d logCounts) logCounts {
	return logCounts{c.sent + d.sent, c.deferred + d.deferred, c.bounced + d.bounced}
}

// logTail reads a growing log by whole lines: read returns the complete
// lines written since the last call, so a poll costs what was added, not
// the whole log.
type logTail struct {
	offset  int64
	partial []byte
}

func (t *logTail) read(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil // postlogd has not written yet
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, t.offset, 1<<40))
	if err != nil {
		return "", err
	}
	t.offset += int64(len(b))
	b = append(t.partial, b...)
	i := bytes.LastIndexByte(b, '\n')
	t.partial = append([]byte(nil), b[i+1:]...)
	return string(b[:i+1]), nil
}

// runPostfix measures the relay: a fresh instance, smtp-source -d into it,
// until it has relayed every mail to the sink.
func runPostfix(ctx context.Context, o options, run int, stderr io.Writer) (result, error) {
	p, err := startPostfix(o.smtpAddr, stderr)
	if err != nil {
		return result{}, err
	}
	defer p.stop(o.keep, stderr)
	master, err := p.masterPID()
	if err != nil {
		return result{}, fmt.Errorf("postfix: %w", err)
	}
	fmt.Fprintf(stderr, "bench: postfix: relay on %s to %s (config %s, master pid %d)\n", p.addr, o.smtpAddr, p.conf, master)
	cs := o.sinkComponent()
	before, err := sampleComponents(cs)
	if err != nil {
		return result{}, err
	}
	relayBefore, err := benchproc.TreeCPU(master)
	if err != nil {
		return result{}, fmt.Errorf("postfix: %w", err)
	}
	argv := []string{o.smtpSource, "-d", "-s", strconv.Itoa(o.senders), "-m", strconv.Itoa(o.jobs), "-l", strconv.Itoa(o.bodyBytes),
		"-f", "bench@postline.test", "-t", "rcpt@sink.postline.test", p.addr}
	fmt.Fprintf(stderr, "bench: postfix: %s\n", strings.Join(argv, " "))
	start := time.Now()
	src, err := startProc(o.timeBin, o.logDir, fmt.Sprintf("postfix-smtp-source-run%d", run), argv,
		[]string{"LD_LIBRARY_PATH=" + o.smtpSourceLib})
	if err != nil {
		return result{}, err
	}
	defer func() {
		if !src.Exited() {
			src.Kill()
		}
	}()
	deadline := time.Now().Add(o.timeout)
	lastReport := time.Now()
	var (
		c    logCounts
		done time.Time
		tail logTail
	)
	for {
		lines, err := tail.read(p.logPath)
		if err != nil {
			return result{}, err
		}
		now := time.Now()
		c = c.add(countDeliveries(lines))
		if c.bounced > 0 {
			return result{}, fmt.Errorf("postfix: %d mails bounced (sent %d); see %s", c.bounced, c.sent, p.logPath)
		}
		if c.sent >= o.jobs {
			done = now
			break
		}
		if src.Exited() {
			if u, err := src.usage(); err == nil && u.ExitStatus != 0 {
				return result{}, fmt.Errorf("postfix: smtp-source exited with status %d:\n%s", u.ExitStatus, src.LogTail(20))
			}
		}
		if now.After(deadline) {
			return result{}, fmt.Errorf("postfix: %d of %d mails relayed in %s (%d deferrals); see %s", c.sent, o.jobs, o.timeout, c.deferred, p.logPath)
		}
		if now.Sub(lastReport) >= 5*time.Second {
			fmt.Fprintf(stderr, "bench: postfix: %d/%d relayed (%d deferrals)\n", c.sent, o.jobs, c.deferred)
			lastReport = now
		}
		select {
		case <-ctx.Done():
			return result{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	relayAfter, err := benchproc.TreeCPU(master)
	if err != nil {
		return result{}, fmt.Errorf("postfix: %w", err)
	}
	after, err := sampleComponents(cs)
	if err != nil {
		return result{}, err
	}
	// smtp-source has written its last mail before the relay delivered it.
	if !src.Wait(30 * time.Second) {
		return result{}, errors.New("postfix: smtp-source still running after every mail was relayed")
	}
	u, err := src.usage()
	if err != nil {
		return result{}, err
	}
	if u.ExitStatus != 0 {
		return result{}, fmt.Errorf("postfix: smtp-source exited with status %d:\n%s", u.ExitStatus, src.LogTail(20))
	}
	if c.deferred > 0 {
		fmt.Fprintf(stderr, "bench: postfix: %d deferrals on the way (every mail relayed in the end)\n", c.deferred)
	}
	relay := relayAfter - relayBefore
	d := after.since(before)
	return result{
		Variant: variantPostfix, Mails: o.jobs, Span: done.Sub(start), CPU: relay,
		Stack: stackCPU{Measured: true, Own: relay, Injector: u.CPU(), Sink: d["sink"]},
	}, nil
}

// postfixVersion is the installed Postfix's mail_version, for the report.
func postfixVersion() string {
	out, err := exec.Command("/usr/sbin/postconf", "-dh", "mail_version").Output()
	if err != nil {
		return "(version unknown)"
	}
	return strings.TrimSpace(string(out))
}
