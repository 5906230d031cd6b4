package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
)

// options are the command-line flags.
type options struct {
	jobs, window, lead, warmupJobs int64
	workers, partitions, bodyBytes int
	senders, runs                  int
	rate, ageFrom                  float64
	aging                          string
	ageLag, ageShift               time.Duration
	purgeWait                      time.Duration
	retention, reaperInterval      time.Duration
	sampleEvery, poll, timeout     time.Duration
	workerBin, sink, out, logDir   string
	pidFiles                       pidFiles
	brokers                        []string
	databaseURL                    string
	keep                           bool
	plotFrom                       string
}

// total is every job the soak publishes: the measured ones and the lead.
func (o options) total() int64 { return o.jobs + o.lead }

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Int64Var(&o.jobs, "jobs", 1_000_000, "jobs to measure (-lead more are delivered: before the first window and after the last)")
	fs.Int64Var(&o.window, "window", 0, "mails of the first and the last window whose rates are compared (0: a tenth of -jobs)")
	fs.Int64Var(&o.lead, "lead", 50_000, "most jobs published ahead of the mails sent; as many more than -jobs are published, and the windows leave out the first and the last lead of mails, when the publisher is not yet or no longer publishing one job per mail sent")
	fs.Int64Var(&o.warmupJobs, "warmup-jobs", 300_000, "jobs of an unmeasured soak without aging or -rate, on fixtures of its own, before the measured one: "+
		"a freshly started broker runs slow until its JIT has compiled its hot paths, which would make the first window slower and flatter the ratio (0: none)")
	fs.Float64Var(&o.rate, "rate", 0, "publish at most this many jobs/s (0: as fast as the lead allows); for a soak longer than -retention")
	fs.StringVar(&o.aging, "aging", agingSteady, "how the retention's passing is simulated so that the workers' purge runs during the soak: "+
		agingSteady+" (from -age-from on, the rows' timestamps are written -age-shift back by their columns' defaults, so they become purgeable -age-lag after they are sent), "+
		agingBurst+" (every row sent so far, once, at -age-from) or "+agingOff)
	fs.Float64Var(&o.ageFrom, "age-from", 0, "share of -jobs sent when the aging begins (default: as the first window ends, so that the purge's first passes are well before the last window)")
	fs.DurationVar(&o.ageLag, "age-lag", 15*time.Second, "steady aging: how long after it was sent a row becomes purgeable")
	fs.DurationVar(&o.ageShift, "age-shift", 0, "how far the aging moves the timestamps back (0: steady, -retention less -age-lag; burst, -retention + 1m); a shift that leaves the rows well inside -retention (30m) ages rows the purge never deletes, which measures the aging's own cost")
	fs.DurationVar(&o.purgeWait, "purge-wait", 5*time.Minute, "burst aging: longest to wait after the last mail for the purge of the aged rows")
	fs.IntVar(&o.runs, "runs", 1, "measured soaks to run one after another, each on fresh fixtures after the one warm-up; with more than one, run N's files go to runN/ under -out, and runs.md there holds every run's windows and the median ratio, which the rate target is judged on")
	fs.IntVar(&o.workers, "workers", 2, "worker processes in the group")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of the jobs topic")
	fs.IntVar(&o.bodyBytes, "body-bytes", 256, "text body size of each job")
	fs.IntVar(&o.senders, "senders", 0, "POSTLINE_SENDERS of every worker (0: the worker's default)")
	fs.DurationVar(&o.retention, "retention", time.Hour, "POSTLINE_RETENTION of the workers (at least 1h)")
	fs.DurationVar(&o.reaperInterval, "reaper-interval", 30*time.Second, "POSTLINE_REAPER_INTERVAL of the workers: how often each recovers stuck rows (each purges every reaper.DefaultPurgeInterval)")
	fs.DurationVar(&o.sampleEvery, "sample", 5*time.Second, "time between samples of RSS and table sizes")
	fs.DurationVar(&o.poll, "poll", 250*time.Millisecond, "time between progress polls of the workers' counters")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Hour, "longest the delivery may take")
	fs.StringVar(&o.workerBin, "worker-bin", "bin/worker", "the Postline worker binary")
	fs.StringVar(&o.pidFiles.kafka, "kafka-pid-file", "", "Kafka's pid file, for its CPU per mail in the report (make soak passes the stack's)")
	fs.StringVar(&o.pidFiles.postgres, "postgres-pid-file", "", "PostgreSQL's postmaster.pid, for its CPU per mail, backends included (make soak passes the stack's)")
	fs.StringVar(&o.pidFiles.sink, "sink-pid-file", "", "smtp-sink's pid file, for its CPU per mail (make soak passes the stack's)")
	fs.StringVar(&o.sink, "sink", cmp.Or(os.Getenv("POSTLINE_TEST_SMTP_SINK"), "127.0.0.1:2525"), "smtp-sink address")
	fs.StringVar(&o.out, "out", "bin/soak", "directory for soak.csv, soak.svg and soak.md (with -runs, runN/ of each and runs.md)")
	fs.StringVar(&o.logDir, "log-dir", "", "directory for the workers' logs (default: -out)")
	stack := benchenv.AddStackFlags(fs, "PostgreSQL URL (the soak's schema is created in it)")
	fs.BoolVar(&o.keep, "keep", false, "keep the topics and the schema after the run")
	fs.StringVar(&o.plotFrom, "plot-from", "", "only draw the plot of this soak.csv into -out/soak.svg, running nothing")
	if err := benchcli.ParseFlags(fs, args); err != nil {
		return o, err
	}
	if o.window == 0 {
		o.window = o.jobs / 10
	}
	ageFromSet := false
	fs.Visit(func(f *flag.Flag) { ageFromSet = ageFromSet || f.Name == "age-from" })
	if !ageFromSet && o.jobs > 0 {
		o.ageFrom = float64(o.lead+o.window) / float64(o.jobs)
	}
	switch {
	case o.lead < 1:
		return o, fmt.Errorf("-lead %d must be at least 1", o.lead)
	case o.window < 1 || o.jobs < o.lead+2*o.window:
		return o, fmt.Errorf("-jobs %d must be at least -lead %d and twice -window %d (and -window at least 1)", o.jobs, o.lead, o.window)
	case o.warmupJobs != 0 && o.warmupJobs < minWarmupJobs:
		return o, fmt.Errorf("-warmup-jobs %d must be 0 or at least %d", o.warmupJobs, minWarmupJobs)
	case o.runs < 1:
		return o, fmt.Errorf("-runs %d must be at least 1", o.runs)
	case o.workers < 1 || o.partitions < o.workers:
		return o, fmt.Errorf("-workers %d must be between 1 and -partitions %d", o.workers, o.partitions)
	case o.bodyBytes < 1 || o.senders < 0 || o.rate < 0:
		return o, errors.New("-body-bytes must be positive, -senders and -rate not negative")
	case o.aging != agingSteady && o.aging != agingBurst && o.aging != agingOff:
		return o, fmt.Errorf("-aging %q must be %s, %s or %s", o.aging, agingSteady, agingBurst, agingOff)
	case o.ageFrom < 0 || o.ageFrom >= 1:
		return o, fmt.Errorf("-age-from %v must be in [0, 1)", o.ageFrom)
	case o.ageLag <= 0 || o.ageShift < 0 || o.ageLag >= o.retention:
		return o, fmt.Errorf("-age-lag %s must be positive and shorter than -retention %s, -age-shift %s not negative", o.ageLag, o.retention, o.ageShift)
	case o.sampleEvery < o.poll || o.poll <= 0:
		return o, fmt.Errorf("-sample %s must be at least -poll %s, and -poll positive", o.sampleEvery, o.poll)
	}
	if _, _, err := net.SplitHostPort(o.sink); err != nil {
		return o, fmt.Errorf("-sink %q: %w", o.sink, err)
	}
	o.ageShift = cmp.Or(o.ageShift, defaultShift(o.aging, o.retention, o.ageLag))
	o.brokers, o.databaseURL = stack.Brokers(), stack.DatabaseURL()
	o.logDir = cmp.Or(o.logDir, o.out)
	return o, nil
}

// runOptions are the options of run n (from 1) of several: o's, with its
// files under runN/ of o's directories.
func runOptions(o options, n int) options {
	r := o
	r.out = filepath.Join(o.out, fmt.Sprintf("run%d", n))
	r.logDir = filepath.Join(o.logDir, fmt.Sprintf("run%d", n))
	return r
}

// minWarmupJobs is the smallest warm-up: its windows must hold a mail.
const minWarmupJobs = 10

// warmupOptions are the options of the warm-up soak before o: o's fleet
// and sink, o.warmupJobs jobs without aging and as fast as they go (a
// -rate is for the measured soak: the JIT only needs the load), its files
// under o's in warmup/.
func warmupOptions(o options) options {
	w := o
	w.jobs, w.window, w.warmupJobs = o.warmupJobs, o.warmupJobs/10, 0
	w.lead = min(o.lead, max(1, w.jobs/10))
	w.aging, w.rate = agingOff, 0
	w.out = filepath.Join(o.out, "warmup")
	w.logDir = filepath.Join(o.logDir, "warmup")
	w.keep = false
	return w
}
