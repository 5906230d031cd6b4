package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
)

// options are the command-line flags.
type options struct {
	jobs, naiveJobs     int
	senders             int
	naiveConcurrency    int
	runs                int
	warmupJobs          int
	partitions          int
	bodyBytes           int
	out, markdown       string
	workerBin, naiveBin string
	dispatcherBin       string
	timeBin             string
	smtpAddr            string
	smtpSource          string
	smtpSourceLib       string
	brokers             []string
	databaseURL         string
	variants            []string
	timeout             time.Duration
	logDir              string
	keep                bool
	mem                 memOptions
	// The latency rows (latency.go).
	halfLoadDuration time.Duration
	halfLoadRate     float64
	loneJobs         int
	lonePause        time.Duration
	// baselineBin is the worker built from an earlier commit (baselineRev),
	// run as the baseline row beside the postline row.
	baselineBin, baselineRev string
	workerRev                string
	// The pid files of the shared services whose CPU the whole-stack figure
	// counts (empty: not counted).
	kafkaPIDFile, postgresPIDFile, sinkPIDFile string
	// sizes are the body sizes of the sizes variant (sizes.go).
	sizes []int
}

// defaultNaiveJobs keeps the naive run near 80 s on the reference machine.
const defaultNaiveJobs = 5000

// defaultWarmupJobs is enough load for a freshly started broker's JIT to
// compile its produce and fetch paths. On the reference machine Kafka's CPU
// per mail in 20,000-job rows after a start went 0.100, 0.080, 0.036, then
// 0.035 to 0.066 ms for the next nine rows (240,000 mails), and about
// 0.020 ms from the sixteenth row on: its compiler threads, which share the
// two cores with the load, were still busy until then.
const defaultWarmupJobs = 300000

const (
	variantPostline = "postline"
	variantTemplate = "template"
	variantNaive    = "naive"
	variantSource   = "smtp-source"
	variantSourceD  = "smtp-source-d"
	variantBaseline = "baseline"
	variantOutcomes = "outcomes"
)

// knownVariants are the values -variants takes.
var knownVariants = []string{variantBaseline, variantPostline, variantHalfLoad, variantLone, variantNoIndex, variantTemplate, variantOutcomes, variantNaive, variantSource, variantSourceD, variantPostfix, variantSizes, variantMemory}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.jobs, "jobs", 20000, "jobs per variant")
	fs.IntVar(&o.naiveJobs, "naive-jobs", defaultNaiveJobs, "jobs for the naive worker, at most -jobs (0: -jobs); it runs at about 65 mails/s, so 20,000 would take 5 minutes; rates are per mail")
	fs.IntVar(&o.senders, "senders", 16, "worker SMTP sessions (POSTLINE_SENDERS) and smtp-source sessions (-s)")
	fs.IntVar(&o.naiveConcurrency, "naive-concurrency", 1, "goroutines of the naive worker (1: sequential, as written)")
	fs.IntVar(&o.runs, "runs", 1, "times to run every variant (the table shows medians)")
	fs.IntVar(&o.warmupJobs, "warmup-jobs", defaultWarmupJobs, "jobs the postline worker delivers, unmeasured, before the first run when a worker row is to run, so that the shared services are past their start-up (Kafka's JIT compiles its hot paths under load) (0: no warm-up)")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of each fresh jobs topic")
	fs.IntVar(&o.bodyBytes, "body-bytes", 1024, "text body size of each job, and smtp-source -l")
	sizes := fs.String("sizes", "1024,10240,102400", "sizes variant: body sizes in bytes, comma-separated (above 10240 the rows send fewer mails: -jobs * 10240 / size)")
	fs.StringVar(&o.out, "out", "bin/bench-e2e.txt", "file for benchstat-compatible result lines")
	fs.StringVar(&o.markdown, "md", "", "also write the Markdown report to this file")
	fs.StringVar(&o.workerBin, "worker-bin", "bin/worker", "the Postline worker binary")
	fs.StringVar(&o.naiveBin, "naive-bin", "bin/naive", "the naive baseline binary")
	fs.StringVar(&o.dispatcherBin, "dispatcher-bin", "bin/webhook-dispatcher", "the webhook dispatcher binary (outcomes variant)")
	fs.StringVar(&o.timeBin, "time-bin", "/usr/bin/time", "GNU time (must support -v -o)")
	fs.StringVar(&o.smtpAddr, "smtp", "127.0.0.1:2525", "the smtp-sink address")
	fs.StringVar(&o.smtpSource, "smtp-source", os.Getenv("POSTLINE_SMTP_SOURCE_BIN"), "Postfix smtp-source (scripts/stack.sh smtp-source-path)")
	fs.StringVar(&o.smtpSourceLib, "smtp-source-lib", "", "LD_LIBRARY_PATH for smtp-source (default: ../lib/postfix next to it)")
	stack := benchenv.AddStackFlags(fs, "PostgreSQL URL (a schema per variant is created in it)")
	variants := fs.String("variants", "baseline,postline,noindex,template,outcomes,halfload,lone,naive,smtp-source,postfix,sizes,memory", "variants to run, comma-separated (baseline: -baseline-bin with the postline settings, skipped without it; halfload: the postline worker fed steadily at half the rate of the postline row before it; lone: the postline worker given one mail at a time; noindex: the postline worker on a schema without the console's recipient search indexes; template: the worker rendering a stored template per job; outcomes: the worker with a bounce domain, return paths and the confirm phase, and the webhook dispatcher sending its events to an endpoint of the harness; smtp-source runs both smtp-source rows, smtp-source-d only the -d one; postfix: smtp-source -d through a Postfix relay the run configures; sizes: postline, smtp-source-d and postfix at each size of -sizes; memory runs the bounded row and its baselines)")
	fs.StringVar(&o.baselineBin, "baseline-bin", "", "a worker built from an earlier commit, run with the postline row's settings as the baseline row (empty: no baseline row)")
	fs.StringVar(&o.baselineRev, "baseline-rev", "", "the commit -baseline-bin was built from, for the table")
	fs.StringVar(&o.workerRev, "worker-rev", "", "what -worker-bin was built from (a commit, +uncommitted for a dirty tree), for the report")
	fs.StringVar(&o.kafkaPIDFile, "kafka-pid-file", "", "pid file of the Kafka broker, counted in the whole-stack CPU of the worker rows (empty: not counted)")
	fs.StringVar(&o.postgresPIDFile, "postgres-pid-file", "", "PostgreSQL's postmaster.pid; the postmaster, its live backends and its reaped children are counted in the worker rows (empty: not counted)")
	fs.StringVar(&o.sinkPIDFile, "sink-pid-file", "", "pid file of the smtp-sink, counted in every row's whole-stack CPU (empty: not counted)")
	fs.IntVar(&o.mem.jobs, "memory-jobs", 2000, "memory variant: jobs in the burst")
	fs.IntVar(&o.mem.recordBytes, "memory-record-bytes", 900_000, "memory variant: encoded size of each job record; the attachments (base64 in JSON) fill it")
	o.mem.limit = 512 << 20
	fs.Var(&o.mem.limit, "memory-limit", "memory variant: the bounded worker's cgroup memory limit (512M, 1G, bytes)")
	fs.StringVar(&o.mem.goMemLimit, "memory-gomemlimit", "450MiB", "memory variant: the bounded worker's GOMEMLIMIT")
	fs.BoolVar(&o.mem.baseline, "memory-baseline", true, "memory variant: also run the bytes-lifted row: the burst with the byte bounds lifted, without GOMEMLIMIT and limit")
	fs.Var(&o.mem.baselineCap, "memory-baseline-cap", "memory variant: a cgroup limit for the baseline rows too, to protect a small machine (0: none)")
	fs.StringVar(&o.mem.cgroupRoot, "memory-cgroup-root", "/sys/fs/cgroup/memory", "memory variant: the cgroup v1 memory controller to create the limit's group in")
	fs.StringVar(&o.mem.oldBin, "memory-old-bin", "", "memory variant: a worker built before the byte bounds, run as a third row without a limit (empty: no such row)")
	fs.StringVar(&o.mem.oldRev, "memory-old-rev", "", "memory variant: the commit -memory-old-bin was built from, for the table")
	fs.DurationVar(&o.mem.sample, "memory-sample", 100*time.Millisecond, "memory variant: how often VmRSS and VmHWM are polled")
	fs.DurationVar(&o.halfLoadDuration, "halfload-duration", 10*time.Second, "halfload variant: how long the steady publisher runs")
	fs.Float64Var(&o.halfLoadRate, "halfload-rate", 0, "halfload variant: the steady rate in mails/s (0: half the postline row's, which must run before it)")
	fs.IntVar(&o.loneJobs, "lone-jobs", 50, "lone variant: mails published one at a time")
	fs.DurationVar(&o.lonePause, "lone-pause", 100*time.Millisecond, "lone variant: the pause after a mail is sent before the next is published")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "longest a variant may take to deliver its jobs")
	fs.StringVar(&o.logDir, "log-dir", "", "directory for the binaries' logs and time reports (default: a new temp dir)")
	fs.BoolVar(&o.keep, "keep", false, "keep topics, schemas and the Postfix relay's directory (config, log) after the run")
	if err := benchcli.ParseFlags(fs, args); err != nil {
		return o, err
	}
	o.brokers, o.databaseURL = stack.Brokers(), stack.DatabaseURL()
	o.variants = strings.Split(*variants, ",")
	sz, err := parseSizes(*sizes)
	if err != nil {
		return o, err
	}
	o.sizes = sz
	if o.warmupJobs < 0 {
		return o, fmt.Errorf("-warmup-jobs: %d must not be negative", o.warmupJobs)
	}
	if o.naiveJobs == 0 || o.naiveJobs > o.jobs {
		o.naiveJobs = o.jobs
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"-jobs", o.jobs}, {"-naive-jobs", o.naiveJobs}, {"-senders", o.senders},
		{"-naive-concurrency", o.naiveConcurrency}, {"-runs", o.runs}, {"-partitions", o.partitions}, {"-body-bytes", o.bodyBytes},
		{"-lone-jobs", o.loneJobs}, {"-memory-jobs", o.mem.jobs}, {"-memory-record-bytes", o.mem.recordBytes}} {
		if v.n < 1 {
			return o, fmt.Errorf("%s: %d must be at least 1", v.name, v.n)
		}
	}
	for _, v := range o.variants {
		if !slices.Contains(knownVariants, v) {
			return o, fmt.Errorf("-variants: unknown variant %q (%s)", v, strings.Join(knownVariants, ", "))
		}
	}
	if o.baselineBin == "" {
		// The default list names it; without a build there is nothing to run.
		o.variants = slices.DeleteFunc(o.variants, func(v string) bool { return v == variantBaseline })
	}
	if o.mem.limit <= 0 {
		return o, errors.New("-memory-limit must be positive: the memory variant is about running under a limit")
	}
	if o.halfLoadRate < 0 {
		return o, fmt.Errorf("-halfload-rate: %g must not be negative", o.halfLoadRate)
	}
	if o.halfLoadDuration <= 0 {
		return o, fmt.Errorf("-halfload-duration: %s must be positive", o.halfLoadDuration)
	}
	if i, j := slices.Index(o.variants, variantPostline), slices.Index(o.variants, variantHalfLoad); j >= 0 && o.halfLoadRate == 0 && (i < 0 || i > j) {
		return o, fmt.Errorf("-variants: %s needs %s before it (it runs at half that row's rate)", variantHalfLoad, variantPostline)
	}
	if o.mem.sample <= 0 {
		return o, fmt.Errorf("-memory-sample: %s must be positive", o.mem.sample)
	}
	if (slices.Contains(o.variants, variantSource) || slices.Contains(o.variants, variantSourceD) || slices.Contains(o.variants, variantPostfix) || slices.Contains(o.variants, variantSizes)) && o.smtpSource == "" {
		return o, errors.New("-smtp-source is empty: pass the path from scripts/stack.sh smtp-source-path (or set POSTLINE_SMTP_SOURCE_BIN)")
	}
	if o.smtpSourceLib == "" && o.smtpSource != "" {
		o.smtpSourceLib = filepath.Join(filepath.Dir(o.smtpSource), "..", "lib", "postfix")
	}
	return o, nil
}
